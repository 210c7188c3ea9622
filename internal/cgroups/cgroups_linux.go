//go:build linux

// Package cgroups handles the cgroup root of a machine that shares its host
// with others (a netns provider's machine running a kubelet): it mounts the
// host's cgroup hierarchies again in a private mount namespace whose /sys
// has none (`ip netns exec` mounts a fresh sysfs), makes the machine's root
// in every hierarchy, kills every process under it and removes it.
//
// A root is one name: /<name> in every hierarchy mounted under
// /sys/fs/cgroup (cgroup v1 controllers, named hierarchies and cgroup2).
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tide-project/tide/internal/procinfo"
)

// Base is where the hierarchies are mounted.
const Base = "/sys/fs/cgroup"

// mount is one line of a mountinfo file, the fields we use.
type mount struct {
	Point, FSType, Source, Super string
	Opts                         string
}

// parseMountinfo reads mountinfo (proc(5)).
func parseMountinfo(b []byte) []mount {
	var out []mount
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if i < 6 || len(f) < i+4 {
			continue
		}
		out = append(out, mount{Point: unescape(f[4]), Opts: f[5], FSType: f[i+1], Source: f[i+2], Super: f[i+3]})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hierarchies returns the cgroup mounts under Base in ms.
func hierarchies(ms []mount) []mount {
	var out []mount
	for _, m := range ms {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && (m.Point == Base || strings.HasPrefix(m.Point, Base+"/")) {
			out = append(out, m)
		}
	}
	return out
}

// Mounted returns the mount points of this process's cgroup hierarchies.
func Mounted() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range hierarchies(parseMountinfo(b)) {
		out = append(out, m.Point)
	}
	return out, nil
}

// mountData returns the data argument that mounts a hierarchy again: its
// super options without rw/ro (the same v1 controllers, or name=, join the
// existing hierarchy instead of making a new one).
func mountData(super string) string {
	var keep []string
	for _, o := range strings.Split(super, ",") {
		if o != "rw" && o != "ro" && o != "" {
			keep = append(keep, o)
		}
	}
	return strings.Join(keep, ",")
}

func mountFlags(opts string) uintptr {
	var fl uintptr
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "nosuid":
			fl |= syscall.MS_NOSUID
		case "nodev":
			fl |= syscall.MS_NODEV
		case "noexec":
			fl |= syscall.MS_NOEXEC
		}
	}
	return fl
}

// EnsureMounted mounts the cgroup hierarchies of PID 1's mount namespace
// in this one when it has none (a private mount namespace with a fresh
// /sys, as `ip netns exec` gives): the same hierarchies, so cgroups made
// here are the host's. Mounts made here stay in this namespace.
func EnsureMounted() error {
	self, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if len(hierarchies(parseMountinfo(self))) > 0 {
		return nil
	}
	init, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return err
	}
	all := parseMountinfo(init)
	hs := hierarchies(all)
	if len(hs) == 0 {
		return errors.New("no cgroup hierarchy mounted on this host")
	}
	for _, m := range all {
		if m.Point == Base && m.FSType == "tmpfs" {
			if err := syscall.Mount("cgroup", Base, "tmpfs", mountFlags(m.Opts), "mode=755"); err != nil {
				return fmt.Errorf("mount tmpfs on %s: %w", Base, err)
			}
		}
	}
	for _, h := range hs {
		if err := os.MkdirAll(h.Point, 0o755); err != nil {
			return err
		}
		err := syscall.Mount(h.Source, h.Point, h.FSType, mountFlags(h.Opts), mountData(h.Super))
		if err != nil && h.FSType == "cgroup2" && mountData(h.Super) != "" {
			// cgroup2's options (nsdelegate, memory_recursiveprot) are
			// the first mount's to choose; the hierarchy is the same.
			err = syscall.Mount(h.Source, h.Point, h.FSType, mountFlags(h.Opts), "")
		}
		if err != nil {
			return fmt.Errorf("mount %s %s on %s: %w", h.FSType, mountData(h.Super), h.Point, err)
		}
	}
	return nil
}

// MakeRoot creates /<name> in every hierarchy; a new cpuset gets its
// parent's cpus and mems (it admits no task without them).
func MakeRoot(name string) error {
	pts, err := Mounted()
	if err != nil {
		return err
	}
	for _, p := range pts {
		dir := filepath.Join(p, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if _, err := os.Stat(filepath.Join(p, f)); err != nil {
				continue
			}
			if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
				continue
			}
			v, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
			}
		}
	}
	return nil
}

// Procs returns the processes in /<name> and below, in any hierarchy.
func Procs(name string) []int {
	pts, err := Mounted()
	if err != nil {
		pts = nil
	}
	if len(pts) == 0 {
		pts = hostPoints()
	}
	seen := map[int]bool{}
	var out []int
	for _, p := range pts {
		_ = filepath.WalkDir(filepath.Join(p, name), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// hostPoints are the hierarchies of PID 1's mount namespace.
func hostPoints() []string {
	b, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range hierarchies(parseMountinfo(b)) {
		out = append(out, m.Point)
	}
	return out
}

// Alive reports whether pid is a process that is not a zombie (a killed
// daemon stays a zombie until some init reaps it).
func Alive(pid int) bool {
	st, _, err := procinfo.Stat(pid)
	return err == nil && st != 'Z' && st != 'X'
}

// KillPIDs SIGKILLs pids and waits (at most timeout) until none is alive.
func KillPIDs(pids []int, timeout time.Duration) error {
	for _, p := range pids {
		if p > 1 && p != os.Getpid() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if p > 1 && p != os.Getpid() && Alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still run %v after SIGKILL", left, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill SIGKILLs every process in /<name> and below until none is left (a
// process may fork while it is killed), waiting at most timeout.
func Kill(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var pids []int
		for _, p := range Procs(name) {
			if Alive(p) {
				pids = append(pids, p)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		if err := KillPIDs(pids, time.Until(deadline)); err != nil || time.Now().After(deadline) {
			return fmt.Errorf("cgroup /%s: %w", name, errors.Join(err, errors.New("processes left")))
		}
	}
}

// Remove removes /<name> and every cgroup below it, deepest first, in
// every hierarchy (each must be empty of processes: Kill first).
func Remove(name string) error {
	pts, err := Mounted()
	if err != nil || len(pts) == 0 {
		pts = hostPoints()
	}
	var errs []error
	for _, p := range pts {
		root := filepath.Join(p, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, d := range dirs {
			// A cgroup whose last process just died can be busy a moment.
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Exists reports whether /<name> is in any hierarchy.
func Exists(name string) []string {
	pts, err := Mounted()
	if err != nil || len(pts) == 0 {
		pts = hostPoints()
	}
	var out []string
	for _, p := range pts {
		if _, err := os.Stat(filepath.Join(p, name)); err == nil {
			out = append(out, filepath.Join(p, name))
		}
	}
	return out
}
