package reconcile_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// TestSeed002ScalingInWithTerminationProtection plays seed 002's "Scaling in"
// walkthrough through the target-tracking policy and the reconciler. Three
// nodes run tasks; one task stops, leaving a node free of non-daemon tasks
// (here the middle one, so that "highest id first" would pick a busy node).
// M=2, N=3, reservation 66; after 15 consecutive datapoints the pool scales
// in by one, and managed termination protection makes the idle node the
// victim: no task is disrupted. Afterwards M=2, N=2, reservation 100.
func TestSeed002ScalingInWithTerminationProtection(t *testing.T) {
	spec := capacity.Elastic(0, 10)
	node := capacity.Resources{MilliCPU: 2000, Memory: 8 << 30}
	pol, err := policy.New(policy.Config{Policy: policy.TargetTracking, Nodes: spec,
		Offerings: []capacity.Offering{{Type: "m5.large", Resources: node, PricePerHour: 0.096}}})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := reconcile.New(reconcile.Config{Nodes: spec})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool.Step(t0, reconcile.Adopt{Current: []reconcile.NodeID{0, 1, 2}, Busy: []reconcile.NodeID{0, 1, 2}})
	pool.Step(t0, reconcile.DesiredChanged{Desired: 3})

	task := capacity.Instance{Requests: capacity.Resources{MilliCPU: 500, Memory: 1 << 30}}
	daemon := capacity.Instance{Requests: capacity.Resources{MilliCPU: 100, Memory: 64 << 20}, Daemon: true}
	running := map[int][]capacity.Instance{0: {task, task, daemon}, 1: {task, daemon}, 2: {task, task, daemon}}
	pressure := func() capacity.Pressure {
		var p capacity.Pressure
		for _, id := range []int{0, 1, 2} {
			if r, ok := running[id]; ok {
				p.Nodes = append(p.Nodes, capacity.Node{ID: fmt.Sprint(id), Ordinal: id, Resources: node, Running: r})
			}
		}
		return p
	}

	// Step 1: M = 3, N = 3, reservation 100.
	d := pol.Decide(policy.Input{Now: t0, Desired: 3, Pressure: pressure()})
	if f := d.TargetTracking; f.M != 3 || f.N != 3 || f.Reservation != 100 || d.Desired != 3 {
		t.Fatalf("step 1: %+v desired %d", f, d.Desired)
	}
	// Step 2: one task stops; node 1 is left with its daemon only.
	running[1] = []capacity.Instance{daemon}
	pool.Step(t0.Add(30*time.Second), reconcile.NodeBusy{ID: 1, Busy: false})

	// Steps 3-4: M = 2, N = 3, reservation 66, one datapoint a minute; the
	// fifteenth consecutive low datapoint triggers the scale-in.
	state := d.State
	for minute := 1; minute <= 15; minute++ {
		now := t0.Add(time.Duration(minute) * time.Minute)
		d = pol.Decide(policy.Input{Now: now, Desired: 3, Pressure: pressure(), State: state})
		state = d.State
		if f := d.TargetTracking; f.M != 2 || f.N != 3 || int(f.Reservation) != 66 {
			t.Fatalf("minute %d: figures %+v", minute, f)
		}
		if minute < 15 && d.Desired != 3 {
			t.Fatalf("minute %d: scaled in early to %d (%s)", minute, d.Desired, d.Reason)
		}
	}
	if d.Desired != 2 {
		t.Fatalf("after 15 datapoints: desired %d (%s), want 2", d.Desired, d.Reason)
	}
	acts := pool.Step(t0.Add(15*time.Minute), reconcile.DesiredChanged{Desired: 2, Reason: d.Reason.String()})
	var drained []reconcile.NodeID
	for _, a := range acts {
		if dr, ok := a.(reconcile.Drain); ok {
			drained = append(drained, dr.ID)
		}
	}
	if !slices.Equal(drained, []reconcile.NodeID{1}) {
		t.Fatalf("drained %v, want only the idle node 1 (actions %v)", drained, acts)
	}
	acts = pool.Step(t0.Add(15*time.Minute), reconcile.DrainComplete{ID: 1})
	if !slices.Contains(acts, reconcile.Action(reconcile.Terminate{ID: 1})) {
		t.Fatalf("no terminate after the drain: %v", acts)
	}
	delete(running, 1)

	// Step 5: M = 2, N = 2, reservation 100; no further scaling.
	d = pol.Decide(policy.Input{Now: t0.Add(16 * time.Minute), Desired: 2, Pressure: pressure(), State: d.State})
	if f := d.TargetTracking; f.M != 2 || f.N != 2 || f.Reservation != 100 || d.Desired != 2 {
		t.Fatalf("step 5: %+v desired %d", f, d.Desired)
	}
	if got := pool.Current(); !slices.Equal(got, []reconcile.NodeID{0, 2}) {
		t.Fatalf("current %v, want [0 2]", got)
	}
}
