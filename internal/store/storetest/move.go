package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/tide-project/tide/internal/store"
)

// testMoveInstance: only the current attempt of a restartable, active,
// uncancelled instance on the named worker moves; it goes back to PENDING
// with the reason, leaves the worker's desired set (generation bumped),
// and a late report of the old attempt changes nothing.
func testMoveInstance(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
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
		moved, err := s.MoveInstance(ctx, tc.id, tc.attempt, tc.worker, store.ReasonMoved, t0)
		if err != nil || moved {
			t.Fatalf("%s: moved %v, %v; want nothing", tc.name, moved, err)
		}
	}
	if gen() != g0 {
		t.Fatal("a refused move bumped the generation")
	}
	moved, err := s.MoveInstance(ctx, "r", 1, "w", store.ReasonMoved, t0)
	if err != nil || !moved {
		t.Fatalf("move r: %v, %v", moved, err)
	}
	in := mustGet(t, s, "r")
	if in.Status != store.StatusPending || in.AssignedWorker != "" || in.FailureReason != store.ReasonMoved {
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
	report(t, s, "w", -1, store.Report{InstanceID: "r", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)})
	if st := mustGet(t, s, "r").Status; st != store.StatusPending {
		t.Fatalf("stale report moved r to %s", st)
	}
	if a := assign(t, s, "r", "w2"); a != 2 {
		t.Fatalf("next attempt %d, want 2", a)
	}
	// The moved attempt's record says so.
	if got := outcomes(mustAttempts(t, s, "r")); !slices.Equal(got, []string{"w:MOVED", "w2:ASSIGNED"}) {
		t.Fatalf("attempts after a move: %v", got)
	}
}
