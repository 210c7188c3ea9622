//go:build linux

package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tide-project/tide/internal/procinfo"
)

// supported reports whether this platform runs the local provider.
const supported = true

// procStat reads a process's state letter and start time.
func procStat(pid int) (state byte, startTicks uint64, err error) { return procinfo.Stat(pid) }

// startTicks returns the start time of a process.
func startTicks(pid int) (uint64, error) { return procinfo.StartTicks(pid) }

// procAlive reports whether pid is a live process (not a zombie) that
// started at start; an unknown start (0) matches nothing.
func procAlive(pid int, start uint64) bool { return start != 0 && procinfo.Alive(pid, start) }

// bootID identifies the running kernel boot; pids recorded under another
// boot name no process of ours.
func bootID() string { return procinfo.BootID() }

// setProcessGroup makes cmd's process the leader of a new process group.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
}

// signalGroup sends SIGTERM (kill false) or SIGKILL to the process group
// led by pid and to pid itself. The caller has checked pid is its worker.
func signalGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig) // ESRCH: no such group (left, or not a leader)
	_ = syscall.Kill(pid, sig)
}

// killPID sends SIGKILL to one process.
func killPID(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }

// findMarked returns the pids of the live processes (this one excepted)
// whose environment holds entry ("NAME=value") exactly or, with prefix set,
// an entry that starts with it. Processes that end or cannot be read while
// it scans are skipped.
func findMarked(entry string, prefix bool) ([]int, error) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	self := os.Getpid()
	want := []byte(entry)
	var out []int
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, want) || prefix && bytes.HasPrefix(kv, want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

// lockFile takes an exclusive flock on f without waiting.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errRootInUse
	}
	return err
}

// memTotal returns MemTotal of /proc/meminfo, in bytes.
func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/meminfo: unexpected MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, fmt.Errorf("/proc/meminfo: MemTotal %q is not a positive number", f[0])
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("/proc/meminfo: %w", err)
	}
	return 0, errors.New("/proc/meminfo: no MemTotal line")
}
