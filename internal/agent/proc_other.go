//go:build unix && !linux

package agent

import (
	"errors"
	"syscall"
)

var errNoProc = errors.New("process inspection needs Linux /proc")

// processStartTicks is unavailable here: adoption falls back to the pid.
func processStartTicks(pid int) (uint64, error) { return 0, nil }

// processAlive checks the pid only (no start time without /proc).
func processAlive(pid int, _ uint64) bool { return syscall.Kill(pid, 0) == nil }

func machineBootID() string { return "" }

func findProcessByEnv(string) (int, error) { return 0, nil }

func memoryTotal() (int64, error) { return 0, errNoProc }
