package head

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// lostRunning runs a restartable instance on w1, registers w2, and lets
// w1 go silent until the head declares it OFFLINE: the instance is
// requeued PENDING at attempt 1, held by w1. It returns the instance and
// both workers' tokens.
func lostRunning(t *testing.T) (e *env, inst, tok1, tok2 string) {
	t.Helper()
	e = newEnv(t, nil)
	tok1 = e.register("w1", 0)
	inst = e.submit(obj{"command": "r", "restart_policy": "on-failure", "max_restarts": 3})
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d, want 1", n)
	}
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "RUNNING", Port: ip(1)})
	tok2 = e.register("w2", 0)
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.heartbeat("w2", tok2, 0)
	must(t, e.h.CheckLiveness(context.Background()))
	if st := e.status("w1"); st != "OFFLINE" {
		t.Fatalf("w1 %s, want OFFLINE", st)
	}
	if in := e.instance(inst); in.Status != "PENDING" || in.Attempt != 1 || in.Restarts != 1 || in.NotBefore == nil {
		t.Fatalf("requeued from w1: %s attempt %d restarts %d not before %v", in.Status, in.Attempt, in.Restarts, in.NotBefore)
	}
	return e, inst, tok1, tok2
}

// eventsOf returns the events of the given reason the head recorded.
func eventsOf(t *testing.T, e *env, reason string) []Event {
	t.Helper()
	all, err := e.h.Events(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []Event
	for _, ev := range all {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// TestLateCompletionAccepted: w1 is declared OFFLINE while it runs attempt
// 1 of a restartable instance, which is requeued and held. The attempt
// finished on w1 meanwhile; w1 comes back (a healed partition) and reports
// it COMPLETED. Nothing has run the instance since, so it ends COMPLETED
// with that exit code, its restart taken back, with an event and a metric;
// w1's desired set does not ask for it, and it is never placed again.
func TestLateCompletionAccepted(t *testing.T) {
	e, inst, tok1, tok2 := lostRunning(t)
	e.clk.Advance(5 * time.Second)
	resp := e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	for _, d := range resp.DesiredInstances {
		if d.InstanceID == inst {
			t.Fatalf("w1 is asked to run the late-completed instance: %+v", d)
		}
	}
	in := e.instance(inst)
	if in.Status != "COMPLETED" || in.Attempt != 1 || in.Restarts != 0 || in.ExitCode == nil || *in.ExitCode != 0 ||
		in.NotBefore != nil || in.WaitingReason != "" || in.EndedAt == nil ||
		*in.EndedAt != e.clk.Now().UTC().Format(httpapi.TimeFormat) || in.AssignedTo == nil || *in.AssignedTo != "w1" {
		t.Fatalf("after the late completion: %+v", in)
	}
	if v := counterValue(t, e.h.m.late); v != 1 {
		t.Fatalf("tide_head_late_completions_total = %v, want 1", v)
	}
	evs := eventsOf(t, e, ReasonLateCompletion)
	if len(evs) != 1 || evs[0].Node != "w1" || !strings.Contains(evs[0].Message, "instance "+inst) ||
		!strings.Contains(evs[0].Message, "worker w1") || !strings.Contains(evs[0].Message, "attempt 1") ||
		!strings.Contains(evs[0].Message, "will not run again") {
		t.Fatalf("late-completion events: %+v", evs)
	}

	// The worker reports the exited process once more before it forgets it.
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	if v := counterValue(t, e.h.m.late); v != 1 || len(eventsOf(t, e, ReasonLateCompletion)) != 1 {
		t.Fatalf("a repeated report counted again: %v", v)
	}
	e.clk.Advance(e.h.fenceHold())
	e.heartbeat("w1", tok1, 0)
	e.heartbeat("w2", tok2, 0)
	if n := e.schedule(); n != 0 {
		t.Fatalf("placed %d after the hold's end; the instance had completed", n)
	}
	if in := e.instance(inst); in.Status != "COMPLETED" || in.Attempt != 1 {
		t.Fatalf("at the end: %s attempt %d", in.Status, in.Attempt)
	}
}

// TestLateCompletionAfterReplacement: once the hold is over and the
// instance runs attempt 2 on w2, w1's report of attempt 1 COMPLETED is
// stale and changes nothing (no event, no count).
func TestLateCompletionAfterReplacement(t *testing.T) {
	e, inst, tok1, tok2 := lostRunning(t)
	e.clk.Advance(e.h.fenceHold())
	e.heartbeat("w2", tok2, 0)
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d at the hold's end, want 1", n)
	}
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	in := e.instance(inst)
	if in.Status != "ASSIGNED" || in.Attempt != 2 || in.AssignedTo == nil || *in.AssignedTo != "w2" || in.Restarts != 1 {
		t.Fatalf("re-placed instance after w1's stale report: %+v", in)
	}
	if v := counterValue(t, e.h.m.late); v != 0 || len(eventsOf(t, e, ReasonLateCompletion)) != 0 {
		t.Fatalf("a stale report counted as a late completion: %v", v)
	}
}

// TestLateFailureKeepsRequeue: w1 reports the lost attempt FAILED: the
// requeue stands as its restart policy says (PENDING, held by w1).
func TestLateFailureKeepsRequeue(t *testing.T) {
	e, inst, tok1, _ := lostRunning(t)
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "FAILED", ExitCode: ip(1),
		FailureReason: "boom"})
	in := e.instance(inst)
	if in.Status != "PENDING" || in.Attempt != 1 || in.Restarts != 1 || in.NotBefore == nil ||
		!strings.Contains(in.WaitingReason, "worker w1 was lost") {
		t.Fatalf("after a late FAILED report: %+v", in)
	}
	if v := counterValue(t, e.h.m.late); v != 0 || len(eventsOf(t, e, ReasonLateCompletion)) != 0 {
		t.Fatalf("a FAILED report counted as a late completion: %v", v)
	}
}
