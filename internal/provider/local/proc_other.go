//go:build !linux

package local

import (
	"errors"
	"os"
	"os/exec"
)

// supported reports whether this platform runs the local provider: the
// provider identifies processes through /proc, which only Linux has.
const supported = false

var errNoProc = errors.New("the local provider needs Linux (/proc and process groups)")

func startTicks(int) (uint64, error)         { return 0, errNoProc }
func procAlive(int, uint64) bool             { return false }
func bootID() string                         { return "" }
func setProcessGroup(*exec.Cmd)              {}
func signalGroup(int, bool)                  {}
func killPID(int)                            {}
func findMarked(string, bool) ([]int, error) { return nil, errNoProc }
func lockFile(*os.File) error                { return errNoProc }
func memTotal() (int64, error)               { return 0, errNoProc }
