package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// The policies whose count arithmetic this file checks: every policy, the
// tide policy with its purchase (binpack.Buy) included.
var exactPolicies = []string{Skyward, TargetTracking, Utilization, Tide}

var exactBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func exactConfig(name string, rng *rand.Rand) Config {
	lo := rng.IntN(4)
	cfg := Config{
		Policy: name,
		Nodes:  capacity.Elastic(lo, lo+1+rng.IntN(50)),
		Offerings: []capacity.Offering{{Type: "g8", PricePerHour: 1,
			Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 8}}},
		SlotsPerNode:       1 + rng.IntN(4),
		ScaleInDatapoints:  1 + rng.IntN(3),
		MinUnutilizedNodes: rng.IntN(3),
	}
	if rng.IntN(4) == 0 {
		cfg.MaxStep = 1 + rng.IntN(5)
	}
	return cfg
}

// exactCounts are the counts a hostile snapshot may carry.
var exactCounts = []int{0, 1, 2, 7, 1 << 20, 1e9, math.MaxInt32, math.MaxInt64 / 3, math.MaxInt64 - 1, math.MaxInt64}

func exactInput(rng *rand.Rand, spec capacity.NodeSpec) Input {
	var in Input
	in.Now = exactBase.Add(time.Duration(rng.IntN(3600)) * time.Second)
	in.Desired = spec.Clamp(rng.IntN(spec.Max + 2))
	if rng.IntN(2) == 0 {
		in.State.LastScale = exactBase
		in.State.LastBusy = exactBase
		in.State.LowDatapoints = rng.IntN(4)
		in.State.LastDatapoint = exactBase
	}
	for i := range rng.IntN(8) {
		n := capacity.Node{ID: fmt.Sprint("n", i), Ordinal: i, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 8}}
		for range rng.IntN(4) {
			n.Running = append(n.Running, capacity.Instance{Requests: capacity.Resources{MilliCPU: 1000, GPUs: int64(rng.IntN(3))}, Daemon: rng.IntN(5) == 0})
		}
		in.Pressure.Nodes = append(in.Pressure.Nodes, n)
	}
	for range rng.IntN(4) {
		c := exactCounts[rng.IntN(len(exactCounts))]
		if rng.IntN(2) == 0 {
			c = rng.IntN(100)
		}
		in.Pressure.Pending = append(in.Pressure.Pending, capacity.Pending{
			Requests: capacity.Resources{MilliCPU: int64(1 + rng.IntN(8000)), Memory: int64(rng.IntN(4)) << 30, GPUs: int64(rng.IntN(9))},
			Count:    c,
		})
	}
	return in
}

// TestPropertyExactCounts checks, on random inputs with counts up to
// math.MaxInt64, that the skyward, target-tracking and utilization policies
//
//   - keep desired within [min, max] and every figure non-negative;
//   - never give fewer nodes for more pending instances (one group grown,
//     or a group added), all else equal;
//
// so that no sum or product of counts wraps into a wrong decision.
func TestPropertyExactCounts(t *testing.T) {
	for _, name := range exactPolicies {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			for trial := range 4000 {
				cfg := exactConfig(name, rng)
				p, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				in := exactInput(rng, cfg.Nodes)
				d := p.Decide(in)
				check := func(what string, in Input, d Decision) {
					t.Helper()
					if d.Desired < cfg.Nodes.Min || d.Desired > cfg.Nodes.Max {
						t.Fatalf("trial %d %s: desired %d outside %s (%s)\ninput %+v", trial, what, d.Desired, cfg.Nodes, d.Reason, in)
					}
					if f := d.TargetTracking; f != nil && (f.M < 0 || f.N < 0 || f.Reservation < 0 || f.LowDatapoints < 0) {
						t.Fatalf("trial %d %s: negative figures %+v", trial, what, f)
					}
					if f := d.Utilization; f != nil && (f.Target < 0 || f.Utilization < 0) {
						t.Fatalf("trial %d %s: negative figures %+v", trial, what, f)
					}
				}
				check("base", in, d)

				more := in
				more.Pressure.Pending = append([]capacity.Pending(nil), in.Pressure.Pending...)
				if len(more.Pressure.Pending) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(more.Pressure.Pending))
					g := &more.Pressure.Pending[i]
					g.Count += min(exactCounts[rng.IntN(len(exactCounts))], math.MaxInt-g.Count)
				} else {
					more.Pressure.Pending = append(more.Pressure.Pending, capacity.Pending{
						Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}, Count: exactCounts[1+rng.IntN(len(exactCounts)-1)]})
				}
				// No decision reads a negative count: a group of -n (which
				// validation refuses) weighs as much as no group at all.
				if len(in.Pressure.Pending) > 0 {
					neg, zero := in, in
					neg.Pressure.Pending = append([]capacity.Pending(nil), in.Pressure.Pending...)
					zero.Pressure.Pending = append([]capacity.Pending(nil), in.Pressure.Pending...)
					i := rng.IntN(len(neg.Pressure.Pending))
					neg.Pressure.Pending[i].Count = -1 - rng.IntN(math.MaxInt-1)
					zero.Pressure.Pending[i].Count = 0
					if dn, dz := p.Decide(neg), p.Decide(zero); dn.Desired != dz.Desired || dn.Reason.String() != dz.Reason.String() {
						t.Fatalf("trial %d: a negative count decides %d (%s), a zero one %d (%s)", trial, dn.Desired, dn.Reason, dz.Desired, dz.Reason)
					}
				}
				dm := p.Decide(more)
				check("more", more, dm)
				if dm.Desired < d.Desired {
					t.Fatalf("trial %d: more pending gave fewer nodes: %d (%s) < %d (%s)\nless: %+v\nmore: %+v",
						trial, dm.Desired, dm.Reason, d.Desired, d.Reason, in.Pressure.Pending, more.Pressure.Pending)
				}
			}
		})
	}
}

// TestHugeQueueAsksForMax pins the overflow that once wrapped: a queue of
// math.MaxInt64 instances (one group, or several summing past it) asks for
// the pool's max, never "desired already covers the queue".
func TestHugeQueueAsksForMax(t *testing.T) {
	for _, name := range exactPolicies {
		cfg := Config{Policy: name, Nodes: capacity.Elastic(0, 16), SlotsPerNode: 2,
			Offerings: []capacity.Offering{{Type: "g8", PricePerHour: 1, Resources: capacity.Resources{MilliCPU: 8000, GPUs: 8}}}}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, pending := range [][]capacity.Pending{
			{{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}, Count: math.MaxInt64}},
			{{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}, Count: math.MaxInt64 - 1},
				{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}, Count: math.MaxInt64 - 1},
				{Requests: capacity.Resources{MilliCPU: 2000, GPUs: 8}, Count: math.MaxInt64}},
		} {
			// The backlog has waited past any batching window (tide's).
			d := p.Decide(Input{Now: exactBase, Desired: 2, State: State{PendingSince: exactBase.Add(-time.Hour)},
				Pressure: capacity.Pressure{Pending: pending,
					Nodes: []capacity.Node{{ID: "a", Resources: capacity.Resources{MilliCPU: 8000, GPUs: 8}},
						{ID: "b", Ordinal: 1, Resources: capacity.Resources{MilliCPU: 8000, GPUs: 8}}}}})
			if d.Desired != 16 {
				t.Errorf("%s: %d groups of huge counts: desired %d (%s), want max 16", name, len(pending), d.Desired, d.Reason)
			}
		}
	}
}

// tenShapes is 10^9 pending instances in ten shapes.
func tenShapes() []capacity.Pending {
	out := make([]capacity.Pending, 10)
	for i := range out {
		out[i] = capacity.Pending{Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) << 29, GPUs: int64(i % 3)},
			Count: 100_000_000}
	}
	return out
}

func exactBenchInput(pending []capacity.Pending) Input {
	nodes := make([]capacity.Node, 8)
	for i := range nodes {
		nodes[i] = capacity.Node{ID: fmt.Sprint("n", i), Ordinal: i, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 8},
			Running: []capacity.Instance{{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}}}}
	}
	// The backlog has waited past tide's batching window: the policy
	// decides (and buys) rather than waits.
	return Input{Now: exactBase, Desired: 8, State: State{PendingSince: exactBase.Add(-time.Hour)},
		Pressure: capacity.Pressure{Nodes: nodes, Pending: pending}}
}

func exactBenchConfig(name string) Config {
	return Config{Policy: name, Nodes: capacity.Elastic(0, 1000), SlotsPerNode: 2,
		Offerings: []capacity.Offering{{Type: "g8", PricePerHour: 1, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 8}}}}
}

// TestAllocsDoNotGrowWithCount: a decision over 10^9 pending instances in
// ten shapes allocates no more than one over 10^4, a backlog already past
// the pool's max (the tide policy's purchase works on the shapes and the
// nodes the max allows, not on the count: 610 allocations at 10^9, 774 at
// 10^4, 69 at 10 where the free space holds everything).
func TestAllocsDoNotGrowWithCount(t *testing.T) {
	small := tenShapes()
	for i := range small {
		small[i].Count = 1000
	}
	for _, name := range exactPolicies {
		p, err := New(exactBenchConfig(name))
		if err != nil {
			t.Fatal(err)
		}
		few, many := exactBenchInput(small), exactBenchInput(tenShapes())
		a := testing.AllocsPerRun(50, func() { p.Decide(few) })
		b := testing.AllocsPerRun(50, func() { p.Decide(many) })
		if b > a {
			t.Errorf("%s: %.0f allocations for 10^9 pending, %.0f for 10^4", name, b, a)
		}
	}
}

// BenchmarkDecideBillionPending decides 10^9 pending instances in ten
// shapes (docs/benchmarks.md).
func BenchmarkDecideBillionPending(b *testing.B) {
	for _, name := range exactPolicies {
		b.Run(name, func(b *testing.B) {
			p, err := New(exactBenchConfig(name))
			if err != nil {
				b.Fatal(err)
			}
			in := exactBenchInput(tenShapes())
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(in)
			}
		})
	}
}
