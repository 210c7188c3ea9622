package head

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/store"
)

// fillDisk writes a file under dir until the disk refuses more (every
// block the filesystem will give) and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for i := 0; i < 1<<16; i++ { // bounded: 4 GiB
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
	t.Fatal("the disk never filled")
	return ""
}

// openEnvOn serves a head that is already open.
func openEnvOn(t *testing.T, h *Head, cfg Config) *env {
	t.Helper()
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, h: h, srv: srv, clk: cfg.Clock.(*clock.Fake), cfg: cfg, token: cfg.Token}
}

// TestHeadStartsOnFullDisk is the case TestHeadFullDisk leaves out: the
// disk is already full when the head starts. The head either refuses to
// start with a message that says the disk is full (not that the database
// is corrupt: it is not), or starts on exactly
// the stored instances, refuses submissions with a server error while the
// disk stays full, and accepts again once space is freed; a restart finds
// every acknowledged instance and none of the refused ones.
func TestHeadStartsOnFullDisk(t *testing.T) {
	disk := smallDisk(t, 8<<20)
	cfg := Config{DataDir: filepath.Join(disk, "data"), Clock: clock.NewFake(start), ReserveAfter: -1}
	e := openEnv(t, cfg)
	acked := map[string]string{}
	for i := range 20 {
		name := fmt.Sprintf("before-%d", i)
		acked[e.submit(obj{"command": "echo hi", "name": name})] = name
	}
	e.srv.Close()
	e.h.Close()
	filler := fillDisk(t, disk)

	h, err := New(context.Background(), cfg)
	if err != nil {
		if !strings.Contains(err.Error(), "full") && !strings.Contains(err.Error(), "no space") {
			t.Fatalf("the head refused a full disk without saying so: %v", err)
		}
		if errors.Is(err, store.ErrCorrupt) || strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("a full disk is reported as a corrupt database (a person would delete a good file): %v", err)
		}
		t.Logf("refused on a full disk: %v", err)
	} else {
		t.Log("started on a full disk")
		e := openEnvOn(t, h, cfg)
		all, err := h.st.ListInstances(context.Background(), store.Filter{})
		if err != nil || len(all) != len(acked) {
			t.Fatalf("on a full disk the head sees %d instances (%v), want %d", len(all), err, len(acked))
		}
		refused := 0
		for i := range 5 {
			var out obj
			code := e.do("POST", "/instances", obj{"command": "echo " + strings.Repeat("x", 4000), "name": fmt.Sprintf("full-%d", i)}, &out)
			switch {
			case code == 200:
				acked[out["instance_id"].(string)] = fmt.Sprintf("full-%d", i)
			case code >= 500:
				refused++
			default:
				t.Fatalf("submission on a full disk: %d %v", code, out)
			}
		}
		t.Logf("on the full disk: %d refused with 5xx, %d acknowledged", refused, 5-refused)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		filler = ""
		acked[e.submit(obj{"command": "echo after", "name": "after-full"})] = "after-full"
		e.srv.Close()
		h.Close()
	}
	if filler != "" {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
	h, err = New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart once space is free: %v", err)
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
			t.Errorf("acknowledged %s (%s) lost", id, name)
		}
	}
	if len(stored) != len(acked) {
		t.Errorf("%d stored, %d acknowledged: a refused submission was kept", len(stored), len(acked))
	}
}
