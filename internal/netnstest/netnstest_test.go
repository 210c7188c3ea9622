package netnstest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestReserveIsExclusive: two reservations of one range never get the
// same number, a number comes back once its test ended, and a number held
// by another process is skipped.
func TestReserveIsExclusive(t *testing.T) {
	if os.Getenv("NETNSTEST_CHILD") != "" {
		return // the child of TestReserveAcrossProcesses runs only that test
	}
	var first int
	t.Run("hold", func(t *testing.T) {
		a, b := Reserve(t, 240, 243), Reserve(t, 240, 243)
		if a == b {
			t.Fatalf("two reservations got %d", a)
		}
		first = a
	})
	t.Run("again", func(t *testing.T) {
		if got := Reserve(t, 240, 243); got != first {
			t.Fatalf("after the first test ended got %d, want %d back", got, first)
		}
	})
}

// TestReserveAcrossProcesses: a number another process holds is skipped.
func TestReserveAcrossProcesses(t *testing.T) {
	if os.Getenv("NETNSTEST_CHILD") != "" {
		n := Reserve(t, 244, 246)
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
	if got := Reserve(t, 244, 246); got == held {
		t.Fatalf("got %d, which the other process holds", got)
	}
}
