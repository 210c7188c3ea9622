package binpack

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// The property tests compare LowerBound, NodesFor and Pack with an obviously
// correct brute force on small random inputs (STYLE §3.12). Each case has its
// own seed, printed on failure; rerun one with -run and the seed in a fixed
// test if needed.

const propertyCases = 3000

// randomShape returns a request or node of small integer resources, using
// memory in whole bytes and an optional extended dimension "x".
func randomShape(rng *rand.Rand, hi int64, gpus, ext bool) capacity.Resources {
	r := capacity.Resources{MilliCPU: rng.Int64N(hi + 1), Memory: rng.Int64N(hi + 1)}
	if gpus {
		r.GPUs = rng.Int64N(hi/2 + 1)
	}
	if ext {
		r.Extended = map[string]int64{"x": rng.Int64N(hi/2 + 1)}
	}
	return r
}

func randomGroups(rng *rand.Rand, node capacity.Resources, maxItems int, gpus, ext bool) []capacity.Pending {
	ng := 1 + rng.IntN(3)
	left := 1 + rng.IntN(maxItems)
	var groups []capacity.Pending
	for i := 0; i < ng && left > 0; i++ {
		c := 1 + rng.IntN(left)
		left -= c
		// Mostly fitting requests, sometimes one that does not.
		req := randomShape(rng, 10, gpus, ext)
		if rng.IntN(4) != 0 {
			req.MilliCPU = min(req.MilliCPU, node.MilliCPU)
			req.Memory = min(req.Memory, node.Memory)
			req.GPUs = min(req.GPUs, node.GPUs)
			if ext {
				req.Extended["x"] = min(req.Extended["x"], node.Extended["x"])
			}
		}
		groups = append(groups, capacity.Pending{Requests: req, Count: c})
	}
	return groups
}

// expand lists every item's request, group by group.
func expand(groups []capacity.Pending) []capacity.Resources {
	var items []capacity.Resources
	for _, g := range groups {
		for range g.Count {
			items = append(items, g.Requests)
		}
	}
	return items
}

// bruteMinNodes returns the least number of nodes of size node holding all
// items (each must fit alone), by trying every assignment up to symmetry.
func bruteMinNodes(items []capacity.Resources, node capacity.Resources) int {
	best := len(items)
	var bins []capacity.Resources
	var rec func(i int)
	rec = func(i int) {
		if len(bins) >= best {
			return
		}
		if i == len(items) {
			best = len(bins)
			return
		}
		for b := range bins {
			if next := bins[b].Add(items[i]); next.Fits(node) {
				old := bins[b]
				bins[b] = next
				rec(i + 1)
				bins[b] = old
			}
		}
		bins = append(bins, items[i])
		rec(i + 1)
		bins = bins[:len(bins)-1]
	}
	rec(0)
	return best
}

// bruteMinCost returns the least total effective cost of nodes holding all
// items, each node bought as the cheapest offering its contents fit.
func bruteMinCost(items []capacity.Resources, offerings []capacity.Offering) float64 {
	cheapest := func(load capacity.Resources) float64 {
		c := math.Inf(1)
		for _, o := range offerings {
			if load.Fits(o.Resources) {
				c = min(c, o.EffectiveCost())
			}
		}
		return c
	}
	best := math.Inf(1)
	var bins []capacity.Resources
	var rec func(i int)
	rec = func(i int) {
		if i == len(items) {
			total := 0.0
			for _, b := range bins {
				total += cheapest(b)
			}
			best = min(best, total)
			return
		}
		for b := range bins {
			if next := bins[b].Add(items[i]); !math.IsInf(cheapest(next), 1) {
				old := bins[b]
				bins[b] = next
				rec(i + 1)
				bins[b] = old
			}
		}
		bins = append(bins, items[i])
		rec(i + 1)
		bins = bins[:len(bins)-1]
	}
	rec(0)
	return best
}

func allFit(groups []capacity.Pending, node capacity.Resources) bool {
	for _, g := range groups {
		if !g.Requests.Fits(node) {
			return false
		}
	}
	return true
}

// TestLowerBoundAndFFDAgainstBruteForce: on one node size, LowerBound ≤ OPT
// ≤ Pack's node count, NodesFor = OPT for a single group, Pack's placements
// respect capacity, and ok is false exactly when some item fits no node.
func TestLowerBoundAndFFDAgainstBruteForce(t *testing.T) {
	for c := range propertyCases {
		seed := uint64(c)
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		gpus, ext := rng.IntN(3) == 0, rng.IntN(4) == 0
		node := randomShape(rng, 10, gpus, ext)
		node.MilliCPU, node.Memory = max(node.MilliCPU, 1), max(node.Memory, 1)
		groups := randomGroups(rng, node, 8, gpus, ext)
		offs := []capacity.Offering{{Type: "n", Resources: node, PricePerHour: 1}}

		lb, ok := LowerBound(groups, node)
		if ok != allFit(groups, node) {
			t.Fatalf("seed %d: LowerBound ok = %v for node %v groups %v", seed, ok, node, groups)
		}
		r := Pack(groups, offs)
		if err := checkPack(groups, offs, nil, -1, r); err != nil {
			t.Fatalf("seed %d: node %v groups %v: %v", seed, node, groups, err)
		}
		if !ok {
			continue
		}
		opt := bruteMinNodes(expand(groups), node)
		if lb > opt {
			t.Fatalf("seed %d: LowerBound %d above optimum %d (node %v, groups %v)", seed, lb, opt, node, groups)
		}
		if len(r.New) < opt {
			t.Fatalf("seed %d: Pack used %d nodes, below optimum %d", seed, len(r.New), opt)
		}
		if len(groups) == 1 {
			n, _ := NodesFor(groups[0].Requests, groups[0].Count, node)
			if n != opt || len(r.New) != opt {
				t.Fatalf("seed %d: single group: NodesFor %d, Pack %d, optimum %d (node %v, group %v)",
					seed, n, len(r.New), opt, node, groups[0])
			}
		}
	}
}

// TestPackCostAgainstBruteForce: over several offerings Pack's packing is
// valid and never cheaper than the optimum (which would mean a bad cost or
// an invalid packing); it also reports how far from optimal it lands.
func TestPackCostAgainstBruteForce(t *testing.T) {
	worst, sum, n := 1.0, 0.0, 0
	for c := range propertyCases {
		seed := uint64(c)
		rng := rand.New(rand.NewPCG(seed, 0xc057))
		var offs []capacity.Offering
		for i := range 1 + rng.IntN(3) {
			r := randomShape(rng, 10, false, false)
			r.MilliCPU, r.Memory = max(r.MilliCPU, 1), max(r.Memory, 1)
			o := capacity.Offering{Type: string(rune('a' + i)), Resources: r, PricePerHour: float64(1 + rng.IntN(10))}
			if rng.IntN(3) == 0 {
				o.Kind, o.InterruptionProbability, o.InterruptionPenalty = capacity.Spot, rng.Float64()/2, float64(rng.IntN(10))
			}
			offs = append(offs, o)
		}
		groups := randomGroups(rng, offs[0].Resources, 6, false, false)
		var free []capacity.Resources
		if rng.IntN(3) == 0 {
			free = append(free, randomShape(rng, 6, false, false))
		}
		maxNew := -1
		if rng.IntN(5) == 0 {
			maxNew = rng.IntN(3)
		}
		r := Pack(groups, offs, WithFree(free), WithMaxNew(maxNew))
		if err := checkPack(groups, offs, free, maxNew, r); err != nil {
			t.Fatalf("seed %d: offerings %v groups %v free %v: %v", seed, offs, groups, free, err)
		}
		if free != nil || maxNew >= 0 || r.UnplacedTotal > 0 {
			continue
		}
		opt := bruteMinCost(expand(groups), offs)
		if r.Cost < opt-1e-9 {
			t.Fatalf("seed %d: Pack cost %v below optimum %v", seed, r.Cost, opt)
		}
		if opt > 0 {
			ratio := r.Cost / opt
			worst, sum, n = max(worst, ratio), sum+ratio, n+1
		}
	}
	t.Logf("Pack cost / optimal cost over %d cases: mean %.3f, worst %.3f", n, sum/float64(n), worst)
}
