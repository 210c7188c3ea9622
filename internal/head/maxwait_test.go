package head

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// TestMaxWaitFailsWaitingNotRunning drives the max_wait sweep on a fake
// clock: an instance's own max_wait and its pool's each fail a waiting
// instance at its deadline and not a second before, with the reason "no
// capacity within <d>: <why it waits>" and a max-wait event; a running
// instance whose max_wait has long passed, a waiting one with none and
// one with a cancel request are left alone.
func TestMaxWaitFailsWaitingNotRunning(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxWait = func(pool string) time.Duration {
			if pool == "batch" {
				return 10 * time.Minute
			}
			return 0
		}
	})
	tok := e.registerIn("w1", "")
	e.registerIn("b1", "batch")
	running := e.submit(obj{"command": "sleep 1000", "max_wait": "1m", "resource_requirements": obj{"cpu_cores": 8}})
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d, want the first instance", n)
	}
	e.heartbeat("w1", tok, 0, httpapi.InstanceReport{InstanceID: running, Attempt: 1, Status: "RUNNING"})
	if st := e.instance(running).Status; st != "RUNNING" {
		t.Fatalf("first instance %s, want RUNNING", st)
	}
	own := e.submit(obj{"command": "true", "max_wait": "30m", "resource_requirements": obj{"cpu_cores": 8}})
	pooled := e.submit(obj{"command": "true", "pool": "batch", "resource_requirements": obj{"cpu_cores": 16}})
	forever := e.submit(obj{"command": "true", "resource_requirements": obj{"cpu_cores": 8}})
	cancelled := e.submit(obj{"command": "true", "max_wait": "1m", "resource_requirements": obj{"cpu_cores": 8}})
	e.schedule()
	if code := e.do("POST", "/instances/"+cancelled+"/cancel", obj{}, nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	sweep := func() []string {
		t.Helper()
		ids, err := e.h.ExpireWaiting(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	e.clk.Advance(10*time.Minute - time.Second)
	if got := sweep(); len(got) != 0 {
		t.Fatalf("failed %v a second before any deadline", got)
	}
	e.clk.Advance(time.Second)
	if got := sweep(); !slices.Equal(got, []string{pooled}) {
		t.Fatalf("at 10m failed %v, want only the batch pool's instance %s", got, pooled)
	}
	in := e.instance(pooled)
	if in.Status != "FAILED" || in.FailureReason == nil ||
		!strings.HasPrefix(*in.FailureReason, "no capacity within 10m0s: pool batch cannot fit cpu 16") {
		t.Fatalf("batch instance %s, reason %v", in.Status, strOr(in.FailureReason))
	}
	e.clk.Advance(20*time.Minute - time.Second)
	if got := sweep(); len(got) != 0 {
		t.Fatalf("failed %v a second before 30m", got)
	}
	e.clk.Advance(time.Second)
	if got := sweep(); !slices.Equal(got, []string{own}) {
		t.Fatalf("at 30m failed %v, want %s", got, own)
	}
	if in := e.instance(own); in.Status != "FAILED" || in.FailureReason == nil ||
		*in.FailureReason != "no capacity within 30m0s: insufficient free resources" {
		t.Fatalf("own max_wait instance %s, reason %v", in.Status, strOr(in.FailureReason))
	}
	e.clk.Advance(24 * time.Hour)
	if got := sweep(); len(got) != 0 {
		t.Fatalf("a day later failed %v", got)
	}
	for id, want := range map[string]string{running: "RUNNING", forever: "PENDING"} {
		if st := e.instance(id).Status; st != want {
			t.Errorf("instance %s is %s, want %s", id, st, want)
		}
	}
	if in := e.instance(cancelled); in.FailureReason != nil && strings.HasPrefix(*in.FailureReason, "no capacity") {
		t.Errorf("the cancelled instance was failed by max_wait: %v", *in.FailureReason)
	}
	evs, err := e.h.Events(context.Background(), store.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, ev := range evs {
		if ev.Reason == ReasonMaxWait {
			msgs = append(msgs, ev.Message)
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], pooled) || !strings.Contains(msgs[1], own+": no capacity within 30m0s") {
		t.Errorf("max-wait events %q", msgs)
	}
}

func strOr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestMaxWaitFailsAGangWhole: a pool's max_wait that comes due for the
// members of a gang still waiting whole fails every member in one store
// call, with one reason naming the gang; none is left PENDING to wait for
// a gang that can never start.
func TestMaxWaitFailsAGangWhole(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxWait = func(string) time.Duration { return 5 * time.Minute }
	})
	e.registerIn("w1", "")
	ids := e.submitAll(obj{"command": "true", "gang": obj{"name": "g", "size": 3},
		"resource_requirements": obj{"cpu_cores": 8}})
	if len(ids) != 3 {
		t.Fatalf("gang submit returned %v", ids)
	}
	if n := e.schedule(); n != 0 {
		t.Fatalf("placed %d instances of a gang that fits only one at a time", n)
	}
	e.clk.Advance(5 * time.Minute)
	failed, err := e.h.ExpireWaiting(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(failed)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(failed, want) {
		t.Fatalf("failed %v, want the whole gang %v", failed, want)
	}
	var reason string
	for _, id := range ids {
		in := e.instance(id)
		if in.Status != "FAILED" || in.FailureReason == nil {
			t.Fatalf("member %s: %s", id, in.Status)
		}
		if reason == "" {
			reason = *in.FailureReason
		}
		if *in.FailureReason != reason || !strings.Contains(reason, "gang g (3 instances)") {
			t.Fatalf("member %s reason %q (first %q)", id, *in.FailureReason, reason)
		}
	}
}
