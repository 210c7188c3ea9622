package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// TestMissingVenvFailsWithAReason: PyLet sources <venv>/bin/activate in the
// shell, so an instance whose venv does not exist ends FAILED with no
// failure reason (issue 19). Here it ends FAILED with a reason a person can
// act on, naming the venv and the worker; an existing venv is activated.
func TestMissingVenvFailsWithAReason(t *testing.T) {
	th := newTestHead(t)
	startWorker(t, workerConfig(t, th, "w1"))
	missing := filepath.Join(t.TempDir(), "no", "such", "venv")
	req := cmdReq("echo never")
	req.Venv = &missing
	id := th.submit(req)
	in := th.waitStatus(id, store.StatusFailed, 10*time.Second)
	if want := "venv " + missing + " not found on worker w1"; in.FailureReason != want {
		t.Fatalf("failure reason %q, want %q", in.FailureReason, want)
	}

	venv := t.TempDir()
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(venv, "bin", "activate"), []byte("export IN_VENV=yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req = cmdReq(`echo "venv=$IN_VENV"`)
	req.Venv = &venv
	ok := th.submit(req)
	th.waitStatus(ok, store.StatusCompleted, 10*time.Second)
	if out := th.logs(ok); out != "venv=yes\n" {
		t.Fatalf("log in an existing venv: %q", out)
	}

	empty := t.TempDir() // exists, but is no venv
	req = cmdReq("echo never")
	req.Venv = &empty
	bad := th.submit(req)
	in = th.waitStatus(bad, store.StatusFailed, 10*time.Second)
	if want := "venv " + empty + " on worker w1 has no bin/activate"; in.FailureReason != want {
		t.Fatalf("failure reason %q, want %q", in.FailureReason, want)
	}
}
