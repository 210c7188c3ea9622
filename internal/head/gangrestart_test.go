package head

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// eventsOf returns the messages of the head's events with reason.
func (e *env) eventsOf(reason string) []string {
	e.t.Helper()
	evs, err := e.h.Events(context.Background(), store.EventFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}

// noPartialGang fails when some members of the gang are placed while
// others wait.
func (e *env) noPartialGang(ids []string) map[string]int {
	e.t.Helper()
	by := map[string]int{}
	for _, id := range ids {
		by[e.instance(id).Status]++
	}
	if by["PENDING"] > 0 && by["ASSIGNED"]+by["RUNNING"] > 0 {
		e.t.Fatalf("gang partly placed: %v", by)
	}
	return by
}

// TestPreemptedGangMemberRestartsTheGangWhole: a restartable gang of two
// runs on two workers; a waiting instance of higher priority preempts one
// member. The other member is then stopped and requeued too (GANG_RESTART,
// an event GangRestart naming the gang and the member that ended), so no
// pass ever has part of the gang placed while the rest waits; the gang
// waits whole while the preemptor runs, and is placed whole again, on new
// attempts, once there is room.
func TestPreemptedGangMemberRestartsTheGangWhole(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PreemptGrace = time.Second })
	tok := map[string]string{"w1": e.register("w1", 2), "w22": e.register("w22", 2)}
	g := e.submitAll(obj{"command": "x", "replicas": 2, "gang": obj{"name": "train"}, "restartable": true,
		"resource_requirements": obj{"gpu_units": 2}})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d of the gang", n)
	}
	hi := e.submit(obj{"command": "x", "priority": 10, "resource_requirements": obj{"gpu_units": 2}})
	for range 4 {
		e.schedule()
		e.noPartialGang(g)
		e.clk.Advance(600 * time.Millisecond)
	}
	if in := e.instance(hi); in.Status != "ASSIGNED" {
		t.Fatalf("preemptor %s (%s)", in.Status, in.WaitingReason)
	}
	reasons := map[string]int{}
	for _, id := range g {
		in := e.instance(id)
		if in.Status != "PENDING" || in.FailureReason == nil {
			t.Fatalf("member %s: %s", id, in.Status)
		}
		reasons[*in.FailureReason]++
	}
	if reasons[FailurePreempted] != 1 || reasons[FailureGangRestart] != 1 {
		t.Fatalf("failure reasons %v: want one %s and one %s", reasons, FailurePreempted, FailureGangRestart)
	}
	evs := e.eventsOf(ReasonGangRestart)
	if len(evs) != 1 || !strings.Contains(evs[0], "gang train: rank") || !strings.Contains(evs[0], "waiting again (PREEMPTED) after the gang started: its 1 running members") {
		t.Fatalf("GangRestart events %q", evs)
	}
	if w := e.instance(g[0]).WaitingReason; !strings.Contains(w, "gang of 2") {
		t.Fatalf("the gang waits: %q", w)
	}
	// Room again: the gang starts whole, each member on its second attempt.
	e.do("POST", "/instances/"+hi+"/cancel", obj{}, nil)
	w := *e.instance(hi).AssignedTo
	e.heartbeat(w, tok[w], 0, httpapi.InstanceReport{InstanceID: hi, Attempt: 1, Status: "CANCELLED"})
	for range 3 {
		e.schedule()
		e.noPartialGang(g)
	}
	for _, id := range g {
		if in := e.instance(id); in.Status != "ASSIGNED" || in.Attempt != 2 {
			t.Fatalf("member %s: %s attempt %d, want placed again on attempt 2", id, in.Status, in.Attempt)
		}
	}
}

// TestBrokenGangFailsWhole: a member of a started gang that ends while the
// rest runs breaks the gang, and a gang that cannot restart whole fails
// whole: its other members are cancelled and the waiting ones fail with
// GANG_BROKEN, once (an event GangFailed). A member requeued by its restart
// policy restarts a restartable gang instead; a member that completed
// breaks nothing.
func TestBrokenGangFailsWhole(t *testing.T) {
	tests := []struct {
		name        string
		restartable bool
		policy      string
		report      string // what rank 1 reports
		want        map[string]int
		event       string
	}{
		{name: "requeued by its restart policy, not restartable", policy: "on-failure", report: "FAILED",
			want: map[string]int{"FAILED": 1, "CANCELLED": 2}, event: "is waiting again"},
		{name: "failed for good, restartable", restartable: true, report: "FAILED",
			want: map[string]int{"FAILED": 1, "CANCELLED": 2}, event: "is failed"},
		{name: "requeued by its restart policy, restartable: restarted whole and placed again", restartable: true,
			policy: "on-failure", report: "FAILED", want: map[string]int{"ASSIGNED": 3}},
		{name: "completed", report: "COMPLETED", want: map[string]int{"COMPLETED": 1, "ASSIGNED": 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			tok := map[string]string{"w1": e.register("w1", 1), "w22": e.register("w22", 1), "w333": e.register("w333", 1)}
			body := obj{"command": "x", "replicas": 3, "gang": obj{"name": "g"}, "restartable": tc.restartable,
				"resource_requirements": obj{"gpu_units": 1}}
			if tc.policy != "" {
				body["restart_policy"] = tc.policy
				body["max_restarts"] = 3
			}
			g := e.submitAll(body)
			if n := e.schedule(); n != 3 {
				t.Fatalf("placed %d", n)
			}
			in := e.instance(g[1])
			e.heartbeat(*in.AssignedTo, tok[*in.AssignedTo], 0, httpapi.InstanceReport{InstanceID: g[1], Attempt: 1,
				Status: tc.report, ExitCode: ip(map[string]int{"FAILED": 1, "COMPLETED": 0}[tc.report])})
			for range 3 {
				e.schedule()
				e.noPartialGang(g)
			}
			// The cancelled members' workers report them stopped.
			for _, id := range g {
				if in := e.instance(id); in.Status == "ASSIGNED" && in.CancellationRequestedAt != nil {
					e.heartbeat(*in.AssignedTo, tok[*in.AssignedTo], 0, httpapi.InstanceReport{InstanceID: id, Attempt: in.Attempt, Status: "CANCELLED"})
				}
			}
			e.schedule()
			got := map[string]int{}
			for _, id := range g {
				in := e.instance(id)
				got[in.Status]++
				if tc.event != "" && in.Status == "FAILED" && id != g[1] &&
					(in.FailureReason == nil || !strings.HasPrefix(*in.FailureReason, ReasonGangBroken+": gang g: rank 1")) {
					t.Fatalf("member %s failed with %v", id, in.FailureReason)
				}
			}
			for s, n := range tc.want {
				if got[s] != n {
					t.Fatalf("statuses %v, want %v", got, tc.want)
				}
			}
			if tc.restartable && tc.policy != "" {
				for _, id := range g {
					if in := e.instance(id); in.Attempt != 2 {
						t.Fatalf("member %s on attempt %d, want the gang restarted whole on attempt 2", id, in.Attempt)
					}
				}
				if evs := e.eventsOf(ReasonGangRestart); len(evs) != 1 || !strings.Contains(evs[0], "rank 1 (instance "+g[1]+") is waiting again") {
					t.Fatalf("GangRestart events %q", evs)
				}
			}
			evs := e.eventsOf(ReasonGangFailed)
			if tc.event == "" {
				if len(evs) != 0 {
					t.Fatalf("GangFailed events %q", evs)
				}
				return
			}
			if len(evs) != 1 || !strings.Contains(evs[0], "rank 1 (instance "+g[1]+") "+tc.event) {
				t.Fatalf("GangFailed events %q, want one with %q", evs, tc.event)
			}
		})
	}
}

// TestRestartingGangFailsWholeWhenAMemberEnds: a restartable gang waits
// whole to start again (one member was preempted, the other stopped with
// it); a member cancelled meanwhile means the gang can never be whole
// again: the other fails with GANG_BROKEN instead of starting alone.
func TestRestartingGangFailsWholeWhenAMemberEnds(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PreemptGrace = time.Second })
	e.register("w1", 2)
	e.register("w22", 2)
	g := e.submitAll(obj{"command": "x", "replicas": 2, "gang": obj{"name": "train"}, "restartable": true,
		"resource_requirements": obj{"gpu_units": 2}})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d of the gang", n)
	}
	e.submit(obj{"command": "x", "priority": 10, "resource_requirements": obj{"gpu_units": 2}})
	for range 4 {
		e.schedule()
		e.clk.Advance(600 * time.Millisecond)
	}
	if by := e.noPartialGang(g); by["PENDING"] != 2 {
		t.Fatalf("gang %v, want it waiting whole", by)
	}
	e.do("POST", "/instances/"+g[1]+"/cancel", nil, nil)
	e.schedule()
	e.schedule()
	in := e.instance(g[0])
	if in.Status != "FAILED" || in.FailureReason == nil ||
		!strings.HasPrefix(*in.FailureReason, ReasonGangBroken+": gang train: rank 1 (instance "+g[1]+") is cancelled") {
		t.Fatalf("rank 0: %s %v", in.Status, in.FailureReason)
	}
	if evs := e.eventsOf(ReasonGangFailed); len(evs) != 1 {
		t.Fatalf("GangFailed events %q", evs)
	}
}

// TestWithdrawTellsThePools: waiting work given up on before it was placed
// (a gang failed by its max_wait, a waiting instance cancelled) is reported
// with its pool (Config.OnWithdraw), so that the pool's autoscaler cancels
// nodes still booting for it; placed work ending is not.
func TestWithdrawTellsThePools(t *testing.T) {
	var (
		mu   sync.Mutex
		pass []string
	)
	e := newEnv(t, func(c *Config) {
		c.OnWithdraw = func(pools []string) { mu.Lock(); pass = append(pass, pools...); mu.Unlock() }
	})
	toldNow := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(pass) }
	gpu := obj{"gpu_units": 1}
	e.submitAll(obj{"command": "x", "pool": "gpu", "gang": obj{"name": "g", "size": 2, "max_wait": "1m"}, "replicas": 2,
		"resource_requirements": gpu})
	lone := e.submit(obj{"command": "x", "pool": "cpu", "resource_requirements": gpu})
	e.schedule()
	if told := toldNow(); len(told) != 0 {
		t.Fatalf("told %v before anything was given up on", told)
	}
	e.clk.Advance(time.Minute)
	e.schedule()
	if told := toldNow(); len(told) != 1 || told[0] != "gpu" {
		t.Fatalf("told %v, want the gang's pool once", told)
	}
	e.do("POST", "/instances/"+lone+"/cancel", nil, nil)
	if told := toldNow(); len(told) != 2 || told[1] != "cpu" {
		t.Fatalf("told %v, want the cancelled instance's pool", told)
	}
}

// TestLostWorkerRestartsTheGangWhole: a restartable gang of two with the
// restart policy always runs on two workers; one worker goes silent and is
// marked OFFLINE, which requeues its member (held while the lost worker's
// fence stops the old attempt). The other member is stopped and requeued
// too, the gang waits whole through the hold, and then starts again whole
// on the live worker and a new one, each member on its second attempt.
func TestLostWorkerRestartsTheGangWhole(t *testing.T) {
	e := newEnv(t, nil)
	tok := map[string]string{"w1": e.register("w1", 1), "w22": e.register("w22", 1)}
	g := e.submitAll(obj{"command": "x", "replicas": 2, "gang": obj{"name": "g"}, "restartable": true,
		"restart_policy": "always", "resource_requirements": obj{"gpu_units": 1}})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d", n)
	}
	lost := *e.instance(g[0]).AssignedTo
	live := map[string]string{"w1": "w22", "w22": "w1"}[lost]
	for e.status(lost) != "OFFLINE" {
		e.clk.Advance(5 * time.Second)
		e.heartbeat(live, tok[live], -1)
		e.checkLiveness()
		e.schedule()
		e.noPartialGang(g)
	}
	tok["w333"] = e.register("w333", 1)
	for range 200 {
		e.clk.Advance(5 * time.Second)
		e.heartbeat(live, tok[live], -1)
		e.heartbeat("w333", tok["w333"], -1)
		e.checkLiveness()
		e.schedule()
		if by := e.noPartialGang(g); by["ASSIGNED"] == 2 {
			break
		}
	}
	for _, id := range g {
		if in := e.instance(id); in.Status != "ASSIGNED" || in.Attempt != 2 || *in.AssignedTo == lost {
			t.Fatalf("member %s: %s attempt %d on %v, want placed again whole on attempt 2 off %s", id, in.Status, in.Attempt, *in.AssignedTo, lost)
		}
	}
	if evs := e.eventsOf(ReasonGangRestart); len(evs) != 1 || !strings.Contains(evs[0], "is waiting again after the gang started: its 1 running members") {
		t.Fatalf("GangRestart events %q", evs)
	}
}
