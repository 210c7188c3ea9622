package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// race runs fs concurrently, released together, and waits for all of them.
func race(fs ...func()) {
	var start, done sync.WaitGroup
	start.Add(1)
	for _, f := range fs {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f()
		}()
	}
	start.Done()
	done.Wait()
}

// TestPyLetA14_8_CancelOfPendingRacesAssignment is A14.8's first window.
// PyLet's request_cancellation reads PENDING and later writes CANCELLED,
// without the controller lock, while the scheduler assigns the same
// instance in between: the instance ends CANCELLED although it was assigned
// (attempt 1, a GPU allocation, a worker told to start it), so both the
// cancel and the assignment "happened". Here each is one conditional UPDATE,
// so exactly one wins: either the cancel (never assigned, nothing
// allocated) or the assignment (then the cancel is a request the worker is
// told to carry out).
func TestPyLetA14_8_CancelOfPendingRacesAssignment(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 1)
	const rounds = 24
	cancelWon, assignWon := 0, 0
	for i := range rounds {
		id := fmt.Sprint("p", i)
		mustInsert(t, s, newInst(id))
		var (
			cr      CancelResult
			applied []Assignment
			cErr    error
			aErr    error
		)
		race(
			func() { cr, cErr = s.RequestCancel(ctx, id, time.Second, t0) },
			func() {
				applied, aErr = s.Assign(ctx, []Assignment{{InstanceID: id, Attempt: 0, Worker: "w",
					GPUIndices: []int{0}, Exclusive: true}}, t0)
			},
		)
		if cErr != nil || aErr != nil {
			t.Fatalf("round %d: cancel %v, assign %v", i, cErr, aErr)
		}
		in := mustGet(t, s, id)
		ds := mustDesired(t, s, "w")
		stopping := false
		for _, st := range ds.Stopping {
			stopping = stopping || st.InstanceID == id
		}
		for _, d := range ds.Instances {
			if d.InstanceID == id {
				t.Fatalf("round %d: cancelled instance is still desired: %+v", i, d)
			}
		}
		switch {
		case cr.Outcome == CancelDone && len(applied) == 0:
			cancelWon++
			if in.Status != StatusCancelled || in.Attempt != 0 || in.AssignedWorker != "" || len(in.GPUIndices) != 0 || stopping {
				t.Fatalf("round %d: cancel won but the instance was touched by the assignment: %+v (stopping %v)", i, in, stopping)
			}
		case cr.Outcome == CancelRequested && len(applied) == 1:
			assignWon++
			if in.Status != StatusAssigned || in.Attempt != 1 || in.DisplayStatus() != "CANCELLING" || !stopping {
				t.Fatalf("round %d: assignment won but the cancel was lost: %+v (stopping %v)", i, in, stopping)
			}
			// Finish it so the GPU is free for the next round: the worker
			// has seen the generation and does not report the instance.
			report(t, s, "w", ds.Generation)
			if got := mustGet(t, s, id).Status; got != StatusCancelled {
				t.Fatalf("round %d: acknowledged cancel left %s", i, got)
			}
		default:
			t.Fatalf("round %d: cancel %+v and %d assignments both applied (or neither)", i, cr, len(applied))
		}
	}
	t.Logf("cancel won %d rounds, assignment %d", cancelWon, assignWon)
}

// TestPyLetA14_8_TerminalReportsRaceOnce is A14.8's second window. PyLet's
// _apply_instance_report checks the current status, then calls
// transition_to_terminal, whose UPDATE is guarded only by id and attempt;
// reports and a cancel arriving together all pass the check and the last
// write wins, so a CANCELLED instance can become COMPLETED or FAILED, or its
// status and exit code can come from different reports. Here conflicting
// terminal reports for one attempt race each other and a cancel request:
// exactly one report applies, the final status and exit code are that
// report's, and nothing changes afterwards.
func TestPyLetA14_8_TerminalReportsRaceOnce(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	type outcome struct {
		status Status
		reason string
		exit   *int
	}
	reports := []Report{
		{Status: ReportCompleted, ExitCode: ip(0)},
		{Status: ReportFailed, ExitCode: ip(7)},
		{Status: ReportCancelled, ExitCode: ip(-15)},
		{Status: ReportNotFound},
	}
	// want is what the winning report leaves, given whether the cancel
	// request came before it.
	want := func(r Report, cancelFirst bool) outcome {
		switch r.Status {
		case ReportCompleted:
			return outcome{StatusCompleted, "", r.ExitCode}
		case ReportFailed:
			return outcome{StatusFailed, "", r.ExitCode}
		case ReportCancelled:
			if cancelFirst {
				return outcome{StatusCancelled, "", r.ExitCode}
			}
			return outcome{StatusFailed, ReasonKilledByWorker, r.ExitCode}
		default:
			if cancelFirst {
				return outcome{StatusCancelled, "", nil}
			}
			return outcome{StatusFailed, ReasonLostAfterRejoin, nil}
		}
	}
	wins := map[ReportStatus]int{}
	for i := range 10 {
		id := fmt.Sprint("r", i)
		mustInsert(t, s, newInst(id))
		att := assign(t, s, id, "w")
		report(t, s, "w", -1, Report{InstanceID: id, Attempt: att, Status: ReportRunning, Port: ip(1)})
		changed := make([]int, len(reports))
		var cr CancelResult
		fs := []func(){func() {
			var err error
			if cr, err = s.RequestCancel(ctx, id, time.Second, t0); err != nil {
				t.Error(err)
			}
		}}
		for j, r := range reports {
			r.InstanceID, r.Attempt = id, att
			fs = append(fs, func() {
				res, err := s.ApplyHeartbeat(ctx, HeartbeatInput{WorkerID: "w", SeenGen: -1, Reports: []Report{r}}, t0)
				if err != nil {
					t.Error(err)
				}
				changed[j] = res.Changed
			})
		}
		race(fs...)
		if t.Failed() {
			t.FailNow()
		}
		winner := -1
		for j, c := range changed {
			if c > 0 {
				if winner >= 0 {
					t.Fatalf("round %d: reports %s and %s both applied", i, reports[winner].Status, reports[j].Status)
				}
				winner = j
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no terminal report applied", i)
		}
		wins[reports[winner].Status]++
		if cr.Outcome != CancelRequested && cr.Outcome != CancelTerminal {
			t.Fatalf("round %d: cancel of a running instance = %+v", i, cr)
		}
		w := want(reports[winner], cr.Outcome == CancelRequested)
		got := mustGet(t, s, id)
		if got.Status != w.status || got.FailureReason != w.reason || !sameExit(got.ExitCode, w.exit) || got.EndedAt.IsZero() {
			t.Fatalf("round %d: %s won (cancel %d): got %s %q exit %v, want %s %q exit %v", i, reports[winner].Status,
				cr.Outcome, got.Status, got.FailureReason, got.ExitCode, w.status, w.reason, w.exit)
		}
		// Terminal is final: every report and a cancel, again, change nothing.
		for _, r := range append(reports, Report{Status: ReportRunning, Port: ip(2)}) {
			r.InstanceID, r.Attempt = id, att
			if res := report(t, s, "w", -1, r); res.Changed != 0 {
				t.Fatalf("round %d: late %s report changed a %s instance", i, r.Status, got.Status)
			}
		}
		if c, err := s.RequestCancel(ctx, id, 0, t0); err != nil || c.Outcome != CancelTerminal {
			t.Fatalf("round %d: cancel after the end = %+v, %v", i, c, err)
		}
		if again := mustGet(t, s, id); again.Status != got.Status || !sameExit(again.ExitCode, got.ExitCode) ||
			!again.EndedAt.Equal(got.EndedAt) {
			t.Fatalf("round %d: terminal instance changed: %+v → %+v", i, got, again)
		}
	}
	t.Logf("winning reports: %v", wins)
}

func sameExit(a, b *int) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
