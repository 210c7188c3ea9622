package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// The behaviour every store shares (placement, fencing, restarts, cancel,
// liveness, events, credentials, journal) is tested once for both stores in
// internal/store/storetest (TestSuiteSQLite, suite_test.go); this file keeps
// the SQLite store's own tests and helpers the other test files use.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "tide.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newInst(id string) Instance {
	return Instance{ID: id, Name: "n-" + id, Command: "echo " + id,
		Requests: capacity.Resources{MilliCPU: 1000, Memory: 512 << 20}, Exclusive: true}
}

func mustInsert(t *testing.T, s *Store, ins ...Instance) {
	t.Helper()
	if err := s.InsertInstances(context.Background(), ins, t0); err != nil {
		t.Fatal(err)
	}
}

func mustWorker(t *testing.T, s *Store, id string, gpus int64) {
	t.Helper()
	_, err := s.RegisterWorker(context.Background(), Registration{ID: id, Host: "10.0.0.1",
		Capacity: capacity.Resources{MilliCPU: 8000, Memory: 16 << 30, GPUs: gpus}}, t0)
	if err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, s *Store, id string) *Instance {
	t.Helper()
	in, err := s.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// assign places id on worker at its current attempt and returns the new attempt.
func assign(t *testing.T, s *Store, id, worker string, gpus ...int) int64 {
	t.Helper()
	in := mustGet(t, s, id)
	got, err := s.Assign(context.Background(), []Assignment{{InstanceID: id, Attempt: in.Attempt, Worker: worker,
		GPUIndices: gpus, Exclusive: true}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("assign %s to %s: not applied", id, worker)
	}
	return got[0].Attempt
}

func report(t *testing.T, s *Store, worker string, seen int64, rs ...Report) HeartbeatResult {
	t.Helper()
	res, err := s.ApplyHeartbeat(context.Background(), HeartbeatInput{WorkerID: worker, BootID: "b", SeenGen: seen, Reports: rs}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ip(n int) *int { return &n }

func TestOpenMigratesAndReopens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "tide.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := s.w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	e1, err := s.StartEpoch(ctx)
	if err != nil || e1 != 1 {
		t.Fatalf("StartEpoch = %d, %v; want 1", e1, err)
	}
	s.Close()
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var v int
	s.w.QueryRow(`PRAGMA user_version`).Scan(&v)
	if v != SchemaVersion {
		t.Fatalf("user_version = %d, want %d", v, SchemaVersion)
	}
	if e2, _ := s.StartEpoch(ctx); e2 != 2 {
		t.Fatalf("epoch after reopen = %d, want 2", e2)
	}
	if _, err := s.w.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, path, Options{}); err == nil {
		t.Fatal("Open of a newer schema succeeded; want an error")
	}
}

func mustDesired(t *testing.T, s *Store, w string) DesiredState {
	t.Helper()
	ds, err := s.DesiredFor(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
