package head

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockName is the file in the data dir whose flock a running head holds.
const lockName = "tide.lock"

// ErrDataDirInUse is wrapped by New's error when another process holds the
// data dir.
var ErrDataDirInUse = errors.New("in use by another tide process")

// lockDataDir takes the data dir's lock before anything in it is touched, so
// that a second head on a data dir in use fails without changing anything
// that belongs to the running one (its epoch, its store). The lock is an
// flock on DataDir/tide.lock, dropped by the kernel when the process dies;
// the file holds the owner's pid, for the error message.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start head: data dir: %w", err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start head: data dir: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, ErrDataDirInUse) {
			owner := ""
			if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				owner = " (pid " + strings.TrimSpace(string(b)) + ")"
			}
			return nil, fmt.Errorf("start head: data dir %s is %w%s; stop it or use another --data-dir", dir, ErrDataDirInUse, owner)
		}
		return nil, fmt.Errorf("start head: lock %s: %w", path, err)
	}
	// Only the holder writes: the pid is for the next one's message.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// CheckConfig checks cfg as Listen and New would (defaults, and that an
// address beyond loopback has a token or Insecure) without listening or
// touching the data dir.
func CheckConfig(cfg Config) error {
	full, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	return full.checkExposure()
}

// Listen checks cfg (CheckConfig) and listens on its address, as Run does.
// Wiring that builds its head with New and serves it with Serve listens
// with it.
func Listen(cfg Config) (net.Listener, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	full, _ := cfg.withDefaults()
	ln, err := net.Listen("tcp", full.Addr)
	if err != nil {
		return nil, fmt.Errorf("head: listen on %s: %w (is another head running? use --port)", full.Addr, err)
	}
	return ln, nil
}

// StopPlacing stops the scheduler from placing instances: from now on a
// scheduling pass places nothing (pending instances stay pending, for the
// next start). Heartbeats, cancels and reports go on, so that running
// instances can be stopped and their ends recorded. It is the first step of
// a draining shutdown. Safe for concurrent use.
func (h *Head) StopPlacing() { h.noPlacing.Store(true) }
