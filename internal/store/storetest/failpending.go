package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// testFailPending: only PENDING instances fail (a requeued one included,
// its past attempt's record untouched); assigned, running, ended and
// unknown ids are left as they were, and a second call fails nothing.
func testFailPending(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	mq := newInst("mq")
	mq.Restartable = true
	mustInsert(t, s, newInst("p1"), newInst("a"), newInst("r"), newInst("done"), newInst("p2"), mq)
	assign(t, s, "a", "w")
	assign(t, s, "r", "w")
	report(t, s, "w", -1, store.Report{InstanceID: "r", Attempt: 1, Status: store.ReportRunning})
	assign(t, s, "done", "w")
	report(t, s, "w", -1, store.Report{InstanceID: "done", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)})
	assign(t, s, "mq", "w")
	if moved, err := s.MoveInstance(ctx, "mq", 1, "w", store.ReasonMoved, t0); err != nil || !moved {
		t.Fatalf("move mq: %v, %v", moved, err)
	}
	now := t0.Add(30 * time.Minute)
	const why = "no capacity within 30m0s: no pool fits"
	failed, err := s.FailPending(ctx, []string{"p1", "a", "r", "done", "nope", "mq", "p2"}, why, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"p1", "mq", "p2"}; !slices.Equal(failed, want) {
		t.Fatalf("failed %v, want %v", failed, want)
	}
	for _, id := range failed {
		in := mustGet(t, s, id)
		if in.Status != store.StatusFailed || in.FailureReason != why || !in.EndedAt.Equal(now) {
			t.Fatalf("%s: %s %q ended %v", id, in.Status, in.FailureReason, in.EndedAt)
		}
	}
	for id, want := range map[string]store.Status{"a": store.StatusAssigned, "r": store.StatusRunning,
		"done": store.StatusCompleted} {
		if st := mustGet(t, s, id).Status; st != want {
			t.Fatalf("%s: %s, want %s (FailPending must touch only PENDING)", id, st, want)
		}
	}
	recs, err := s.Attempts(ctx, "mq")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Status != store.AttemptMoved {
		t.Fatalf("mq's attempts after FailPending: %+v (the moved attempt's record must stay)", recs)
	}
	again, err := s.FailPending(ctx, []string{"p1", "mq"}, why, now)
	if err != nil || len(again) != 0 {
		t.Fatalf("second call failed %v, %v; want none", again, err)
	}
	if none, err := s.FailPending(ctx, nil, why, now); err != nil || len(none) != 0 {
		t.Fatalf("empty call: %v, %v", none, err)
	}
}
