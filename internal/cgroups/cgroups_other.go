//go:build !linux

package cgroups

import (
	"errors"
	"time"
)

var errLinux = errors.New("cgroups: Linux only")

// EnsureMounted fails: cgroups are Linux's.
func EnsureMounted() error { return errLinux }

// MakeRoot fails: cgroups are Linux's.
func MakeRoot(string) error { return errLinux }

// Procs finds nothing off Linux.
func Procs(string) []int { return nil }

// Kill has nothing to kill off Linux.
func Kill(string, time.Duration) error { return nil }

// KillPIDs has nothing to kill off Linux.
func KillPIDs([]int, time.Duration) error { return nil }

// Remove has nothing to remove off Linux.
func Remove(string) error { return nil }

// Exists finds nothing off Linux.
func Exists(string) []string { return nil }
