package binpack

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// benchOfferings returns n offerings: instance families with 2, 4 or 8 GiB
// per core (and a GPU family), sizes 2..96 cores, in several zones, on-demand
// and spot, priced about by size with some noise.
func benchOfferings(rng *rand.Rand, n int) []capacity.Offering {
	sizes := []int64{2, 4, 8, 16, 32, 48, 64, 96}
	ratios := []int64{2, 4, 8}
	zones := []string{"a", "b", "c"}
	var out []capacity.Offering
	for len(out) < n {
		cores := sizes[rng.IntN(len(sizes))]
		ratio := ratios[rng.IntN(len(ratios))]
		r := capacity.Resources{MilliCPU: cores * 1000, Memory: cores * ratio * gi}
		price := float64(cores) * (0.03 + 0.005*float64(ratio)) * (0.9 + 0.2*rng.Float64())
		if rng.IntN(6) == 0 {
			r.GPUs = max(cores/8, 1)
			price += float64(r.GPUs) * 2.5
		}
		o := capacity.Offering{Type: fmt.Sprintf("f%d.%d", ratio, cores), Zone: zones[rng.IntN(len(zones))], Resources: r, PricePerHour: price}
		if rng.IntN(2) == 0 {
			o.Kind, o.PricePerHour = capacity.Spot, price*0.35
			o.InterruptionProbability, o.InterruptionPenalty = 0.02+0.1*rng.Float64(), 5
		}
		out = append(out, o)
	}
	return out
}

// benchGroups spreads total instances over shapes groups of random
// requests (0.25..8 cores, 0.5..32 GiB, an occasional GPU).
func benchGroups(rng *rand.Rand, total, shapes int) []capacity.Pending {
	groups := make([]capacity.Pending, shapes)
	for i := range groups {
		r := capacity.Resources{MilliCPU: 250 * (1 + rng.Int64N(32)), Memory: (1 + rng.Int64N(64)) * gi / 2}
		if rng.IntN(10) == 0 {
			r.GPUs = 1
		}
		groups[i] = capacity.Pending{Requests: r, Count: total / shapes}
	}
	groups[0].Count += total - total/shapes*shapes
	return groups
}

// BenchmarkPack: first fit decreasing of 10,000 pending instances over 50
// offerings (budget 20 ms/op), with few and with all-distinct shapes, and
// with the free space of 1,000 existing nodes filled first.
func BenchmarkPack(b *testing.B) {
	for _, bc := range []struct {
		name          string
		shapes, nodes int
	}{
		{"10000x10shapes", 10, 0},
		{"10000x10000shapes", 10000, 0},
		{"10000x1000shapes+1000free", 1000, 1000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			offs := benchOfferings(rng, 50)
			groups := benchGroups(rng, 10000, bc.shapes)
			var free []capacity.Resources
			for range bc.nodes {
				free = append(free, capacity.Resources{MilliCPU: 1000 * rng.Int64N(8), Memory: gi * rng.Int64N(16)})
			}
			b.ReportAllocs()
			var r Result
			for b.Loop() {
				r = Pack(groups, offs, WithFree(free))
			}
			b.ReportMetric(float64(len(r.New)), "nodes")
			b.ReportMetric(r.Cost, "$/h")
		})
	}
}

// BenchmarkLowerBound: 10,000 instances in 100 shapes on one node size.
func BenchmarkLowerBound(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	groups := benchGroups(rng, 10000, 100)
	node := capacity.Resources{MilliCPU: 96000, Memory: 768 * gi, GPUs: 8}
	b.ReportAllocs()
	for b.Loop() {
		LowerBound(groups, node)
	}
}

// BenchmarkBuy: issue 23's purchase optimizer. "1000x10shapes+100nodes" is
// 1,000 pending in 10 shapes over 100 offerings with the free space of 100
// nodes (goal ≤ 1 ms); "karpenter" is Karpenter's scheduling benchmark
// scale, 400 instance types, 5 shapes, 20,000 pending (goal ≤ 100 ms);
// "1e9x10shapes" shows that counts are arithmetic.
func BenchmarkBuy(b *testing.B) {
	for _, bc := range []struct {
		name                       string
		offs, total, shapes, nodes int
	}{
		{"1000x10shapes+100nodes", 100, 1000, 10, 100},
		{"karpenter-400types-5shapes-20000", 400, 20000, 5, 0},
		{"1e9x10shapes", 100, 1_000_000_000, 10, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			offs := benchOfferings(rng, bc.offs)
			groups := benchGroups(rng, bc.total, bc.shapes)
			var free []capacity.Resources
			for range bc.nodes {
				free = append(free, capacity.Resources{MilliCPU: 1000 * rng.Int64N(8), Memory: gi * rng.Int64N(16)})
			}
			b.ReportAllocs()
			var p Purchase
			for b.Loop() {
				p = Buy(groups, offs, BuyOptions{MaxNodes: -1, Free: free})
			}
			b.ReportMetric(float64(p.Nodes), "nodes")
			b.ReportMetric(100*p.Gap(), "%gap")
			if bc.total <= 20000 {
				r := Pack(groups, offs, WithFree(free))
				b.ReportMetric(100*(r.Cost/p.Cost-1), "%pack-over")
			}
		})
	}
}

// BenchmarkBuyFullPool: a backlog that waits on a large pool, the tide
// policy's common case in a long replay (the first 4 h of alibaba2017:
// about 3,500 nodes per purchase, 15 shapes, 0.1 nodes on average with room
// for any of them): 200 pending in 15 shapes over the default pool's 3
// offerings with the free space of 5,000 nodes that are nearly full (a few
// hundred millicores and a GiB or two each, below every request).
func BenchmarkBuyFullPool(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	offs := benchOfferings(rng, 3)
	groups := benchGroups(rng, 200, 15)
	for i := range groups {
		groups[i].Requests.MilliCPU += 500
		groups[i].Requests.Memory += 2 * gi
	}
	free := make([]capacity.Resources, 5000)
	for i := range free {
		free[i] = capacity.Resources{MilliCPU: rng.Int64N(500), Memory: rng.Int64N(2 * gi)}
	}
	b.ReportAllocs()
	var p Purchase
	for b.Loop() {
		p = Buy(groups, offs, BuyOptions{MaxNodes: -1, Free: free})
	}
	b.ReportMetric(float64(p.Nodes), "nodes")
}
