package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size bytes on a fresh directory and unmounts
// it when the test ends (call it before newCluster, so the cluster's
// processes are stopped first); it skips the test when mounting is not
// allowed (not root, no CAP_SYS_ADMIN).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a full disk)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// fill writes a file in dir until the disk refuses (ENOSPC) and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for range 100000 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
	t.Fatalf("fill %s: never full", dir)
	return ""
}

// logText returns what the head serves of an instance's log.
func (cl *cluster) logText(id string) (string, error) {
	c, err := cl.c.Logs(context.Background(), id, 0, 1<<20)
	if err != nil {
		return "", err
	}
	return string(c.Content), nil
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// TestWorkerDiskFaults is issue 16's disk cases for a worker, with real
// processes: its data dir on a small tmpfs that fills up under a running
// instance and refuses a new one, and an instance's log files deleted
// while it writes them. Every instance must end once, in the right state
// (COMPLETED, or FAILED saying the disk is full), the worker must stay
// ONLINE, and output written once the disk has room again (or after the
// deletion) must be served.
func TestWorkerDiskFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	disk := smallDisk(t, 8<<20)
	cl := newCluster(t)
	cl.wdirs["w1"] = filepath.Join(disk, "w1")
	cl.startHead()
	cl.startWorker("w1", 25400)
	ctx := context.Background()

	t.Run("disk full", func(t *testing.T) {
		cl.t = t
		gate := func(name string) string { return filepath.Join(cl.dir, name) }
		a := cl.submit(spec{cmd: fmt.Sprintf(`echo before; while [ ! -e %s ]; do sleep 0.05; done; `+
			`yes "during the full disk" | head -c 20000; `+
			`while [ ! -e %s ]; do sleep 0.05; done; echo after`, gate("go1"), gate("go2"))})
		cl.waitFor(20*time.Second, "a's first line in its log", func() (bool, string) {
			s, err := cl.logText(a)
			return err == nil && strings.Contains(s, "before"), fmt.Sprint(s, err)
		})
		filler := fill(t, disk)
		full := time.Now()
		if err := os.WriteFile(gate("go1"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		b := cl.submit(spec{cmd: "echo never"})
		in := cl.waitStatus(b, "FAILED", 20*time.Second)
		if in.FailureReason == nil || !strings.Contains(*in.FailureReason, "no space left on device") {
			t.Fatalf("instance started on a full disk: FAILED with reason %v, want one that says the disk is full", deref(in.FailureReason))
		}
		t.Logf("refused on the full disk: %q", *in.FailureReason)
		if st := cl.get(a).Status; st != "RUNNING" {
			t.Fatalf("a is %s while the disk is full", st)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gate("go2"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		in = cl.waitStatus(a, "COMPLETED", 20*time.Second)
		if in.ExitCode == nil || *in.ExitCode != 0 || in.Attempt != 1 {
			t.Fatalf("a: exit %v attempt %d", deref(in.ExitCode), in.Attempt)
		}
		cl.waitFor(10*time.Second, "a's output after the disk has room again", func() (bool, string) {
			s, err := cl.logText(a)
			return err == nil && strings.Contains(s, "before") && strings.Contains(s, "after"), fmt.Sprintf("%q %v", tail(s, 400), err)
		})
		// Output is never lost silently: either all of it is there (the
		// worker's own atomic rewrites free a page now and then, and the
		// output may fit), or the log says how much was lost and why.
		s, _ := cl.logText(a)
		intact := strings.Count(s, "during the full disk\n") == 20000/21 && strings.Contains(s, "during tafter")
		noted := strings.Contains(s, "bytes of output lost: ") && strings.Contains(s, "no space left on device")
		if !intact && !noted {
			t.Fatalf("a's output was cut and its log does not say what was lost and why: %q", tail(s, 400))
		}
		t.Logf("a's output during the full disk: intact %v, loss noted in the log %v", intact, noted)
		c := cl.submit(spec{cmd: "echo fine"})
		cl.waitStatus(c, "COMPLETED", 20*time.Second)
		t.Logf("disk full for %s; a completed once, b failed with a reason, c ran after", time.Since(full).Round(time.Millisecond))
		if w, err := cl.c.Worker(ctx, "w1"); err != nil || w.Status != "ONLINE" {
			t.Fatalf("w1 after the full disk: %+v %v", w, err)
		}
	})

	t.Run("log files deleted under a running instance", func(t *testing.T) {
		cl.t = t
		gate := filepath.Join(cl.dir, "go-del")
		id := cl.submit(spec{cmd: fmt.Sprintf(`echo first; while [ ! -e %s ]; do sleep 0.05; done; echo second; sleep 0.2; echo third`, gate)})
		cl.waitFor(20*time.Second, "the first line", func() (bool, string) {
			s, err := cl.logText(id)
			return err == nil && strings.Contains(s, "first"), fmt.Sprint(s, err)
		})
		logDir := filepath.Join(cl.wdirs["w1"], "logs", id)
		if _, err := os.Stat(logDir); err != nil {
			t.Fatalf("the instance's log is not where the test expects it: %v", err)
		}
		if err := os.RemoveAll(logDir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		in := cl.waitStatus(id, "COMPLETED", 20*time.Second)
		if in.ExitCode == nil || *in.ExitCode != 0 || in.Attempt != 1 {
			t.Fatalf("exit %v attempt %d", deref(in.ExitCode), in.Attempt)
		}
		cl.waitFor(10*time.Second, "the output written after the deletion", func() (bool, string) {
			s, err := cl.logText(id)
			return err == nil && strings.Contains(s, "second") && strings.Contains(s, "third"), fmt.Sprintf("%q %v", s, err)
		})
		if s, _ := cl.logText(id); strings.Contains(s, "first") {
			t.Fatalf("deleted output served again: %q", s)
		}
	})
}
