package storetest

import (
	"context"
	"slices"
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

// testReleaseHold: once a lost worker's machine is known to be deleted the
// head releases the hold on the instances requeued from it (ReleaseHold):
// they may be assigned at once, before their NotBefore. Only the holds of
// that worker, still in force, on PENDING instances are cleared; removing
// the worker (RemoveWorker) does not clear them by itself; a second release
// and a release for a worker that holds nothing change nothing.
func testReleaseHold(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	mustWorker(t, s, "x", 0)
	a, b, c := newInst("a"), newInst("b"), newInst("c")
	for _, in := range []*store.Instance{&a, &b, &c} {
		in.RestartPolicy, in.MaxRestarts = store.RestartOnFailure, 3
	}
	mustInsert(t, s, a, b, c, newInst("queued"))
	assign(t, s, "a", "w")
	assign(t, s, "b", "w")
	assign(t, s, "c", "x")
	off, hold := t0.Add(time.Minute), 75*time.Second
	if ids, err := s.MarkOffline(ctx, t0.Add(time.Second), off, hold); err != nil || len(ids) != 2 {
		t.Fatalf("mark offline: %v, %v", ids, err)
	}
	if err := s.RemoveWorker(ctx, "w", off.Add(time.Second), 2*hold); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if got := mustGet(t, s, id); got.Status != store.StatusPending || !got.NotBefore.Equal(off.Add(hold)) || got.HeldBy != "w" {
			t.Fatalf("%s after RemoveWorker: %s, not before %v held by %q; want the hold kept", id, got.Status, got.NotBefore, got.HeldBy)
		}
	}

	at := off.Add(2 * time.Second)
	ids, err := s.ReleaseHold(ctx, "w", at)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("released %v, want [a b]", ids)
	}
	for _, id := range []string{"a", "b"} {
		if got := mustGet(t, s, id); got.Status != store.StatusPending || !got.NotBefore.IsZero() || got.HeldBy != "" {
			t.Fatalf("%s released: %s, not before %v held by %q; want PENDING, unheld", id, got.Status, got.NotBefore, got.HeldBy)
		}
	}
	if got := mustGet(t, s, "c"); !got.NotBefore.Equal(off.Add(hold)) || got.HeldBy != "x" {
		t.Fatalf("c (held by x) after releasing w: not before %v held by %q", got.NotBefore, got.HeldBy)
	}
	st, err := s.SchedulingState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pending {
		if (p.ID == "a" || p.ID == "b") && (!p.NotBefore.IsZero() || p.HeldBy != "") {
			t.Fatalf("scheduling state still holds %s: %v by %q", p.ID, p.NotBefore, p.HeldBy)
		}
	}

	mustWorker(t, s, "v", 0)
	in := mustGet(t, s, "a")
	got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "a", Attempt: in.Attempt, Worker: "v", Exclusive: true}}, at)
	if err != nil || len(got) != 1 {
		t.Fatalf("assign of a released instance before its old not-before: %v, %v", got, err)
	}
	in = mustGet(t, s, "c")
	if got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "c", Attempt: in.Attempt, Worker: "v"}}, at); err != nil || len(got) != 0 {
		t.Fatalf("assign of c, still held: %v, %v", got, err)
	}

	for _, w := range []string{"w", "nobody"} {
		if ids, err := s.ReleaseHold(ctx, w, at); err != nil || len(ids) != 0 {
			t.Fatalf("release %s again: %v, %v; want nothing", w, ids, err)
		}
	}
	// A hold already over is no longer in force: nothing to release.
	if ids, err := s.ReleaseHold(ctx, "x", off.Add(hold)); err != nil || len(ids) != 0 {
		t.Fatalf("release x at its not-before: %v, %v; want nothing", ids, err)
	}
	if ids, err := s.ReleaseHold(ctx, "x", at); err != nil || !slices.Equal(ids, []string{"c"}) {
		t.Fatalf("release x: %v, %v; want [c]", ids, err)
	}
}
