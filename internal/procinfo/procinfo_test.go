//go:build linux

package procinfo

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"
)

func TestSelfAndAGoneProcess(t *testing.T) {
	st, start, err := Stat(os.Getpid())
	if err != nil || start == 0 || st == 'Z' {
		t.Fatalf("Stat(self) = %c, %d, %v", st, start, err)
	}
	if !Alive(os.Getpid(), start) || !Alive(os.Getpid(), 0) || Alive(os.Getpid(), start+1) {
		t.Fatal("Alive(self) wrong: a different start time must not match")
	}
	if BootID() == "" {
		t.Fatal("no boot id")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Stat(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat of a reaped process: %v, want ErrNotExist", err)
	}
	if Alive(cmd.Process.Pid, 0) {
		t.Fatal("a reaped process is alive")
	}
}
