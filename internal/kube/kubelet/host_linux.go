//go:build linux

package kubelet

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tide-project/tide/internal/cgroups"
)

func ensureCgroupMounts() error                 { return cgroups.EnsureMounted() }
func makeCgroupRoot(name string) error          { return cgroups.MakeRoot(name) }
func removeCgroup(name string) error            { return cgroups.Remove(name) }
func killAll(pids []int, t time.Duration) error { return cgroups.KillPIDs(pids, t) }

func killCgroup(name string, t time.Duration) error { return cgroups.Kill(name, t) }

// shimPIDs returns the containerd shims serving the containerd at sock:
// they leave containerd's process group and session, so they are found by
// their command line (`containerd-shim-runc-v2 ... -address <sock>`).
func shimPIDs(sock string) []int {
	dir, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(args) == 0 || !strings.Contains(filepath.Base(string(args[0])), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if string(args[i]) == "-address" && string(args[i+1]) == sock {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// shimSockets lists the shims' sockets of a containerd state directory:
// containerd 1.6 puts them in /run/containerd/s/ whatever its config says,
// and each task bundle names its own in a file "address".
func shimSockets(state string) []string {
	files, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*", "address"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "unix://"); ok {
			out = append(out, s)
		}
	}
	return out
}

// removeContainerLogLinks deletes the kubelet's /var/log/containers links
// into dir (the kubelet makes them there whatever its config says).
func removeContainerLogLinks(dir string) {
	es, _ := os.ReadDir("/var/log/containers")
	for _, e := range es {
		p := filepath.Join("/var/log/containers", e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, dir+"/") {
			_ = os.Remove(p)
		}
	}
}

// unmountUnder detaches every mount of this mount namespace under dir,
// deepest first (volumes, container root file systems, shm).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var pts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			pts = append(pts, f[4])
		}
	}
	slices.SortFunc(pts, func(a, b string) int { return len(b) - len(a) })
	for _, p := range pts {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}
