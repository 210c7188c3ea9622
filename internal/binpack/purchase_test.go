package binpack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// checkBuy verifies a Purchase against its inputs with capacity.Resources
// arithmetic: every node's items fit its offering, every group's placed +
// unplaced items equal its count, Counts, Nodes and Cost add up, the limits
// hold, and items are unplaced only when they fit no available offering or
// a cap was reached.
func checkBuy(groups []capacity.Pending, offs []capacity.Offering, opts BuyOptions, p Purchase) error {
	placed := make([]int, len(groups))
	counts := make([]int, len(offs))
	nodes, cost := 0, 0.0
	for _, n := range p.New {
		if n.Count <= 0 || n.Offering < 0 || n.Offering >= len(offs) || len(n.Placements) == 0 {
			return fmt.Errorf("bad bought %+v", n)
		}
		var used capacity.Resources
		for _, pl := range n.Placements {
			if pl.Count <= 0 {
				return fmt.Errorf("bad placement %+v", pl)
			}
			used = used.Add(groups[pl.Group].Requests.Scale(int64(pl.Count)))
			placed[pl.Group] += pl.Count * n.Count
		}
		if !used.Fits(floorZero(offs[n.Offering].Resources)) {
			return fmt.Errorf("node of %s holds %v, more than %v", offs[n.Offering].Name(), used, offs[n.Offering].Resources)
		}
		counts[n.Offering] += n.Count
		nodes += n.Count
		cost += float64(n.Count) * offs[n.Offering].EffectiveCost()
	}
	for i, n := range p.Existing {
		var used capacity.Resources
		for _, pl := range n.Placements {
			used = used.Add(groups[pl.Group].Requests.Scale(int64(pl.Count)))
			placed[pl.Group] += pl.Count
		}
		if !used.Fits(floorZero(opts.Free[i])) {
			return fmt.Errorf("existing %d holds %v, more than %v", i, used, opts.Free[i])
		}
	}
	if !slices.Equal(counts, p.Counts) || nodes != p.Nodes {
		return fmt.Errorf("Counts %v Nodes %d, nodes add up to %v and %d", p.Counts, p.Nodes, counts, nodes)
	}
	if math.Abs(cost-p.Cost) > 1e-6*math.Max(1, cost) {
		return fmt.Errorf("Cost %v, nodes add up to %v", p.Cost, cost)
	}
	if opts.MaxNodes >= 0 && nodes > opts.MaxNodes {
		return fmt.Errorf("%d nodes, max %d", nodes, opts.MaxNodes)
	}
	capped := opts.MaxNodes >= 0 && nodes == opts.MaxNodes
	for o, l := range opts.Limit {
		if l >= 0 && counts[o] > l {
			return fmt.Errorf("%d nodes of offering %d, limit %d", counts[o], o, l)
		}
		capped = capped || l > 0 && counts[o] == l
	}
	total := 0
	for g := range groups {
		if placed[g]+p.Unplaced[g] != max(groups[g].Count, 0) {
			return fmt.Errorf("group %d: placed %d + unplaced %d != %d", g, placed[g], p.Unplaced[g], groups[g].Count)
		}
		total += p.Unplaced[g]
		if p.Unplaced[g] > 0 && !capped {
			for o := range offs {
				if (opts.Limit == nil || opts.Limit[o] != 0) && !groups[g].Requests.Negative() && groups[g].Requests.Fits(floorZero(offs[o].Resources)) {
					return fmt.Errorf("group %d: %d unplaced though offering %d fits it", g, p.Unplaced[g], o)
				}
			}
		}
	}
	if total != p.UnplacedTotal {
		return fmt.Errorf("UnplacedTotal %d, want %d", p.UnplacedTotal, total)
	}
	if p.HasBound && p.Bound > p.Cost*(1+1e-9)+1e-9 {
		return fmt.Errorf("bound %v above the purchase's cost %v", p.Bound, p.Cost)
	}
	return nil
}

// exactCost is the cheapest purchase for the groups (empty pool, no caps),
// by dynamic programming over the leftover counts: some node holds an item
// of the first shape still left, and that node may be taken maximal. It
// gives up (ok false) after budget states. Resources are CPU, memory and
// GPUs only (the random pools use nothing else).
func exactCost(groups []capacity.Pending, offs []capacity.Offering, budget int) (best float64, ok bool) {
	m := len(groups)
	type vec [3]int64
	v := func(r capacity.Resources) vec { return vec{r.MilliCPU, r.Memory, r.GPUs} }
	fitsIn := func(a, c vec) bool { return a[0] <= c[0] && a[1] <= c[1] && a[2] <= c[2] }
	req := make([]vec, m)
	for i, g := range groups {
		req[i] = v(g.Requests)
	}
	memo := map[[8]int]float64{}
	var f func(left [8]int) float64
	f = func(left [8]int) float64 {
		first := -1
		for i := range m {
			if left[i] > 0 {
				first = i
				break
			}
		}
		if first < 0 {
			return 0
		}
		if v, ok := memo[left]; ok {
			return v
		}
		if len(memo) >= budget {
			return math.NaN()
		}
		best := math.Inf(1)
		var fill [8]int
		for _, o := range offs {
			c := v(o.Resources)
			if !fitsIn(req[first], c) {
				continue
			}
			var rec func(i int, used vec)
			rec = func(i int, used vec) {
				if i == m {
					if fill[first] == 0 {
						return
					}
					for j := range m { // maximal: nothing left can be added
						u := vec{used[0] + req[j][0], used[1] + req[j][1], used[2] + req[j][2]}
						if left[j]-fill[j] > 0 && fitsIn(u, c) {
							return
						}
					}
					rest := left
					for j := range m {
						rest[j] -= fill[j]
					}
					best = math.Min(best, o.EffectiveCost()+f(rest))
					return
				}
				top := int64(left[i])
				for d := range 3 {
					if req[i][d] > 0 {
						top = min(top, (c[d]-used[d])/req[i][d])
					}
				}
				for k := int(top); k >= 0; k-- {
					u := vec{used[0] + int64(k)*req[i][0], used[1] + int64(k)*req[i][1], used[2] + int64(k)*req[i][2]}
					fill[i] = k
					rec(i+1, u)
				}
				fill[i] = 0
			}
			rec(0, vec{})
		}
		memo[left] = best
		return best
	}
	var left [8]int
	for i, g := range groups {
		left[i] = g.Count
	}
	r := f(left)
	return r, !math.IsNaN(r) && len(memo) < budget
}

// randomPool draws a pool like issue 23's: nOffs offerings of cloud-like
// sizes (some with GPUs), prices about by size with noise, and shapes
// pending shapes that are fractions of the offerings, total instances.
func randomPool(rng *rand.Rand, nOffs, shapes, total int) ([]capacity.Offering, []capacity.Pending) {
	cores := []int64{4, 8, 16, 32, 48, 64, 96}
	ratio := []int64{2, 4, 8}
	var offs []capacity.Offering
	for i := range nOffs {
		c := cores[rng.IntN(len(cores))]
		r := capacity.Resources{MilliCPU: c * 1000, Memory: c * ratio[rng.IntN(len(ratio))] * gi}
		price := float64(c) * 0.045 * (0.8 + 0.4*rng.Float64()) * (1 + float64(r.Memory/gi/c)/8)
		if rng.IntN(4) == 0 {
			r.GPUs = []int64{1, 2, 4, 8}[rng.IntN(4)]
			price += float64(r.GPUs) * 0.9 * (0.8 + 0.4*rng.Float64())
		}
		o := capacity.Offering{Type: fmt.Sprintf("t%d", i), Resources: r, PricePerHour: math.Round(price*1e4) / 1e4}
		if rng.IntN(4) == 0 {
			o.Kind, o.PricePerHour = capacity.Spot, o.PricePerHour*0.4
			o.InterruptionProbability, o.InterruptionPenalty = 0.05, float64(rng.IntN(10))
		}
		offs = append(offs, o)
	}
	groups := make([]capacity.Pending, shapes)
	for i := range groups {
		o := offs[rng.IntN(len(offs))].Resources
		r := capacity.Resources{
			MilliCPU: max(250, int64(float64(o.MilliCPU)*(0.03+0.6*rng.Float64()))/250*250),
			Memory:   max(gi/4, int64(float64(o.Memory)*(0.03+0.6*rng.Float64()))/(gi/4)*(gi/4)),
		}
		if o.GPUs > 0 && rng.IntN(2) == 0 {
			r.GPUs = 1 + rng.Int64N(o.GPUs)
		}
		groups[i] = capacity.Pending{Requests: r, Count: 1}
	}
	for range total - shapes {
		groups[rng.IntN(shapes)].Count++
	}
	return offs, groups
}

func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestBuyRandomSmallPools: 200 random small pools (2-6 offerings, 1-5
// shapes, up to 120 instances). The purchase is always valid and complete,
// never cheaper than the exact optimum (where the exact solver finishes)
// nor than its own bound, never dearer than Pack, and meets issue 23's
// goals: the optimum in the median, within 3 % at p90, within 15 % at worst.
// Where the exact solver gives up, the gap to the proven bound stands in
// for the gap to the optimum (it is never smaller).
func TestBuyRandomSmallPools(t *testing.T) {
	var gaps []float64
	exact, optimal := 0, 0
	for c := range 200 {
		rng := rand.New(rand.NewPCG(uint64(c), 23))
		shapes := 1 + rng.IntN(5)
		offs, groups := randomPool(rng, 2+rng.IntN(5), shapes, shapes+rng.IntN(121-shapes))
		opts := BuyOptions{MaxNodes: -1}
		p := Buy(groups, offs, opts)
		if err := checkBuy(groups, offs, opts, p); err != nil {
			t.Fatalf("case %d: %v\noffs %v\ngroups %v", c, err, offs, groups)
		}
		if p.UnplacedTotal > 0 {
			continue // a shape that fits no offering: nothing to compare
		}
		r := Pack(groups, offs)
		if p.Cost > r.Cost*(1+1e-9) {
			t.Fatalf("case %d: purchase $%.4f dearer than Pack's $%.4f", c, p.Cost, r.Cost)
		}
		ref := p.Bound
		if opt, ok := exactCost(groups, offs, 4000); ok {
			exact++
			if p.Cost < opt*(1-1e-9) {
				t.Fatalf("case %d: purchase $%.4f below the optimum $%.4f", c, p.Cost, opt)
			}
			if p.Bound > opt*(1+1e-9) {
				t.Fatalf("case %d: bound $%.4f above the optimum $%.4f", c, p.Bound, opt)
			}
			ref = opt
		}
		gap := 0.0
		if ref > 0 {
			gap = p.Cost/ref - 1
		}
		if gap < 1e-9 {
			optimal++
		}
		gaps = append(gaps, gap)
	}
	med, p90, worst := quantile(gaps, 0.5), quantile(gaps, 0.9), slices.Max(gaps)
	t.Logf("%d pools, %d solved exactly by the test: %d at the optimum; gap median %.2f %%, p90 %.2f %%, worst %.2f %%",
		len(gaps), exact, optimal, 100*med, 100*p90, 100*worst)
	if med > 1e-9 || p90 > 0.03 || worst > 0.15 {
		t.Errorf("gap median %.2f %% (goal 0), p90 %.2f %% (goal 3 %%), worst %.2f %% (goal 15 %%)", 100*med, 100*p90, 100*worst)
	}
}

// TestBuyRandomLargePools: 40 random pools of 200 to 2,000 instances;
// the purchase is valid and within 5 % of its proven bound at p90.
func TestBuyRandomLargePools(t *testing.T) {
	var gaps []float64
	for c := range 40 {
		rng := rand.New(rand.NewPCG(uint64(c), 2000))
		shapes := 1 + rng.IntN(5)
		offs, groups := randomPool(rng, 2+rng.IntN(5), shapes, 200+rng.IntN(1801))
		opts := BuyOptions{MaxNodes: -1}
		p := Buy(groups, offs, opts)
		if err := checkBuy(groups, offs, opts, p); err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		if p.UnplacedTotal > 0 {
			continue
		}
		gaps = append(gaps, p.Gap())
	}
	med, p90, worst := quantile(gaps, 0.5), quantile(gaps, 0.9), slices.Max(gaps)
	t.Logf("%d pools: gap to the bound median %.2f %%, p90 %.2f %%, worst %.2f %%", len(gaps), 100*med, 100*p90, 100*worst)
	if p90 > 0.05 {
		t.Errorf("gap to the bound p90 %.2f %%, goal 5 %%", 100*p90)
	}
}

// TestBuyReproductionOneBigOffering is issue 23's first reproduction: one
// offering of 64 CPU / 256 GiB / 4 GPUs; 12 big, 30 one-GPU and 2 four-GPU
// instances. First fit decreasing needs 15 nodes; 12 suffice.
func TestBuyReproductionOneBigOffering(t *testing.T) {
	offs := []capacity.Offering{{Type: "g4", Resources: capacity.Resources{MilliCPU: 64000, Memory: 256 * gi, GPUs: 4}, PricePerHour: 4.783}}
	groups := []capacity.Pending{
		{Requests: capacity.Resources{MilliCPU: 17250, Memory: 116*gi + gi/4}, Count: 12},
		{Requests: capacity.Resources{MilliCPU: 14250, Memory: 27*gi + gi/4, GPUs: 1}, Count: 30},
		{Requests: capacity.Resources{MilliCPU: 18750, Memory: 84*gi + 3*gi/4, GPUs: 4}, Count: 2},
	}
	if r := Pack(groups, offs); len(r.New) != 15 {
		t.Logf("Pack opens %d nodes (the issue measured 15)", len(r.New))
	}
	opts := BuyOptions{MaxNodes: -1}
	p := Buy(groups, offs, opts)
	if err := checkBuy(groups, offs, opts, p); err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 12 || math.Abs(p.Cost-12*4.783) > 1e-9 {
		t.Fatalf("bought %d nodes for $%.4f, want 12 for $%.4f", p.Nodes, p.Cost, 12*4.783)
	}
	if !p.HasBound || p.Gap() > 1e-9 {
		t.Fatalf("bound $%.4f (has %v), gap %.4f: want the bound to prove 12 optimal", p.Bound, p.HasBound, p.Gap())
	}
}

// TestBuyReproductionCheaperMix is issue 23's second reproduction: three
// of the cheaper 48 CPU / 384 GiB nodes each host one of each shape.
func TestBuyReproductionCheaperMix(t *testing.T) {
	offs := []capacity.Offering{
		{Type: "m48", Resources: capacity.Resources{MilliCPU: 48000, Memory: 384 * gi}, PricePerHour: 2.6471},
		{Type: "c96", Resources: capacity.Resources{MilliCPU: 96000, Memory: 192 * gi}, PricePerHour: 3.6762},
	}
	for _, n := range []int{3, 2} {
		groups := []capacity.Pending{
			{Requests: capacity.Resources{MilliCPU: 27500, Memory: 105*gi + gi/4}, Count: n},
			{Requests: capacity.Resources{MilliCPU: 15100, Memory: 15 * gi}, Count: n},
		}
		opts := BuyOptions{MaxNodes: -1}
		p := Buy(groups, offs, opts)
		if err := checkBuy(groups, offs, opts, p); err != nil {
			t.Fatal(err)
		}
		if p.Counts[0] != n || p.Counts[1] != 0 {
			t.Fatalf("%d + %d instances: bought %v, want %d x m48", n, n, p.Counts, n)
		}
	}
}

// TestBuyCaps: MaxNodes and per-offering limits (0 = out of capacity) bound
// the purchase, and the rest is reported unplaced.
func TestBuyCaps(t *testing.T) {
	small := offering("small", capacity.OnDemand, res(2000, 8, 0), 1)
	large := offering("large", capacity.OnDemand, res(8000, 32, 0), 3)
	groups := []capacity.Pending{{Requests: res(1000, 1, 0), Count: 40}}
	offs := []capacity.Offering{small, large}
	for _, tc := range []struct {
		name       string
		opts       BuyOptions
		wantCounts []int
		unplaced   int
	}{
		{"unlimited", BuyOptions{MaxNodes: -1}, []int{0, 5}, 0},
		{"large out of capacity", BuyOptions{MaxNodes: -1, Limit: []int{-1, 0}}, []int{20, 0}, 0},
		{"two large at most", BuyOptions{MaxNodes: -1, Limit: []int{-1, 2}}, []int{12, 2}, 0},
		{"max 3 nodes", BuyOptions{MaxNodes: 3}, []int{0, 3}, 16},
		{"nothing available", BuyOptions{MaxNodes: -1, Limit: []int{0, 0}}, []int{0, 0}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Buy(groups, offs, tc.opts)
			if err := checkBuy(groups, offs, tc.opts, p); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Counts, tc.wantCounts) || p.UnplacedTotal != tc.unplaced {
				t.Fatalf("counts %v unplaced %d, want %v and %d", p.Counts, p.UnplacedTotal, tc.wantCounts, tc.unplaced)
			}
		})
	}
}

// TestBuyHugeCounts: counts are arithmetic. A billion instances in ten
// shapes are bought in the same time as a thousand, and the plan lists a
// handful of node groups.
func TestBuyHugeCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	offs := benchOfferings(rng, 20)
	groups := benchGroups(rng, 1_000_000_000, 10)
	opts := BuyOptions{MaxNodes: -1}
	p := Buy(groups, offs, opts)
	if err := checkBuy(groups, offs, opts, p); err != nil {
		t.Fatal(err)
	}
	if p.UnplacedTotal != 0 || len(p.New) > 200 {
		t.Fatalf("unplaced %d, %d node groups", p.UnplacedTotal, len(p.New))
	}
	// Per instance, no dearer than first fit decreasing on 10,000 times fewer.
	small := slices.Clone(groups)
	for i := range small {
		small[i].Count /= 10_000
	}
	r := Pack(small, offs)
	if per, ref := p.Cost/1e9, r.Cost/1e5; per > ref*1.001 {
		t.Fatalf("$%.3g per instance on a billion, Pack $%.3g on 100,000", per, ref)
	}
	// Capped at a max: the cap binds and the rest is unplaced.
	opts = BuyOptions{MaxNodes: 1000}
	p = Buy(groups, offs, opts)
	if err := checkBuy(groups, offs, opts, p); err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 1000 {
		t.Fatalf("%d nodes under a max of 1000", p.Nodes)
	}
}

// TestBuyDeterministicAndDeadline: the same input gives the same purchase;
// a deadline already passed returns a valid purchase (Pack's, or the LP's
// first rounding) at once.
func TestBuyDeterministicAndDeadline(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	offs := benchOfferings(rng, 100)
	groups := benchGroups(rng, 1000, 10)
	a := Buy(groups, offs, BuyOptions{MaxNodes: -1})
	b := Buy(groups, offs, BuyOptions{MaxNodes: -1})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("two calls on the same input differ")
	}
	now := time.Unix(100, 0)
	opts := BuyOptions{MaxNodes: -1, Deadline: now, Clock: func() time.Time { return now }}
	p := Buy(groups, offs, opts)
	if err := checkBuy(groups, offs, opts, p); err != nil {
		t.Fatal(err)
	}
	if r := Pack(groups, offs); p.Cost > r.Cost*(1+1e-9) {
		t.Fatalf("past the deadline: $%.4f, dearer than Pack's $%.4f", p.Cost, r.Cost)
	}
}

// TestBuyWithFreeSpace: existing free space is filled first and costs nothing.
func TestBuyWithFreeSpace(t *testing.T) {
	small := offering("small", capacity.OnDemand, res(2000, 8, 0), 1)
	groups := []capacity.Pending{{Requests: res(1000, 1, 0), Count: 5}}
	opts := BuyOptions{MaxNodes: -1, Free: []capacity.Resources{res(500, 4, 0), res(2000, 2, 0)}}
	p := Buy(groups, []capacity.Offering{small}, opts)
	if err := checkBuy(groups, []capacity.Offering{small}, opts, p); err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 2 || p.Existing[1].Items != 2 {
		t.Fatalf("nodes %d, existing %+v", p.Nodes, p.Existing)
	}
}
