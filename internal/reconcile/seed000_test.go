package reconcile_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// seedWorld is the pool of seed 000's sequence diagram as the task manager
// sees it: nodes of two slots each and the tasks running on them.
type seedWorld struct {
	running map[reconcile.NodeID]int // tasks per joined node
	queued  int
}

func (w *seedWorld) pressure() capacity.Pressure {
	var p capacity.Pressure
	ids := make([]reconcile.NodeID, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := capacity.Node{ID: fmt.Sprint(id), Ordinal: int(id), Resources: capacity.CPU(2000)}
		for range w.running[id] {
			n.Running = append(n.Running, capacity.Instance{Requests: capacity.CPU(1000)})
		}
		p.Nodes = append(p.Nodes, n)
	}
	if w.queued > 0 {
		p.Pending = []capacity.Pending{{Requests: capacity.CPU(1000), Count: w.queued}}
	}
	return p
}

// TestSeed000SequenceDiagram plays seed 000's "How they interact" diagram
// through the skyward policy and the reconciler together:
// PressureReport(queued=12, inflight=4, capacity=8) → desired 6 →
// provision(2) → nodes 4 and 5 join → queue drains (inflight=2,
// capacity=12) → idle for 60 s, the tick fires → desired 2 → DrainNode 5, 4,
// 3, 2 → DrainComplete each → terminate.
func TestSeed000SequenceDiagram(t *testing.T) {
	spec := capacity.Elastic(2, 6)
	pol, err := policy.New(policy.Config{Policy: policy.Skyward, Nodes: spec, SlotsPerNode: 2,
		Cooldown: 30 * time.Second, IdleTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := reconcile.New(reconcile.Config{Nodes: spec, ProtectFirstNode: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 2, 23, 9, 0, 0, 0, time.UTC)
	world := &seedWorld{running: map[reconcile.NodeID]int{0: 1, 1: 1, 2: 1, 3: 1}, queued: 12}
	var log []string
	step := func(now time.Time, ev reconcile.Event) []reconcile.Action {
		acts := pool.Step(now, ev)
		for _, a := range acts {
			if _, note := a.(reconcile.Note); !note {
				log = append(log, fmt.Sprint(a))
			}
		}
		return acts
	}
	step(t0, reconcile.Adopt{Current: []reconcile.NodeID{0, 1, 2, 3}, Busy: []reconcile.NodeID{0, 1, 2, 3}})
	step(t0, reconcile.DesiredChanged{Desired: 4, Reason: "initial"})

	var state policy.State
	desired := 4
	decide := func(now time.Time) policy.Decision {
		d := pol.Decide(policy.Input{Now: now, Desired: desired, Pressure: world.pressure(), State: state})
		state = d.State
		if d.Desired != desired {
			desired = d.Desired
			acts := step(now, reconcile.DesiredChanged{Desired: d.Desired, Reason: d.Reason.String()})
			for _, a := range acts {
				switch a := a.(type) {
				case reconcile.Provision:
					step(now, reconcile.Provisioned{IDs: a.IDs})
				case reconcile.Drain:
					if world.running[a.ID] > 0 {
						t.Fatalf("drain of node %d that runs %d tasks", a.ID, world.running[a.ID])
					}
				}
			}
		}
		return d
	}

	// Tasks accumulate: PressureReport(queued=12, inflight=4, capacity=8).
	if d := decide(t0); d.Desired != 6 {
		t.Fatalf("desired = %d (%s), want 6", d.Desired, d.Reason)
	}
	// Nodes boot, bootstrap and join; the queue drains with more capacity.
	for _, id := range []reconcile.NodeID{4, 5} {
		step(t0.Add(40*time.Second), reconcile.NodeJoined{ID: id})
		world.running[id] = 0
	}
	world.queued = 0
	world.running = map[reconcile.NodeID]int{0: 1, 1: 1, 2: 0, 3: 0, 4: 0, 5: 0}
	for _, id := range []reconcile.NodeID{2, 3} {
		step(t0.Add(41*time.Second), reconcile.NodeBusy{ID: id, Busy: false})
	}
	// PressureReport(queued=0, inflight=2, capacity=12): 2/12 < 30 %, so once
	// the cooldown is over the low-utilization branch lowers desired to
	// max(min, ceil(2/2)+1) = 2. (TestSeed000IdleCollapse covers the same
	// drain reached through the idle branch and the timer tick.)
	d := decide(t0.Add(45 * time.Second))
	if d.Desired != 2 {
		t.Fatalf("after the queue drained: desired = %d (%s), want 2 (low utilization)", d.Desired, d.Reason)
	}
	if pool.Desired() != 2 {
		t.Fatalf("reconciler desired = %d", pool.Desired())
	}
	// The reconciler drains the highest ids first, never node 0 (the head)
	// and never the busy node 1: victims 5, 4, 3, 2.
	var drained []reconcile.NodeID
	for _, a := range strings.Split(strings.Join(log, "\n"), "\n") {
		var id reconcile.NodeID
		if _, err := fmt.Sscanf(a, "drain %d", &id); err == nil {
			drained = append(drained, id)
		}
	}
	if want := []reconcile.NodeID{5, 4, 3, 2}; !slices.Equal(drained, want) {
		t.Fatalf("drain order %v, want %v; log:\n%s", drained, want, strings.Join(log, "\n"))
	}
	// DrainComplete(5), (4), (3), (2) → terminate instances.
	for _, id := range drained {
		acts := step(t0.Add(50*time.Second), reconcile.DrainComplete{ID: id})
		if !slices.ContainsFunc(acts, func(a reconcile.Action) bool { return a == reconcile.Action(reconcile.Terminate{ID: id}) }) {
			t.Fatalf("DrainComplete(%d) gave %v, want terminate %d", id, acts, id)
		}
	}
	if got := pool.Current(); !slices.Equal(got, []reconcile.NodeID{0, 1}) || pool.State() != reconcile.Watching {
		t.Fatalf("current %v state %v, want [0 1] watching", got, pool.State())
	}

	// The remaining work finishes; idle for 60 s the timer tick replays the
	// last report and the pool stays at its minimum of 2.
	world.running = map[reconcile.NodeID]int{0: 0, 1: 0}
	if d := decide(t0.Add(200 * time.Second)); d.Desired != 2 {
		t.Fatalf("idle pool at min: desired %d (%s)", d.Desired, d.Reason)
	}
}

// TestSeed000IdleCollapse is the diagram's "idle for 60s, tick fires" step on
// its own: a six-node pool with no work at all collapses to min = 2 only
// after the idle timeout, through a tick that replays the last report, and
// the reconciler drains 5, 4, 3, 2.
func TestSeed000IdleCollapse(t *testing.T) {
	spec := capacity.Elastic(2, 6)
	pol, err := policy.New(policy.Config{Policy: policy.Skyward, Nodes: spec, SlotsPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := reconcile.New(reconcile.Config{Nodes: spec, ProtectFirstNode: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 2, 23, 9, 0, 0, 0, time.UTC)
	pool.Step(t0, reconcile.Adopt{Current: []reconcile.NodeID{0, 1, 2, 3, 4, 5}})
	pool.Step(t0, reconcile.DesiredChanged{Desired: 6})
	world := &seedWorld{running: map[reconcile.NodeID]int{0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0}}
	last := world.pressure() // the last report, replayed by every tick

	in := policy.Input{Now: t0, Desired: 6, Pressure: last}
	d := pol.Decide(in)
	for tick := 1; d.Desired == 6; tick++ {
		if tick > 10 {
			t.Fatal("the pool never shrank")
		}
		in = policy.Input{Now: t0.Add(time.Duration(tick) * 30 * time.Second), Desired: 6, Pressure: last, State: d.State}
		d = pol.Decide(in)
	}
	if d.Desired != 2 || in.Now.Sub(t0) <= 60*time.Second {
		t.Fatalf("desired %d at +%v (%s), want 2 after more than 60 s", d.Desired, in.Now.Sub(t0), d.Reason)
	}
	acts := pool.Step(in.Now, reconcile.DesiredChanged{Desired: 2, Reason: d.Reason.String()})
	var drains []string
	for _, a := range acts {
		if _, ok := a.(reconcile.Drain); ok {
			drains = append(drains, fmt.Sprint(a))
		}
	}
	if got := strings.Join(drains, ", "); got != "drain 5, drain 4, drain 3, drain 2" {
		t.Fatalf("drains: %s", got)
	}
}
