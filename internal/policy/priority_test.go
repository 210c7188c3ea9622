package policy

import (
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

var (
	g8  = capacity.Offering{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 24, Resources: capacity.Resources{MilliCPU: 96000, Memory: 768 * ttGi, GPUs: 8}}
	g2  = capacity.Offering{Type: "g2", Kind: capacity.OnDemand, PricePerHour: 7, Resources: capacity.Resources{MilliCPU: 24000, Memory: 192 * ttGi, GPUs: 2}}
	gpu = func(n int64) capacity.Resources {
		return capacity.Resources{MilliCPU: 4000, Memory: 32 * ttGi, GPUs: n}
	}
)

func launchedBy(d Decision) map[string]int {
	out := map[string]int{}
	for _, l := range d.Launch {
		out[l.Offering] += l.Count
	}
	return out
}

// A gang's nodes are bought in one decision: all of them, the cheapest
// mix that fits every instance (4 x 6 GPUs: four g8, since two g2 per
// instance would cost 28 against 24 per instance).
func TestGangBoughtInOnePurchase(t *testing.T) {
	for _, name := range []string{Tide, Karpenter, ClusterAutoscaler} {
		cfg := tideConfig(t, capacity.Elastic(0, 20), []capacity.Offering{g8, g2}, func(c *Config) { c.Policy = name })
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{
			Pending: []capacity.Pending{{Requests: gpu(6), Count: 4, Gang: "train"}}}}
		d := p.Decide(in)
		if d.Desired != 4 {
			t.Fatalf("%s: desired %d, want the gang's 4 nodes at once (%s)", name, d.Desired, d.Reason)
		}
		if l := launchedBy(d); name == Tide && l["g8/on-demand"] != 4 {
			t.Fatalf("%s: launches %v, want 4 g8", name, d.Launch)
		}
	}
}

// Work below expendable_below never causes a scale-up; work at it does.
func TestExpendableBelowNeverScalesUp(t *testing.T) {
	cut := 0
	cfg := tideConfig(t, capacity.Elastic(0, 20), []capacity.Offering{g8}, func(c *Config) { c.ExpendableBelow = &cut })
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{
		Pending: []capacity.Pending{{Requests: gpu(1), Count: 9, Priority: -1}}}}
	if d := p.Decide(in); d.Desired != 0 {
		t.Fatalf("expendable work scaled up to %d (%s)", d.Desired, d.Reason)
	}
	in.Pressure.Pending = append(in.Pressure.Pending, capacity.Pending{Requests: gpu(1), Count: 1})
	if d := p.Decide(in); d.Desired != 1 {
		t.Fatalf("desired %d, want 1 node for the one instance at the cutoff", d.Desired)
	}
}

// At the pool's max, higher priorities are bought for first and a gang
// that does not fit the room left is not bought for in part.
func TestHigherPriorityBoughtFirstAtMax(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 3), []capacity.Offering{g8})
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: []capacity.Pending{
		{Requests: gpu(8), Count: 2, Gang: "low"},
		{Requests: gpu(6), Count: 2, Gang: "high", Priority: 5},
	}}}
	if d := p.Decide(in); d.Desired != 2 {
		t.Fatalf("desired %d, want 2 (the high gang; the low one would need 2 more of the 1 left)", d.Desired)
	}
	// Without priorities the whole backlog is clamped to the max.
	plain := NewTide(cfg)
	if d := plain.Decide(in); d.Desired != 3 {
		t.Fatalf("unwrapped tide: desired %d", d.Desired)
	}
}

// A gang larger than the room the max leaves is never bought for in part;
// plain work is bought for up to the max.
func TestGangAboveMaxBuysNothing(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 2), []capacity.Offering{g8})
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: []capacity.Pending{
		{Requests: gpu(8), Count: 3, Gang: "big"}}}}
	if d := p.Decide(in); d.Desired != 0 {
		t.Fatalf("desired %d for a gang of 3 nodes in a pool of at most 2", d.Desired)
	}
	in.Pressure.Pending[0].Gang = ""
	if d := p.Decide(in); d.Desired != 2 {
		t.Fatalf("desired %d for 3 lone instances, want the max 2", d.Desired)
	}
	in.Pressure.Pending[0].Priority = 3 // one group of another priority: still clamped, not dropped
	if d := p.Decide(in); d.Desired != 2 {
		t.Fatalf("desired %d for 3 lone instances of priority 3, want the max 2", d.Desired)
	}
}

// A gang of several groups (pod sets of different shapes) cut by the max
// is left out whole, never bought for in part.
func TestGangOfSeveralGroupsAtMax(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 3), []capacity.Offering{g8})
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: []capacity.Pending{
		{Requests: gpu(8), Count: 1, Priority: 5},
		{Requests: gpu(8), Count: 2, Gang: "mixed"},
		{Requests: gpu(6), Count: 2, Gang: "mixed"},
	}}}
	if d := p.Decide(in); d.Desired != 1 {
		t.Fatalf("desired %d (%s), want 1: the 4-node gang does not fit the 2 nodes left, not even its first group", d.Desired, d.Reason)
	}
	in.Pressure.Pending = in.Pressure.Pending[1:]
	in.Pressure.Pending[1].Count = 1
	if d := p.Decide(in); d.Desired != 3 {
		t.Fatalf("desired %d (%s), want the whole 3-node gang", d.Desired, d.Reason)
	}
}

// A gang that no pool of max nodes could hold is never bought for, and
// holds up no work of lower priority: that work is bought for as if the
// gang were not there. A gang that only waits for room does hold it up.
func TestGangAboveMaxHoldsUpNothing(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 2), []capacity.Offering{g8})
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: []capacity.Pending{
		{Requests: gpu(8), Count: 3, Gang: "big", Priority: 9},
		{Requests: gpu(8), Count: 1, Priority: 1}}}}
	if d := p.Decide(in); d.Desired != 1 {
		t.Fatalf("desired %d (%s), want 1 for the lone instance", d.Desired, d.Reason)
	}
	// Likewise a gang of two groups that each fit the max, but not together.
	two := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: []capacity.Pending{
		{Requests: gpu(8), Count: 1, Gang: "m", Priority: 9}, {Requests: gpu(8), Count: 2, Gang: "m", Priority: 9},
		{Requests: gpu(8), Count: 1, Priority: 1}}}}
	if d := p.Decide(two); d.Desired != 1 {
		t.Fatalf("desired %d (%s), want 1 for the lone instance beside a 2-group gang of 3 nodes", d.Desired, d.Reason)
	}
	// A gang of 2 fits the max but not beside the running node: it waits
	// for room, and the work below it waits too (strict priority).
	in.Pressure.Pending[0].Count = 2
	in.Pressure.Nodes = []capacity.Node{{ID: "n0", Resources: g8.Resources, Running: []capacity.Instance{{Requests: gpu(8)}}}}
	in.Desired = 1
	if d := p.Decide(in); d.Desired != 1 {
		t.Fatalf("desired %d (%s), want 1: the gang of 2 waits for room and holds the rest", d.Desired, d.Reason)
	}
}
