//go:build linux

package procinfo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat reads a process's state letter and start time (clock ticks since
// boot, field 22 of /proc/<pid>/stat). The error wraps fs.ErrNotExist when
// there is no such process.
func Stat(pid int) (state byte, startTicks uint64, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses: split after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: no command field", pid)
	}
	fields := strings.Fields(string(data[i+2:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: starttime: %w", pid, err)
	}
	return fields[0][0], ticks, nil
}

// StartTicks returns the start time of a process.
func StartTicks(pid int) (uint64, error) {
	_, t, err := Stat(pid)
	return t, err
}

// Alive reports whether pid is a live process (not a zombie) that started
// at startTicks; startTicks 0 accepts any start time.
func Alive(pid int, startTicks uint64) bool {
	st, t, err := Stat(pid)
	if err != nil || st == 'Z' || st == 'X' {
		return false
	}
	return startTicks == 0 || t == startTicks
}

// BootID identifies the running kernel boot; processes recorded under
// another boot are gone. Empty when unknown.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
