//go:build unix && !linux

package procinfo

import "syscall"

// Stat is unavailable without /proc: it reports a running process of
// unknown start when the pid exists.
func Stat(pid int) (state byte, startTicks uint64, err error) {
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, 0, err
	}
	return 'R', 0, nil
}

// StartTicks is unknown without /proc: 0.
func StartTicks(int) (uint64, error) { return 0, nil }

// Alive checks the pid only.
func Alive(pid int, _ uint64) bool { return syscall.Kill(pid, 0) == nil }

// BootID is unknown without /proc.
func BootID() string { return "" }
