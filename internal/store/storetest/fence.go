package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// testOfflineHoldsRequeued: an instance requeued from an OFFLINE worker is
// held out of scheduling for the hold MarkOffline is given (the lost
// worker's fence may still be stopping its old attempt); Assign refuses it
// before NotBefore and clears the hold when it applies. The desired set
// tells the worker which of its instances would be requeued (issue 16).
func testOfflineHoldsRequeued(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	keep, retry, spent, always := newInst("keep"), newInst("retry"), newInst("spent"), newInst("always")
	retry.RestartPolicy, retry.MaxRestarts = store.RestartOnFailure, 3
	spent.RestartPolicy = store.RestartOnFailure // no restarts left
	always.RestartPolicy, always.MaxRestarts = store.RestartAlways, 1
	mustInsert(t, s, keep, retry, spent, always)
	for _, id := range []string{"keep", "retry", "spent", "always"} {
		assign(t, s, id, "w")
	}
	ds, err := s.DesiredFor(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"keep": false, "retry": true, "spent": false, "always": true}
	for _, d := range ds.Instances {
		if d.RequeuedIfLost != want[d.InstanceID] {
			t.Errorf("desired %s (%s): requeued if lost %v, want %v", d.InstanceID, d.RestartPolicy, d.RequeuedIfLost, want[d.InstanceID])
		}
	}
	if len(ds.Instances) != 4 || ds.Instances[0].RestartPolicy == "" {
		t.Fatalf("desired set: %+v", ds.Instances)
	}

	off := t0.Add(time.Minute)
	hold := 45 * time.Second
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), off, hold); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"retry", "always"} {
		got := mustGet(t, s, id)
		if got.Status != store.StatusPending || !got.NotBefore.Equal(off.Add(hold)) || got.HeldBy != "w" {
			t.Fatalf("%s: %s, not before %v held by %q; want PENDING, %v, w", id, got.Status, got.NotBefore, got.HeldBy, off.Add(hold))
		}
	}
	for _, id := range []string{"keep", "spent"} {
		if got := mustGet(t, s, id); got.Status != store.StatusUnknown || !got.NotBefore.IsZero() || got.HeldBy != "" {
			t.Fatalf("%s: %s, not before %v held by %q; want UNKNOWN, unheld", id, got.Status, got.NotBefore, got.HeldBy)
		}
	}
	mustWorker(t, s, "v", 0) // registered after w went offline: ONLINE
	st, err := s.SchedulingState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 2 {
		t.Fatalf("pending: %+v", st.Pending)
	}
	for _, p := range st.Pending {
		if !p.NotBefore.Equal(off.Add(hold)) || p.HeldBy != "w" {
			t.Fatalf("scheduling state: %s not before %v held by %q", p.ID, p.NotBefore, p.HeldBy)
		}
	}

	in := mustGet(t, s, "retry")
	try := func(at time.Time) int {
		got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "retry", Attempt: in.Attempt, Worker: "v", Exclusive: true}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if n := try(off.Add(hold - time.Nanosecond)); n != 0 {
		t.Fatal("a held instance was assigned before its not-before time")
	}
	if n := try(off.Add(hold)); n != 1 {
		t.Fatal("a held instance was not assigned at its not-before time")
	}
	if got := mustGet(t, s, "retry"); got.Status != store.StatusAssigned || !got.NotBefore.IsZero() || got.HeldBy != "" {
		t.Fatalf("assigned: %s, not before %v held by %q; want the hold cleared", got.Status, got.NotBefore, got.HeldBy)
	}

	// Without a hold (a head that fences nothing) nothing is held.
	mustWorker(t, s, "u", 0)
	free := newInst("free")
	free.RestartPolicy, free.MaxRestarts = store.RestartOnFailure, 1
	mustInsert(t, s, free)
	assign(t, s, "free", "u")
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), off, 0); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "free"); got.Status != store.StatusPending || !got.NotBefore.IsZero() || got.HeldBy != "" {
		t.Fatalf("free: %s, not before %v held by %q; want PENDING, unheld", got.Status, got.NotBefore, got.HeldBy)
	}
}
