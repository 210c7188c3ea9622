package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// DefaultPortLockDir is the directory of host-wide port reservations that
// every worker on this machine shares unless told otherwise:
// $TMPDIR/tide-ports.
func DefaultPortLockDir() string { return filepath.Join(os.TempDir(), "tide-ports") }

// portPool hands out instance ports from a range.
//
// A bind test alone is not enough: an instance binds $PORT some time after
// it starts, if ever, so two workers on one host (the local provider runs
// several) would both see port 15600 free and hand it out twice. A port is
// therefore first reserved host-wide: the pool takes an exclusive flock(2)
// on <lockDir>/<port>.lock and holds it, through an open descriptor, for
// as long as an instance of this worker owns the port. Only then is the
// port bind-tested against everything else on the machine.
//
// flock was chosen over a reservation file that names its owner, or a
// listener held until the process binds, because the kernel drops the lock
// when the worker's process dies, however it dies: a crashed worker leaves
// no stale reservation to clean up and no port it cannot give back, and the
// lock files themselves are never removed (removing a lock file while
// another worker opens it would let both lock different inodes). A held
// listener would keep the port from the instance itself. The descriptors
// are close-on-exec, so instances do not inherit the reservations. A worker
// restarted on its data dir takes the locks of the ports of the instances it
// adopts again (hold).
type portPool struct {
	min, max int
	lockDir  string
	used     map[int]*os.File // port -> its held lock (nil without a lock dir)
	// bindTest reports whether port can be bound now; net.Listen when nil.
	bindTest func(port int) bool
}

func newPortPool(lo, hi int, lockDir string) *portPool {
	return &portPool{min: lo, max: hi, lockDir: lockDir, used: map[int]*os.File{}}
}

// allocate returns the lowest port that no worker on this host has
// reserved and that can be bound now, reserving it; 0 when there is none.
func (pp *portPool) allocate() int {
	for p := pp.min; p <= pp.max; p++ {
		if _, mine := pp.used[p]; mine {
			continue
		}
		lock, ok := pp.reserve(p)
		if !ok {
			continue // another worker on this host holds it
		}
		if !pp.canBind(p) {
			closeLock(lock)
			continue // taken by something else on this machine
		}
		pp.used[p] = lock
		return p
	}
	return 0
}

// hold reserves port for an adopted instance; it reports false when
// another worker holds it (the port stays recorded as this worker's).
func (pp *portPool) hold(port int) bool {
	if _, mine := pp.used[port]; mine {
		return true
	}
	lock, ok := pp.reserve(port)
	pp.used[port] = lock
	return ok
}

// release gives port back to the host.
func (pp *portPool) release(port int) {
	closeLock(pp.used[port])
	delete(pp.used, port)
}

// releaseAll gives every port back (the worker stops).
func (pp *portPool) releaseAll() {
	for p := range pp.used {
		pp.release(p)
	}
}

func (pp *portPool) canBind(p int) bool {
	if pp.bindTest != nil {
		return pp.bindTest(p)
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// reserve takes the host-wide lock of port without waiting. Without a lock
// dir every port is free to reserve (nil lock). A lock dir that cannot be
// used reserves nothing: handing out a port another worker may hold is the
// bug this prevents.
func (pp *portPool) reserve(port int) (*os.File, bool) {
	if pp.lockDir == "" {
		return nil, true
	}
	f, err := openPortLock(pp.lockDir, port)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// openPortLock opens (creating) <dir>/<port>.lock. The directory is shared
// by every user's workers: sticky and world-writable like /tmp, its files
// readable and writable by all, so one user's reservation never blocks
// another user's worker from locking the same file.
func openPortLock(dir string, port int) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("port lock dir: %w", err)
	}
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm() != 0o777 {
		os.Chmod(dir, 0o777|os.ModeSticky) // best effort: only the owner may
	}
	name := filepath.Join(dir, strconv.Itoa(port)+".lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		// Another user's file we may not write: a read-only descriptor
		// still takes a flock.
		if f, err = os.Open(name); err != nil {
			return nil, err
		}
		return f, nil
	}
	if st, err := f.Stat(); err == nil && st.Mode().Perm() != 0o666 {
		f.Chmod(0o666) // best effort against the umask
	}
	return f, nil
}

func closeLock(f *os.File) {
	if f != nil {
		f.Close() // closing the last descriptor drops the flock
	}
}
