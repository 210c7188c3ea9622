//go:build unix

package head

import (
	"errors"
	"os"
	"syscall"
)

// flock takes an exclusive flock on f without waiting.
func flock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrDataDirInUse
	}
	return err
}
