package store

import (
	"context"
	"testing"
	"time"
)

// TestUnknownInstanceSaysWhy: an instance left UNKNOWN by an offline worker
// carries the reason WORKER_OFFLINE (issue 16: every instance a person
// looks at says why it is where it is); the reason goes once the worker
// reports the instance running again, and a requeued or cancelled one has
// none.
func TestUnknownInstanceSaysWhy(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	keep, retry, gone := newInst("keep"), newInst("retry"), newInst("gone")
	retry.RestartPolicy, retry.MaxRestarts = RestartOnFailure, 3
	mustInsert(t, s, keep, retry, gone)
	for _, id := range []string{"keep", "retry", "gone"} {
		assign(t, s, id, "w")
	}
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"keep": ReasonWorkerOffline, "gone": ReasonWorkerOffline, "retry": ""} {
		if got := mustGet(t, s, id); got.FailureReason != want {
			t.Fatalf("%s (%s): reason %q, want %q", id, got.Status, got.FailureReason, want)
		}
	}
	if _, err := s.RequestCancel(ctx, "gone", 0, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "gone"); got.Status != StatusCancelled || got.FailureReason != "" {
		t.Fatalf("cancelled UNKNOWN instance: %s, reason %q", got.Status, got.FailureReason)
	}
	report(t, s, "w", -1, Report{InstanceID: "keep", Attempt: 1, Status: ReportRunning, Port: ip(2)})
	if got := mustGet(t, s, "keep"); got.Status != StatusRunning || got.FailureReason != "" {
		t.Fatalf("resumed instance: %s, reason %q", got.Status, got.FailureReason)
	}
}
