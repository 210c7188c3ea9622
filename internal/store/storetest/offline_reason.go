package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// testUnknownInstanceSaysWhy: an instance left UNKNOWN by an offline worker
// carries the reason WORKER_OFFLINE (issue 16: every instance a person
// looks at says why it is where it is); the reason goes once the worker
// reports the instance running again, and a requeued or cancelled one has
// none.
func testUnknownInstanceSaysWhy(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	keep, retry, gone := newInst("keep"), newInst("retry"), newInst("gone")
	retry.RestartPolicy, retry.MaxRestarts = store.RestartOnFailure, 3
	mustInsert(t, s, keep, retry, gone)
	for _, id := range []string{"keep", "retry", "gone"} {
		assign(t, s, id, "w")
	}
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), t0.Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"keep": store.ReasonWorkerOffline, "gone": store.ReasonWorkerOffline, "retry": ""} {
		if got := mustGet(t, s, id); got.FailureReason != want {
			t.Fatalf("%s (%s): reason %q, want %q", id, got.Status, got.FailureReason, want)
		}
	}
	if _, err := s.RequestCancel(ctx, "gone", 0, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "gone"); got.Status != store.StatusCancelled || got.FailureReason != "" {
		t.Fatalf("cancelled UNKNOWN instance: %s, reason %q", got.Status, got.FailureReason)
	}
	report(t, s, "w", -1, store.Report{InstanceID: "keep", Attempt: 1, Status: store.ReportRunning, Port: ip(2)})
	if got := mustGet(t, s, "keep"); got.Status != store.StatusRunning || got.FailureReason != "" {
		t.Fatalf("resumed instance: %s, reason %q", got.Status, got.FailureReason)
	}
}
