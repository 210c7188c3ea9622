package head

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/store"
)

// smallDisk mounts a tmpfs of size bytes on a fresh directory and unmounts
// it when the test ends; it skips the test when mounting is not allowed
// (not root, no CAP_SYS_ADMIN).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a full or read-only disk)")
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

// TestHeadReadOnlyDataDir: a head whose data dir became read-only (a
// remounted disk) refuses to start with a message that says so, and
// starts again with every instance once the disk is writable.
func TestHeadReadOnlyDataDir(t *testing.T) {
	disk := smallDisk(t, 16<<20)
	cfg := Config{DataDir: filepath.Join(disk, "data"), Clock: clock.NewFake(start), ReserveAfter: -1}
	e := openEnv(t, cfg)
	id := e.submit(obj{"command": "echo hi", "name": "kept"})
	e.srv.Close()
	e.h.Close()
	if out, err := exec.Command("mount", "-o", "remount,ro", disk).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v: %s", err, out)
	}
	h, err := New(context.Background(), cfg)
	if err == nil {
		h.Close()
		t.Fatal("the head started on a read-only data dir")
	}
	if !strings.Contains(err.Error(), "read-only") && !strings.Contains(err.Error(), "readonly") {
		t.Errorf("error does not say the disk is read-only: %v", err)
	}
	t.Logf("read-only data dir: %v", err)
	if out, err := exec.Command("mount", "-o", "remount,rw", disk).CombinedOutput(); err != nil {
		t.Fatalf("remount rw: %v: %s", err, out)
	}
	h, err = New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after remount rw: %v", err)
	}
	defer h.Close()
	if in, err := h.st.GetInstance(context.Background(), id); err != nil || in.Name != "kept" {
		t.Fatalf("instance after the read-only episode: %+v, %v", in, err)
	}
}

// TestHeadFullDisk fills the data dir's disk while submissions arrive:
// every submission is either acknowledged (and kept) or refused with a
// server error, never acknowledged and lost; once space is freed the head
// accepts again, and a restart finds exactly the acknowledged ones.
func TestHeadFullDisk(t *testing.T) {
	disk := smallDisk(t, 8<<20)
	cfg := Config{DataDir: filepath.Join(disk, "data"), Clock: clock.NewFake(start), ReserveAfter: -1}
	e := openEnv(t, cfg)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(disk, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, make([]byte, free-256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	refused := 0
	cmd := strings.Repeat("x", 4000)
	for i := 0; i < 2000 && refused < 20; i++ {
		var out obj
		name := fmt.Sprintf("n%d", i)
		code := e.do("POST", "/instances", obj{"command": "echo " + cmd, "name": name}, &out)
		switch {
		case code == 200:
			acked[out["instance_id"].(string)] = name
		case code >= 500:
			refused++
		default:
			t.Fatalf("submission %d on a full disk: %d %v", i, code, out)
		}
	}
	if refused == 0 {
		t.Fatalf("the disk never filled (%d acknowledged)", len(acked))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	after := e.submit(obj{"command": "echo after", "name": "after-full"})
	acked[after] = "after-full"
	e.srv.Close()
	e.h.Close()
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart after a full disk: %v", err)
	}
	defer h.Close()
	all, err := h.st.ListInstances(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	for _, in := range all {
		stored[in.ID] = in.Name
	}
	for id, name := range acked {
		if stored[id] != name {
			t.Errorf("acknowledged %s (%s) lost after the full disk", id, name)
		}
	}
	if len(stored) != len(acked) {
		t.Errorf("%d stored, %d acknowledged: a refused submission was kept", len(stored), len(acked))
	}
	t.Logf("full disk: %d acknowledged, %d refused with 5xx, 0 lost", len(acked), refused)
}
