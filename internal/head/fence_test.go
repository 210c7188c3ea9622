package head

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// TestRequeuedInstanceHeldForFence (issue 16): an instance the head
// requeues from an OFFLINE worker stays PENDING, with a not-before time and
// a reason a person can read, until that worker's fence is surely over
// (fenceHold after the worker was declared OFFLINE); then it is placed on
// another worker. A restart-never instance is not held (it is UNKNOWN and
// not re-run). Heartbeat answers carry the lease and, per desired
// instance, whether the head would requeue it.
func TestRequeuedInstanceHeldForFence(t *testing.T) {
	e := newEnv(t, nil)
	tok1 := e.register("w1", 0)
	retry := e.submit(obj{"command": "r", "restart_policy": "on-failure", "max_restarts": 3, "target_worker": "w1"})
	plain := e.submit(obj{"command": "p", "target_worker": "w1"})
	e.schedule()
	resp := e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: retry, Attempt: 1, Status: "RUNNING", Port: ip(1)},
		httpapi.InstanceReport{InstanceID: plain, Attempt: 1, Status: "RUNNING", Port: ip(2)})
	cfg := e.h.cfg
	want := httpapi.WorkerLease{PollTimeoutSeconds: cfg.PollTimeout.Seconds(), OfflineAfterSeconds: cfg.OfflineAfter.Seconds(), LivenessIntervalSeconds: cfg.LivenessInterval.Seconds(),
		MarginSeconds: cfg.FenceMargin.Seconds(), GracePeriodSeconds: cfg.DefaultGracePeriod.Seconds()}
	if resp.Lease == nil || *resp.Lease != want {
		t.Fatalf("lease %+v, want %+v", resp.Lease, want)
	}
	for _, d := range resp.DesiredInstances {
		if d.RequeuedIfLost != (d.InstanceID == retry) {
			t.Fatalf("desired %s (%s): requeued_if_lost %v", d.InstanceID, d.RestartPolicy, d.RequeuedIfLost)
		}
	}

	tok2 := e.register("w2", 0)
	e.clk.Advance(cfg.OfflineAfter + time.Second)
	e.heartbeat("w2", tok2, 0)
	must(t, e.h.CheckLiveness(context.Background()))
	offAt := e.clk.Now()
	if st := e.status("w1"); st != "OFFLINE" {
		t.Fatalf("w1 %s, want OFFLINE", st)
	}
	hold := cfg.PollTimeout + cfg.LivenessInterval + 2*cfg.FenceMargin + cfg.DefaultGracePeriod
	if e.h.fenceHold() != hold {
		t.Fatalf("fence hold %s, want %s", e.h.fenceHold(), hold)
	}
	// Move the pin to w2 is not possible (target_worker); w1 comes back
	// at once, as a healed partition: the hold still applies.
	tok1 = e.register("w1", 0)
	in := e.instance(retry)
	if in.Status != "PENDING" || in.NotBefore == nil || *in.NotBefore != offAt.Add(hold).UTC().Format(httpapi.TimeFormat) {
		t.Fatalf("requeued: %s, not_before %v, want %s", in.Status, in.NotBefore, offAt.Add(hold))
	}
	if !strings.Contains(in.WaitingReason, "held until") || !strings.Contains(in.WaitingReason, "worker w1 was lost") {
		t.Fatalf("waiting reason %q does not say why it is held", in.WaitingReason)
	}
	if p := e.instance(plain); p.Status != "UNKNOWN" || p.NotBefore != nil {
		t.Fatalf("restart-never instance: %s, not_before %v", p.Status, p.NotBefore)
	}

	e.clk.Advance(hold - time.Second)
	e.heartbeat("w1", tok1, 0)
	e.heartbeat("w2", tok2, 0)
	if n := e.schedule(); n != 0 {
		t.Fatalf("placed %d before the fence was over", n)
	}
	if in := e.instance(retry); in.Status != "PENDING" || in.Attempt != 1 {
		t.Fatalf("1 s before the hold ends: %s attempt %d", in.Status, in.Attempt)
	}
	if pr := e.h.Pressure()[""]; pr.Queued() != 1 {
		t.Fatalf("a held instance should count as queued: %d", pr.Queued())
	}
	e.clk.Advance(time.Second)
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d when the hold ended, want 1", n)
	}
	in = e.instance(retry)
	if in.Status != "ASSIGNED" || in.Attempt != 2 || in.NotBefore != nil || in.WaitingReason != "" {
		t.Fatalf("after the hold: %+v", in)
	}
}

// TestFenceOff: a negative FenceMargin turns the lease off: no lease on
// the wire, no instance marked, requeued instances placed at once.
func TestFenceOff(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.FenceMargin = -1 })
	tok1 := e.register("w1", 0)
	retry := e.submit(obj{"command": "r", "restart_policy": "on-failure", "max_restarts": 3, "target_worker": "w1"})
	e.schedule()
	resp := e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: retry, Attempt: 1, Status: "RUNNING", Port: ip(1)})
	if resp.Lease != nil || resp.DesiredInstances[0].RequeuedIfLost {
		t.Fatalf("lease off, yet the answer carries %+v / %+v", resp.Lease, resp.DesiredInstances[0])
	}
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	must(t, e.h.CheckLiveness(context.Background()))
	e.register("w1", 0)
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d, want 1 at once", n)
	}
}
