// Package netnstest hands network-namespace tests a /24 of 10.231.0.0/16
// that no other test on the machine uses at the same time, in this test
// process or another one (two `go test` runs of one package on a shared
// machine count from the same start). A test's namespaces, links and
// addresses are named after its number, so two tests holding the same
// number would take each other's namespaces and addresses.
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Reserve returns a number N in [from, to) whose subnet 10.231.N.0/24 is
// this test's until it ends: the first one no test holds, by a lock file
// per number in the system's temporary directory (flock, released when the
// test ends or its process dies). It fails the test when every number of
// the range is held.
func Reserve(t testing.TB, from, to int) int {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "tide-netns-test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("netns test locks: %v", err)
	}
	for n := from; n < to; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("10.231.%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatalf("netns test locks: %v", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another test holds it
			}
			t.Fatalf("netns test locks: %v", err)
		}
		t.Cleanup(func() { f.Close() }) // closing releases the lock
		return n
	}
	t.Fatalf("every subnet 10.231.%d-%d is held by another running test", from, to-1)
	return 0
}
