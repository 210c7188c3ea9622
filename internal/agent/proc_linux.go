//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tide-project/tide/internal/procinfo"
)

// processStartTicks returns the start time of a live process.
func processStartTicks(pid int) (uint64, error) { return procinfo.StartTicks(pid) }

// processAlive reports whether pid is a live (not zombie) process that
// started at startTicks, so a reused pid is not mistaken for ours.
func processAlive(pid int, startTicks uint64) bool { return procinfo.Alive(pid, startTicks) }

// machineBootID identifies the running kernel boot; processes recorded under
// another boot are gone.
func machineBootID() string { return procinfo.BootID() }

// findProcessByEnv returns the pid of a live process whose environment
// holds the entry env ("NAME=value"), or 0. It is the fallback for a process
// started just before a crash, before its pid was recorded.
func findProcessByEnv(env string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("scan processes: %w", err)
	}
	want := []byte(env)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // exited meanwhile, or another user's process
		}
		for _, kv := range bytes.Split(data, []byte{0}) {
			if bytes.Equal(kv, want) {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// memoryTotal returns the machine's memory in bytes, or the cgroup v2 limit
// of this process when that is lower.
func memoryTotal() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("detect memory: %w", err)
	}
	var total int64
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("detect memory: MemTotal: %w", err)
			}
			total = kb << 10
		}
	}
	if total == 0 {
		return 0, errors.New("detect memory: no MemTotal in /proc/meminfo")
	}
	if cg, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		// cgroup v2: a single "0::/path" line.
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", p, "memory.max")); err == nil {
					if lim, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && lim < total {
						total = lim
					}
				}
			}
		}
	}
	return total, nil
}
