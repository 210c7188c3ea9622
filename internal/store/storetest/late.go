package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// testLateCompletion: a worker declared OFFLINE (its restartable instances
// requeued PENDING, held by it, at their attempt) that comes back and
// reports one of those attempts COMPLETED ends that instance COMPLETED
// instead of it running again, when nothing has been placed since: the
// instance is still PENDING at the reported attempt and held by the
// reporting worker (even after the hold's time has passed). The restart
// the requeue counted is taken back, the hold cleared, the attempt record
// says COMPLETED, and the instance can no longer be assigned nor appears
// in a desired set. Not accepted: an instance placed again (a new
// attempt), a report of an older attempt, an instance held by another
// worker, a FAILED report, a restart-always instance. A repeated report
// changes nothing. A worker removed (RemoveWorker) that registers again
// under its name is accepted alike.
func testLateCompletion(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	mustWorker(t, s, "u", 0)
	ids := []string{"x", "y", "z", "h", "f", "al"}
	var ins []store.Instance
	for _, id := range ids {
		in := newInst(id)
		in.Pool = "p"
		in.RestartPolicy, in.MaxRestarts = store.RestartOnFailure, 3
		if id == "al" {
			in.RestartPolicy = store.RestartAlways
		}
		ins = append(ins, in)
	}
	mustInsert(t, s, ins...)
	for _, id := range []string{"x", "y", "z", "f", "al"} {
		assign(t, s, id, "w")
	}
	assign(t, s, "h", "u")
	// z's first attempt failed on w; its second runs there too.
	report(t, s, "w", -1, store.Report{InstanceID: "z", Attempt: 1, Status: store.ReportFailed, ExitCode: ip(1)})
	if att := assign(t, s, "z", "w"); att != 2 {
		t.Fatalf("z attempt %d, want 2", att)
	}
	report(t, s, "w", -1, store.Report{InstanceID: "x", Attempt: 1, Status: store.ReportRunning, Port: ip(1)})

	off, hold := t0.Add(time.Minute), 45*time.Second
	if got, err := s.MarkOffline(ctx, t0.Add(time.Second), off, hold); err != nil || len(got) != 2 {
		t.Fatalf("mark offline: %v, %v", got, err)
	}
	mustWorker(t, s, "v", 0)
	if got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "y", Attempt: 1, Worker: "v", Exclusive: true}},
		off.Add(hold)); err != nil || len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("y placed again: %v, %v; want attempt 2", got, err)
	}

	late := off.Add(2 * hold) // the hold's time is over; nothing placed x since
	if got := mustGet(t, s, "x"); got.Status != store.StatusPending || got.HeldBy != "w" || got.Restarts != 1 || got.Attempt != 1 {
		t.Fatalf("x before the late report: %s held by %q restarts %d attempt %d", got.Status, got.HeldBy, got.Restarts, got.Attempt)
	}
	hb := store.HeartbeatInput{WorkerID: "w", BootID: "b", SeenGen: -1, Reports: []store.Report{
		{InstanceID: "x", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
		{InstanceID: "y", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
		{InstanceID: "z", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
		{InstanceID: "h", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
		{InstanceID: "f", Attempt: 1, Status: store.ReportFailed, ExitCode: ip(1), FailureReason: "boom"},
		{InstanceID: "al", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
	}}
	res, err := s.ApplyHeartbeat(ctx, hb, late)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Late) != 1 || res.Late[0] != (store.LateCompletion{InstanceID: "x", Attempt: 1, Pool: "p"}) {
		t.Fatalf("late completions %+v, want x@1 in p", res.Late)
	}
	if res.Changed != 1 || res.Requeued != 0 {
		t.Fatalf("result %+v, want one change", res)
	}
	x := mustGet(t, s, "x")
	if x.Status != store.StatusCompleted || x.ExitCode == nil || *x.ExitCode != 0 || !x.EndedAt.Equal(late) ||
		x.Restarts != 0 || x.Attempt != 1 || !x.NotBefore.IsZero() || x.HeldBy != "" || x.AssignedWorker != "w" {
		t.Fatalf("x after its late completion: %+v", x)
	}
	as := mustAttempts(t, s, "x")
	if len(as) != 1 || as[0].Status != store.StatusCompleted || as[0].ExitCode == nil || *as[0].ExitCode != 0 ||
		!as[0].EndedAt.Equal(late) || as[0].Worker != "w" {
		t.Fatalf("x attempts %+v, want attempt 1 COMPLETED on w", as)
	}
	if got := mustGet(t, s, "y"); got.Status != store.StatusAssigned || got.Attempt != 2 || got.AssignedWorker != "v" {
		t.Fatalf("y (placed again) after the stale report: %s attempt %d on %q", got.Status, got.Attempt, got.AssignedWorker)
	}
	if got := mustGet(t, s, "z"); got.Status != store.StatusPending || got.Attempt != 2 || got.HeldBy != "w" || got.Restarts != 2 {
		t.Fatalf("z (older attempt reported): %s attempt %d held by %q restarts %d", got.Status, got.Attempt, got.HeldBy, got.Restarts)
	}
	if got := mustGet(t, s, "h"); got.Status != store.StatusPending || got.HeldBy != "u" || got.Restarts != 1 {
		t.Fatalf("h (held by u, reported by w): %s held by %q restarts %d", got.Status, got.HeldBy, got.Restarts)
	}
	for _, id := range []string{"f", "al"} {
		if got := mustGet(t, s, id); got.Status != store.StatusPending || got.HeldBy != "w" || got.Restarts != 1 ||
			got.ExitCode != nil || got.AssignedWorker != "" {
			t.Fatalf("%s: %s held by %q restarts %d exit %v on %q; want PENDING held by w as requeued", id,
				got.Status, got.HeldBy, got.Restarts, got.ExitCode, got.AssignedWorker)
		}
	}
	if ds := mustDesired(t, s, "w"); len(ds.Instances) != 0 || len(ds.Stopping) != 0 {
		t.Fatalf("w's desired set after the late completion: %+v", ds)
	}
	st, err := s.SchedulingState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pending {
		if p.ID == "x" {
			t.Fatalf("x still pending in the scheduling state: %+v", p)
		}
	}
	if got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "x", Attempt: 1, Worker: "v"}}, late); err != nil || len(got) != 0 {
		t.Fatalf("assign of a late-completed instance: %v, %v", got, err)
	}

	// The same heartbeat again (the worker reports until it forgets the
	// process): nothing changes.
	res, err = s.ApplyHeartbeat(ctx, hb, late.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Late) != 0 || res.Changed != 0 {
		t.Fatalf("repeated report: %+v, want no change", res)
	}
	if got := mustGet(t, s, "x"); got.Status != store.StatusCompleted || !got.EndedAt.Equal(late) || got.Restarts != 0 {
		t.Fatalf("x after a repeated report: %+v", got)
	}

	// A worker its pool controller forgot (RemoveWorker, with a hold) that
	// registers again under its name and reports the attempt completed.
	mustWorker(t, s, "r", 0)
	rm := newInst("rm")
	rm.RestartPolicy, rm.MaxRestarts = store.RestartOnFailure, 1
	mustInsert(t, s, rm)
	assign(t, s, "rm", "r")
	if err := s.RemoveWorker(ctx, "r", late, hold); err != nil {
		t.Fatal(err)
	}
	mustWorker(t, s, "r", 0)
	res = report(t, s, "r", -1, store.Report{InstanceID: "rm", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)})
	if got := mustGet(t, s, "rm"); len(res.Late) != 1 || got.Status != store.StatusCompleted || got.Restarts != 0 {
		t.Fatalf("rm after its removed worker's late report: %s restarts %d, late %+v", got.Status, got.Restarts, res.Late)
	}
}

// testLateCompletionRacesAssign: a late completion and an Assign of the
// same instance racing each other: exactly one of them applies (the
// instance ends COMPLETED at its old attempt, or runs a new attempt and
// the report is stale), never both.
func testLateCompletionRacesAssign(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	const n = 6
	var ids []string
	for i := range n {
		in := newInst(string(rune('a' + i)))
		in.RestartPolicy, in.MaxRestarts = store.RestartOnFailure, 3
		mustInsert(t, s, in)
		assign(t, s, in.ID, "w")
		ids = append(ids, in.ID)
	}
	off, hold := t0.Add(time.Minute), time.Second
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), off, hold); err != nil {
		t.Fatal(err)
	}
	mustWorker(t, s, "v", 0)
	at := off.Add(hold)
	for _, id := range ids {
		var (
			placed []store.Assignment
			res    store.HeartbeatResult
			errA   error
			errH   error
			done   = make(chan struct{})
		)
		go func() {
			defer close(done)
			placed, errA = s.Assign(ctx, []store.Assignment{{InstanceID: id, Attempt: 1, Worker: "v", Exclusive: true}}, at)
		}()
		res, errH = s.ApplyHeartbeat(ctx, store.HeartbeatInput{WorkerID: "w", BootID: "b", SeenGen: -1,
			Reports: []store.Report{{InstanceID: id, Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)}}}, at)
		<-done
		if errA != nil || errH != nil {
			t.Fatalf("%s: assign %v, heartbeat %v", id, errA, errH)
		}
		got := mustGet(t, s, id)
		switch {
		case len(placed) == 1 && len(res.Late) == 0:
			if got.Status != store.StatusAssigned || got.Attempt != 2 {
				t.Fatalf("%s placed: %s attempt %d", id, got.Status, got.Attempt)
			}
		case len(placed) == 0 && len(res.Late) == 1:
			if got.Status != store.StatusCompleted || got.Attempt != 1 {
				t.Fatalf("%s late-completed: %s attempt %d", id, got.Status, got.Attempt)
			}
		default:
			t.Fatalf("%s: placed %v and late %v: want exactly one", id, placed, res.Late)
		}
	}
}
