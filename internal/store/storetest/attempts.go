package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

func mustAttempts(t *testing.T, s Store, id string) []store.AttemptRecord {
	t.Helper()
	as, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// outcomes lists each attempt's worker and status, for comparing in one line.
func outcomes(as []store.AttemptRecord) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Worker + ":" + string(a.Status)
	}
	return out
}

// testAttemptHistory: every path that ends an attempt leaves it in the
// history with its outcome: a failure the restart policy retried, a worker
// that went offline (LOST), a late report of a fenced attempt (ignored), a
// success, a cancel; a deleted instance takes its history with it; an
// instance restarted forever keeps the newest MaxAttemptHistory attempts.
func testAttemptHistory(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w1", 0)
	in := newInst("a")
	in.RestartPolicy, in.MaxRestarts = store.RestartOnFailure, 5
	mustInsert(t, s, in)
	if as := mustAttempts(t, s, "a"); len(as) != 0 {
		t.Fatalf("pending instance has attempts %v", outcomes(as))
	}
	att := assign(t, s, "a", "w1")
	report(t, s, "w1", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportRunning, Port: ip(80)})
	if got := outcomes(mustAttempts(t, s, "a")); !slices.Equal(got, []string{"w1:RUNNING"}) {
		t.Fatalf("running: %v", got)
	}
	report(t, s, "w1", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportFailed, ExitCode: ip(3), FailureReason: "boom"})
	att = assign(t, s, "a", "w1")
	off := t0.Add(time.Minute)
	if _, err := s.MarkOffline(ctx, off, off, 0); err != nil {
		t.Fatal(err)
	}
	report(t, s, "w1", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportCompleted, ExitCode: ip(0)})
	mustWorker(t, s, "w2", 0)
	att = assign(t, s, "a", "w2")
	report(t, s, "w2", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportRunning})
	report(t, s, "w2", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportCompleted, ExitCode: ip(0)})
	as := mustAttempts(t, s, "a")
	if got, want := outcomes(as), []string{"w1:FAILED", "w1:LOST", "w2:COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if as[0].Reason != "boom" || as[0].ExitCode == nil || *as[0].ExitCode != 3 || as[0].StartedAt.IsZero() || as[0].EndedAt.IsZero() {
		t.Fatalf("failed attempt: %+v", as[0])
	}
	if !as[1].StartedAt.IsZero() || !as[1].EndedAt.Equal(off) {
		t.Fatalf("lost attempt: %+v, want never started, ended at %v", as[1], off)
	}
	if as[2].ExitCode == nil || *as[2].ExitCode != 0 || as[2].EndedAt.IsZero() {
		t.Fatalf("completed attempt: %+v", as[2])
	}
	for i, a := range as {
		if a.Attempt != int64(i+1) {
			t.Fatalf("attempt numbers %v", outcomes(as))
		}
	}
	if _, err := s.Attempts(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Attempts of unknown = %v, want ErrNotFound", err)
	}

	// A cancel ends the running attempt as CANCELLED; a delete takes the
	// history with it (a new instance of the same id starts afresh).
	mustInsert(t, s, newInst("c"))
	att = assign(t, s, "c", "w2")
	report(t, s, "w2", -1, store.Report{InstanceID: "c", Attempt: att, Status: store.ReportRunning})
	if _, err := s.RequestCancel(ctx, "c", 0, t0); err != nil {
		t.Fatal(err)
	}
	report(t, s, "w2", -1, store.Report{InstanceID: "c", Attempt: att, Status: store.ReportCancelled})
	if got := outcomes(mustAttempts(t, s, "c")); !slices.Equal(got, []string{"w2:CANCELLED"}) {
		t.Fatalf("cancelled: %v", got)
	}
	if err := s.DeleteInstance(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	mustInsert(t, s, newInst("c"))
	if got := mustAttempts(t, s, "c"); len(got) != 0 {
		t.Fatalf("a deleted instance's history outlived it: %v", outcomes(got))
	}

	// Restarted forever: the newest MaxAttemptHistory attempts are kept.
	r := newInst("r")
	r.RestartPolicy, r.MaxRestarts = store.RestartAlways, store.MaxAttemptHistory+20
	mustInsert(t, s, r)
	for range store.MaxAttemptHistory + 10 {
		att := assign(t, s, "r", "w2")
		report(t, s, "w2", -1, store.Report{InstanceID: "r", Attempt: att, Status: store.ReportCompleted, ExitCode: ip(0)})
	}
	kept := mustAttempts(t, s, "r")
	if len(kept) != store.MaxAttemptHistory || kept[0].Attempt != 11 || kept[len(kept)-1].Attempt != store.MaxAttemptHistory+10 {
		t.Fatalf("kept %d attempts %d..%d, want %d ending at %d", len(kept), kept[0].Attempt, kept[len(kept)-1].Attempt,
			store.MaxAttemptHistory, store.MaxAttemptHistory+10)
	}
}

// testCountInstances: CountInstances counts what ListInstances lists for
// the same filter, whatever its Limit.
func testCountInstances(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	for i := range 5 {
		in := newInst(fmt.Sprintf("i%d", i))
		in.Labels = map[string]string{"odd": fmt.Sprint(i%2 == 1)}
		mustInsert(t, s, in)
	}
	for _, f := range []store.Filter{{}, {Limit: 2}, {Labels: map[string]string{"odd": "true"}, Limit: 1},
		{Status: store.StatusRunning}} {
		n, err := s.CountInstances(ctx, f)
		all := f
		all.Limit = 0
		list, _ := s.ListInstances(ctx, all)
		if err != nil || n != len(list) {
			t.Errorf("CountInstances(%+v) = %d, %v; want %d", f, n, err, len(list))
		}
	}
}
