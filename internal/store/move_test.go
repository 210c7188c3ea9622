package store

import (
	"context"
	"path/filepath"
	"testing"
)

// TestRestartableColumnMigrates opens a database made by a build that knew
// four migrations: the fifth adds the restartable column, old rows read as
// not restartable, and new rows keep the flag.
func TestRestartableColumnMigrates(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Roll the file back to schema 4, with a row written then.
	for _, q := range []string{`ALTER TABLE instances DROP COLUMN restartable`, `PRAGMA user_version = 4`,
		`INSERT INTO instances (id, name, command, created_at, queued_at) VALUES ('old', 'old', 'true', 1, 1)`} {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	if s, err = Open(ctx, path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if in := mustGet(t, s, "old"); in.Restartable {
		t.Fatal("a row from schema 4 reads as restartable")
	}
	a := newInst("a")
	a.Restartable = true
	mustInsert(t, s, a, newInst("b"))
	if !mustGet(t, s, "a").Restartable || mustGet(t, s, "b").Restartable {
		t.Fatal("restartable flag not kept")
	}
}

// TestMoveInstance: only the current attempt of a restartable, active,
// uncancelled instance on the named worker moves; it goes back to PENDING
// with the reason, leaves the worker's desired set (generation bumped),
// and a late report of the old attempt changes nothing.
func TestMoveInstance(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	mustWorker(t, s, "w2", 0)
	r := newInst("r")
	r.Restartable = true
	c := newInst("c")
	c.Restartable = true
	mustInsert(t, s, r, newInst("n"), c)
	for _, id := range []string{"r", "n", "c"} {
		assign(t, s, id, "w")
	}
	if _, err := s.RequestCancel(ctx, "c", 0, t0); err != nil {
		t.Fatal(err)
	}
	gen := func() int64 {
		w, err := s.GetWorker(ctx, "w")
		if err != nil {
			t.Fatal(err)
		}
		return w.Generation
	}
	g0 := gen()
	for _, tc := range []struct {
		name, id, worker string
		attempt          int64
	}{
		{"not restartable", "n", "w", 1},
		{"cancel requested", "c", "w", 1},
		{"stale attempt", "r", "w", 0},
		{"other worker", "r", "w2", 1},
	} {
		moved, err := s.MoveInstance(ctx, tc.id, tc.attempt, tc.worker, ReasonMoved, t0)
		if err != nil || moved {
			t.Fatalf("%s: moved %v, %v; want nothing", tc.name, moved, err)
		}
	}
	if gen() != g0 {
		t.Fatal("a refused move bumped the generation")
	}
	moved, err := s.MoveInstance(ctx, "r", 1, "w", ReasonMoved, t0)
	if err != nil || !moved {
		t.Fatalf("move r: %v, %v", moved, err)
	}
	in := mustGet(t, s, "r")
	if in.Status != StatusPending || in.AssignedWorker != "" || in.FailureReason != ReasonMoved {
		t.Fatalf("after move: %s on %q, reason %q", in.Status, in.AssignedWorker, in.FailureReason)
	}
	if gen() != g0+1 {
		t.Fatal("move did not bump the worker's generation")
	}
	ds, err := s.DesiredFor(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.Instances {
		if d.InstanceID == "r" {
			t.Fatal("moved instance still in the worker's desired set")
		}
	}
	// A late report of the old attempt from the old worker changes nothing.
	report(t, s, "w", -1, Report{InstanceID: "r", Attempt: 1, Status: ReportCompleted, ExitCode: ip(0)})
	if st := mustGet(t, s, "r").Status; st != StatusPending {
		t.Fatalf("stale report moved r to %s", st)
	}
	if a := assign(t, s, "r", "w2"); a != 2 {
		t.Fatalf("next attempt %d, want 2", a)
	}
}
