package up

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

// localPool is a local pool (worker processes on this host) of one
// offering of cpus CPUs at price, with extra lines (weight, limits...).
func localPool(name string, cpus int, price float64, max int, extra string) string {
	return fmt.Sprintf(`  - name: %s
    provider: {type: local}
    nodes: [0, %d]
    offerings:
      - {type: %s-%dcpu, cpu: %d, memory: 2Gi, price: %g}
    scaling: {policy: tide, idle_timeout: 3s, batch_window: 300ms, reconcile_interval: 500ms}
%s`, name, max, name, cpus, cpus, price, extra)
}

// poolsOf returns the pool of each instance and fails the test unless
// every one is COMPLETED.
func (r *running) poolsOf(ids []string) map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		in := r.instance(id)
		if in.Status != "COMPLETED" {
			r.t.Errorf("instance %s is %s (%s), want COMPLETED", id, in.Status, in.WaitingReason)
		}
		out[in.Pool]++
	}
	return out
}

// launchedIn counts the machines launched in pool, from the events.
func (r *running) launchedIn(pool string) int {
	r.t.Helper()
	evs, err := r.cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Pool == pool && e.Reason == "launched" {
			n++
		}
	}
	return n
}

func (r *running) routedEvents() []string {
	r.t.Helper()
	evs, err := r.cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Reason == "routed" {
			out = append(out, e.Message)
		}
	}
	return out
}

// allDone waits until every instance of ids has ended.
func (r *running) allDone(ids []string, within time.Duration) {
	r.t.Helper()
	r.eventually(fmt.Sprintf("all %d instances end", len(ids)), within, func() (bool, string) {
		st := r.statuses(ids)
		return st["COMPLETED"]+st["FAILED"]+st["CANCELLED"] == len(ids), fmt.Sprint(st)
	})
}

// TestRoutingCheaperPoolRunsTheWork (issue 35): two local pools fit the
// work, the dearer one first in the file; every instance runs on worker
// processes of the cheaper pool and the dearer one launches nothing.
func TestRoutingCheaperPoolRunsTheWork(t *testing.T) {
	r := startUp(t, "pools:\n"+localPool("od", 1, 0.40, 3, "")+localPool("spot", 1, 0.10, 3, ""))
	ids := r.submit(3, "sleep 1", 1, nil)
	r.allDone(ids, 90*time.Second)
	if got := r.poolsOf(ids); got["spot"] != 3 {
		t.Errorf("instances ran in %v, want all 3 in spot", got)
	}
	if n := r.launchedIn("od"); n != 0 {
		t.Errorf("od launched %d machines", n)
	}
	if n := r.launchedIn("spot"); n == 0 {
		t.Error("spot launched no machine")
	}
	if ev := strings.Join(r.routedEvents(), "\n"); !strings.Contains(ev, "spot (weight 0, $0.10/h) chosen over od (weight 0, $0.40/h)") {
		t.Errorf("no routed event says why spot: %q", ev)
	}
}

// TestRoutingHeavierPoolWinsOverCost: with weight 10 on the dearer pool,
// the work runs there.
func TestRoutingHeavierPoolWinsOverCost(t *testing.T) {
	r := startUp(t, "pools:\n"+localPool("spot", 1, 0.10, 3, "")+localPool("od", 1, 0.40, 3, "    weight: 10\n"))
	ids := r.submit(2, "sleep 1", 1, nil)
	r.allDone(ids, 90*time.Second)
	if got := r.poolsOf(ids); got["od"] != 2 {
		t.Errorf("instances ran in %v, want both in od", got)
	}
	if n := r.launchedIn("spot"); n != 0 {
		t.Errorf("spot launched %d machines", n)
	}
}

// TestRoutingStrategySplitsABurst: a capacity-provider strategy base 2 on
// od (weight 1) and weight 3 on spot splits one submit of 10 replicas
// 2 + 2 on od and 6 on spot (±1), each run by its pool's workers.
func TestRoutingStrategySplitsABurst(t *testing.T) {
	r := startUp(t, "pools:\n"+localPool("od", 4, 0.40, 2, "")+localPool("spot", 4, 0.10, 3, "")+
		"strategy:\n  - {pool: od, base: 2, weight: 1}\n  - {pool: spot, weight: 3}\n")
	ids := r.submit(1, "sleep 1", 1, func(req *httpapi.SubmitRequest) {
		n := 10
		req.Replicas = &n
	})
	if len(ids) != 1 {
		t.Fatalf("submit returned %d ids", len(ids))
	}
	ins, err := r.cl.Instances(context.Background(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 10 {
		t.Fatalf("%d instances listed, want 10", len(ins))
	}
	ids = ids[:0]
	for _, in := range ins {
		ids = append(ids, in.InstanceID)
	}
	r.allDone(ids, 120*time.Second)
	got := r.poolsOf(ids)
	t.Logf("split: od %d, spot %d", got["od"], got["spot"])
	if got["od"] < 3 || got["od"] > 5 || got["spot"] < 5 || got["spot"] > 7 || got["od"]+got["spot"] != 10 {
		t.Errorf("split %v, want od 4 (2 base + 2) and spot 6, ±1", got)
	}
	if ev := strings.Join(r.routedEvents(), "\n"); !strings.Contains(ev, "10 instance(s) split by the strategy") {
		t.Errorf("no routed event tells the split: %q", ev)
	}
}

// TestRoutingOverflowsAPoolAtItsCPULimit: the cheaper pool has limits
// {cpu: 2}; with two one-CPU instances running on its two one-CPU nodes,
// the next work overflows to the dearer pool, and the event names the
// limit and the figures.
func TestRoutingOverflowsAPoolAtItsCPULimit(t *testing.T) {
	r := startUp(t, "pools:\n"+localPool("od", 1, 0.40, 3, "")+localPool("spot", 1, 0.10, 4, "    limits: {cpu: 2}\n"))
	long := r.submit(2, "sleep 300", 1, nil)
	r.eventually("the first two run", 60*time.Second, func() (bool, string) {
		st := r.statuses(long)
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	for _, id := range long {
		if p := r.instance(id).Pool; p != "spot" {
			t.Fatalf("instance %s is in pool %q, want spot", id, p)
		}
	}
	more := r.submit(2, "sleep 1", 1, nil)
	r.allDone(more, 90*time.Second)
	if got := r.poolsOf(more); got["od"] != 2 {
		t.Errorf("the overflow ran in %v, want od", got)
	}
	if ev := strings.Join(r.routedEvents(), "\n"); !strings.Contains(ev, "at a limit: limits.cpu 2: the pool holds 2") {
		t.Errorf("no routed event names spot's CPU limit: %q", ev)
	}
	for _, id := range long {
		if _, err := r.cl.Cancel(context.Background(), id, nil); err != nil {
			t.Error(err)
		}
	}
	r.allDone(long, 60*time.Second)
}

// TestMaxWaitFailsWaitingNotRunning: on a one-node pool, an instance runs
// while a second waits for room; the waiting one, max_wait 3s, ends FAILED
// with "no capacity within 3s: ..." at its deadline; the running one, whose
// own max_wait of 25s passes while it runs, keeps running.
func TestMaxWaitFailsWaitingNotRunning(t *testing.T) {
	r := startUp(t, "pools:\n"+localPool("one", 1, 0.10, 1, ""))
	wait := func(d string) func(*httpapi.SubmitRequest) {
		return func(req *httpapi.SubmitRequest) { req.MaxWait = &d }
	}
	run := r.submit(1, "sleep 300", 1, wait("25s"))[0]
	r.eventually("the first instance runs", 25*time.Second, func() (bool, string) {
		in := r.instance(run)
		return in.Status == "RUNNING", in.Status + " " + in.WaitingReason
	})
	queued := time.Now()
	waiter := r.submit(1, "true", 1, wait("3s"))[0]
	r.eventually("the waiting instance fails", 30*time.Second, func() (bool, string) {
		in := r.instance(waiter)
		return in.Status == "FAILED", in.Status + " " + in.WaitingReason
	})
	failedAfter := time.Since(queued)
	in := r.instance(waiter)
	reason := ""
	if in.FailureReason != nil {
		reason = *in.FailureReason
	}
	t.Logf("failed after %v: %s", failedAfter.Round(time.Millisecond), reason)
	if !strings.HasPrefix(reason, "no capacity within 3s: ") || !strings.Contains(reason, "pool one") {
		t.Errorf("failure reason %q", reason)
	}
	if failedAfter < 3*time.Second {
		t.Errorf("failed %v after its submit, before its max_wait of 3s", failedAfter)
	}
	first := r.instance(run)
	created, err := time.Parse(httpapi.TimeFormat, *first.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	// Two sweeps past the running instance's own deadline.
	time.Sleep(time.Until(created.Add(25*time.Second + 2500*time.Millisecond)))
	if in := r.instance(run); in.Status != "RUNNING" {
		t.Errorf("the running instance is %s (%v) after its max_wait passed", in.Status, in.FailureReason)
	}
	if _, err := r.cl.Cancel(context.Background(), run, nil); err != nil {
		t.Error(err)
	}
	r.allDone([]string{run}, 60*time.Second)
}
