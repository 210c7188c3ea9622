package netnstest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// The tests reserve in 60-65, which no network test uses (internal/provider/netns
// takes 100-199, internal/up 200-249, internal/assembly 250-254), so they
// race with no other test for a number.

// TestReserveIsExclusive: two reservations of one range never get the
// same number, and a number comes back once its test ended.
func TestReserveIsExclusive(t *testing.T) {
	if os.Getenv("NETNSTEST_CHILD") != "" {
		return // the child of TestReserveAcrossProcesses runs only that test
	}
	var first int
	t.Run("hold", func(t *testing.T) {
		a, b := Reserve(t, 60, 63), Reserve(t, 60, 63)
		if a == b {
			t.Fatalf("two reservations got %d", a)
		}
		first = a
	})
	t.Run("again", func(t *testing.T) {
		if got := Reserve(t, 60, 63); got != first {
			t.Fatalf("after the first test ended got %d, want %d back", got, first)
		}
	})
}

// TestReserveAcrossProcesses: a number another process holds is skipped.
func TestReserveAcrossProcesses(t *testing.T) {
	if os.Getenv("NETNSTEST_CHILD") != "" {
		n := Reserve(t, 64, 66)
		os.Stdout.WriteString(strconv.Itoa(n) + "\n")
		os.Stdin.Read(make([]byte, 1)) // hold it until the parent says so
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserveAcrossProcesses$")
	cmd.Env = append(os.Environ(), "NETNSTEST_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	buf := make([]byte, 16)
	k, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	held, err := strconv.Atoi(string(buf[:k-1]))
	if err != nil {
		t.Fatalf("child said %q", buf[:k])
	}
	if got := Reserve(t, 64, 66); got == held {
		t.Fatalf("got %d, which the other process holds", got)
	}
}
