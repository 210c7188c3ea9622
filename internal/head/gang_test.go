package head

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// submitAll submits body and returns every instance id.
func (e *env) submitAll(body obj) []string {
	e.t.Helper()
	var out httpapi.SubmitResponse
	if code := e.do("POST", "/instances", body, &out); code != 200 {
		e.t.Fatalf("submit %v: %d", body, code)
	}
	return out.InstanceIDs
}

// TestGangPlacedWholeWithRendezvousEnv: two 3-instance gangs on room for
// 4: one is placed whole, its instances get their rank and every rank's
// host in their environment, the other waits whole (never 2+2) and, its
// max_wait passed, fails whole with the reason.
func TestGangPlacedWholeWithRendezvousEnv(t *testing.T) {
	e := newEnv(t, nil)
	tok := map[string]string{"w1": e.register("w1", 2), "w22": e.register("w22", 2)}
	gpu := obj{"gpu_units": 1}
	g1 := e.submitAll(obj{"command": "x", "name": "a", "replicas": 3, "gang": true, "resource_requirements": gpu})
	e.clk.Advance(time.Second) // gang a is older: FIFO places it first
	g2 := e.submitAll(obj{"command": "x", "gang": obj{"name": "b", "size": 3, "max_wait": "1m"}, "resource_requirements": gpu})
	if len(g1) != 3 || len(g2) != 3 {
		t.Fatalf("submitted %d and %d", len(g1), len(g2))
	}
	if n := e.schedule(); n != 3 {
		t.Fatalf("placed %d, want one gang of 3", n)
	}
	hosts := map[string]string{"w1": "10.1.1.2", "w22": "10.1.1.3"}
	var byRank [3]string
	for r, id := range g1 {
		in := e.instance(id)
		if in.Status != "ASSIGNED" || in.Gang == nil || in.Gang.Name != "a" || in.Gang.Rank != r || in.Gang.Size != 3 {
			t.Fatalf("gang a rank %d: %s %+v", r, in.Status, in.Gang)
		}
		byRank[r] = hosts[*in.AssignedTo]
	}
	want := strings.Join(byRank[:], ",")
	seen := 0
	for w, tk := range tok {
		for _, d := range e.heartbeat(w, tk, -1).DesiredInstances {
			seen++
			if d.Env[EnvGangName] != "a" || d.Env[EnvGangSize] != "3" || d.Env[EnvGangHosts] != want ||
				d.Env[EnvGangRank] != map[string]string{g1[0]: "0", g1[1]: "1", g1[2]: "2"}[d.InstanceID] {
				t.Fatalf("%s on %s: env %v, want hosts %s", d.InstanceID, w, d.Env, want)
			}
		}
	}
	if seen != 3 {
		t.Fatalf("%d gang instances in the desired sets", seen)
	}
	for _, id := range g2 {
		if in := e.instance(id); in.Status != "PENDING" || !strings.Contains(in.WaitingReason, "gang of 3") {
			t.Fatalf("gang b: %s, waiting %q", in.Status, in.WaitingReason)
		}
	}
	e.clk.Advance(59 * time.Second)
	e.schedule()
	if in := e.instance(g2[0]); in.Status != "PENDING" {
		t.Fatalf("gang b %s before its max_wait", in.Status)
	}
	e.clk.Advance(time.Second)
	e.schedule()
	for _, id := range g2 {
		in := e.instance(id)
		if in.Status != "FAILED" || in.FailureReason == nil || !strings.Contains(*in.FailureReason, "gang b (3 instances) not placed within 1m0s") {
			t.Fatalf("gang b after max_wait: %s %v", in.Status, in.FailureReason)
		}
	}
	if in := e.instance(g1[0]); in.Status != "ASSIGNED" {
		t.Fatalf("gang a %s", in.Status)
	}
}

// TestPriorityPreemptsRestartableOnly: on a full worker of a pool that
// cannot grow, a waiting instance of higher priority preempts the
// restartable one of lower priority (an event names both, the victim runs
// on for the grace, then is requeued) and never a non-restartable one.
func TestPriorityPreemptsRestartableOnly(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PreemptGrace = 5 * time.Second })
	e.register("w1", 2)
	gpu := obj{"gpu_units": 1}
	lo := e.submit(obj{"command": "x", "restartable": true, "priority": 1, "resource_requirements": gpu})
	fixed := e.submit(obj{"command": "x", "priority": -3, "resource_requirements": gpu})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d", n)
	}
	hi := e.submit(obj{"command": "x", "priority": 10, "resource_requirements": gpu})
	e.schedule()
	evs, err := e.h.Events(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	for _, ev := range evs {
		if ev.Reason == ReasonPreempting {
			msg = ev.Message
		}
	}
	if !strings.Contains(msg, hi) || !strings.Contains(msg, lo) || strings.Contains(msg, fixed) {
		t.Fatalf("preempting event %q, want %s and %s named", msg, hi, lo)
	}
	e.clk.Advance(4 * time.Second)
	e.schedule()
	if in := e.instance(lo); in.Status != "ASSIGNED" {
		t.Fatalf("victim %s within its grace", in.Status)
	}
	e.clk.Advance(time.Second)
	e.schedule() // the grace passed: lo is requeued
	e.schedule() // hi takes its GPU
	if in := e.instance(hi); in.Status != "ASSIGNED" {
		t.Fatalf("preemptor %s", in.Status)
	}
	if in := e.instance(lo); in.Status != "PENDING" || in.FailureReason == nil || *in.FailureReason != FailurePreempted {
		t.Fatalf("victim %s %v", in.Status, in.FailureReason)
	}
	if in := e.instance(fixed); in.Status != "ASSIGNED" || in.Attempt != 1 {
		t.Fatalf("non-restartable %s attempt %d", in.Status, in.Attempt)
	}
	// Now only non-restartable and equal-priority work runs: nothing more is preempted.
	top := e.submit(obj{"command": "x", "priority": 10, "resource_requirements": gpu})
	e.clk.Advance(time.Minute)
	e.schedule()
	e.schedule()
	if in := e.instance(top); in.Status != "PENDING" {
		t.Fatalf("top %s", in.Status)
	}
	if in := e.instance(fixed); in.Status != "ASSIGNED" || in.Attempt != 1 {
		t.Fatalf("non-restartable preempted: %s attempt %d", in.Status, in.Attempt)
	}
}
