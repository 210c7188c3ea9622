package binpack

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// BuyOptions bounds a Buy call.
type BuyOptions struct {
	// Free is the free space of existing nodes, filled first (as WithFree).
	Free []capacity.Resources
	// MaxNodes caps the number of new nodes; < 0 means no cap.
	MaxNodes int
	// Limit caps the new nodes per offering (by index); nil or an entry < 0
	// means no cap, 0 makes the offering unavailable (an offering out of
	// capacity).
	Limit []int
	// Work bounds the optimizer's effort in abstract work units (roughly
	// floating-point operations): 0 takes DefaultBuyWork per 100 offerings
	// (5 times more for a backlog too large for Pack). The answer is
	// deterministic for a given Work.
	Work int
	// Deadline, when set, stops the optimizer once Clock() is not before it;
	// Clock is then required. Pure callers leave both unset and rely on
	// Work, which keeps the answer deterministic.
	Deadline time.Time
	Clock    func() time.Time
}

// DefaultBuyWork is the optimizer's default work budget per 100 offerings
// (at least 100 count): about half a millisecond of one core for 10 shapes
// over 100 offerings.
const DefaultBuyWork = 300_000

// hugeBuyWork is the default work budget of a backlog too large for the
// first-fit baseline (above maxPackNodes nodes).
const hugeBuyWork = 5 * DefaultBuyWork

// maxLPShapes is the most shapes the optimizer solves as an LP; a backlog of
// more distinct shapes is packed first fit decreasing only.
const maxLPShapes = 256

// maxPackNodes is the most new nodes the first-fit-decreasing baseline may
// open (it opens them one at a time); above it only the optimizer, whose
// time does not grow with the counts, runs.
const maxPackNodes = 50_000

// Bought is a number of identical new nodes: one offering, the same items
// on each.
type Bought struct {
	// Offering is the offering's index.
	Offering int
	// Count is the number of such nodes.
	Count int
	// Placements are the items on each one of them, by group.
	Placements []Placement
}

// Purchase is what Buy chose: the new nodes to buy for a backlog, and how
// far from the cheapest possible purchase it may be.
type Purchase struct {
	// Existing has one entry per BuyOptions.Free element, with what was placed there.
	Existing []Node
	// New are the new nodes, grouped by identical fill.
	New []Bought
	// Counts is the number of new nodes per offering index.
	Counts []int
	// Nodes is the number of new nodes.
	Nodes int
	// Cost is the new nodes' effective cost per hour.
	Cost float64
	// Bound is a proven lower bound on the effective cost per hour of any
	// set of new nodes hosting the items that the existing free space, filled
	// first fit decreasing, leaves over; valid only when HasBound.
	Bound float64
	// HasBound is set when Bound was computed and the purchase places every
	// item that fits an offering, so that Cost and Bound compare.
	HasBound bool
	// Unplaced has one entry per group: items placed nowhere (they fit no
	// available offering, or MaxNodes or a Limit was reached).
	Unplaced []int
	// UnplacedTotal is the sum of Unplaced.
	UnplacedTotal int
	// Method is "optimized" when the column-generation purchase won and
	// "packed" when first fit decreasing (Pack) was as cheap or cheaper.
	Method string
	// Optimal is set when the LP was solved to optimality (the bound is then
	// the LP's value, not a weaker one).
	Optimal bool
}

// Gap returns (Cost − Bound) / Bound, the most the purchase can cost above
// the cheapest one; 0 for a free purchase, and NaN without a bound.
func (p *Purchase) Gap() float64 {
	switch {
	case !p.HasBound:
		return math.NaN()
	case p.Cost <= p.Bound || p.Cost == 0:
		return 0
	case p.Bound <= 0:
		return math.Inf(1)
	}
	return (p.Cost - p.Bound) / p.Bound
}

// Buy chooses the new nodes to buy for groups: the items first fill the free
// space of existing nodes (opts.Free, first fit decreasing as Pack does), and
// the cheapest mix of offerings by effective cost hosts the rest.
//
// It considers the shapes together: column generation over node fill
// patterns (an LP over patterns, each offering's best pattern found by a
// branch-and-bound knapsack on the LP's duals), then the LP solution
// rounded down and the remainder bought greedily pattern by pattern. It
// returns a proven lower bound on the cost of any purchase for the same
// backlog (Farley's bound from the last duals: it needs no optimal LP). It
// also runs Pack on the same input and returns the cheaper of the two, so it
// is never worse than first fit decreasing; when the work budget runs out it
// returns what it has, and Pack's answer when it had nothing better.
//
// Counts are arithmetic: the optimizer's time and memory grow with the
// number of shapes and offerings, not with the counts (Pack, whose time
// grows with the nodes it opens, is skipped above 50,000 nodes). Buy is
// deterministic for a given Work and never modifies its arguments.
func Buy(groups []capacity.Pending, offerings []capacity.Offering, opts BuyOptions) Purchase {
	defaultWork := opts.Work <= 0
	if defaultWork {
		// Pricing is per offering: the budget grows with their number.
		opts.Work = DefaultBuyWork * max(1, len(offerings)/100)
	}
	avail := offerings
	if opts.Limit != nil {
		avail = make([]capacity.Offering, len(offerings))
		copy(avail, offerings)
		for i := range avail {
			if i < len(opts.Limit) && opts.Limit[i] == 0 {
				avail[i].Resources = capacity.Resources{} // fits nothing
			}
		}
	}
	// The items the existing free space does not take.
	pre, full := packTwice(groups, avail, opts.Free)
	b := newBuyer(groups, avail, pre.Unplaced, opts)
	baseline := b.packNodesEstimate() <= maxPackNodes
	if !baseline && defaultWork {
		// No first-fit baseline to fall back on: the optimizer's answer is
		// the only one, so it gets more (still a fixed amount of) work.
		b.opts.Work = hugeBuyWork * max(1, len(offerings)/100)
	}
	opt := b.run()
	opt.Existing = pre.Existing
	b.finish(&opt, groups)

	if baseline {
		res := full(opts.MaxNodes) // Pack(groups, avail, WithFree(opts.Free), WithMaxNew(opts.MaxNodes))
		if base := fromResult(&res, len(offerings)); b.withinLimits(&base) && better(&base, &opt) {
			base.Bound, base.HasBound, base.Optimal = opt.Bound, opt.HasBound && base.UnplacedTotal <= opt.UnplacedTotal, opt.Optimal
			if base.HasBound && base.Cost < base.Bound {
				// Pack used the existing space differently: the bound,
				// which is for the leftovers of first fit, does not apply.
				base.HasBound = false
			}
			return base
		}
	}
	return opt
}

// better reports whether a beats b: fewer unplaced items, then cheaper.
func better(a, b *Purchase) bool {
	if a.UnplacedTotal != b.UnplacedTotal {
		return a.UnplacedTotal < b.UnplacedTotal
	}
	return a.Cost < b.Cost*(1-1e-12)
}

// fromResult turns a Pack result into a Purchase, grouping identical new nodes.
func fromResult(r *Result, offerings int) Purchase {
	p := Purchase{Existing: r.Existing, Counts: r.Counts(offerings), Unplaced: r.Unplaced, UnplacedTotal: r.UnplacedTotal,
		Cost: r.Cost, Nodes: len(r.New), Method: "packed"}
	for i := range r.New {
		n := &r.New[i]
		if k := len(p.New) - 1; k >= 0 && p.New[k].Offering == n.Offering && slices.Equal(p.New[k].Placements, n.Placements) {
			p.New[k].Count++
			continue
		}
		p.New = append(p.New, Bought{Offering: n.Offering, Count: 1, Placements: n.Placements})
	}
	return p
}

// buyer is one Buy's optimizer over the leftover backlog.
type buyer struct {
	d     dims
	nd    int
	opts  BuyOptions
	noffs int

	shapes []int     // group index per shape
	req    []int64   // shapes × nd
	need   []int64   // leftover items per shape
	weight []float64 // dominant share per shape
	unfit  []int     // per group: leftover items that fit no available offering

	offs  []int // candidate offerings (fit something, not dominated), by cost
	cap   []int64
	cost  []float64
	allOf []capacity.Offering

	work     int
	limitNow int // the work the current phase may reach
	stop     bool
	k        knap
}

func newBuyer(groups []capacity.Pending, offerings []capacity.Offering, left []int, opts BuyOptions) *buyer {
	b := &buyer{opts: opts, noffs: len(offerings), allOf: offerings, unfit: make([]int, len(groups))}
	for i := range groups {
		if left[i] > 0 {
			b.d.add(groups[i].Requests)
		}
	}
	for i := range offerings {
		b.d.add(offerings[i].Resources)
	}
	nd := b.d.n()
	b.nd = nd
	b.cap = make([]int64, len(offerings)*nd)
	b.cost = make([]float64, len(offerings))
	for o := range offerings {
		v := b.cap[o*nd : (o+1)*nd]
		b.d.vec(offerings[o].Resources, v)
		for k := range v {
			v[k] = max(v[k], 0)
		}
		b.cost[o] = offerings[o].EffectiveCost()
	}
	biggest := make([]int64, nd)
	for o := range offerings {
		for k, c := range b.cap[o*nd : (o+1)*nd] {
			biggest[k] = max(biggest[k], c)
		}
	}
	r := make([]int64, nd)
	for g := range groups {
		if left[g] <= 0 {
			continue
		}
		b.d.vec(groups[g].Requests, r)
		ok := false
		for o := range offerings {
			if !negative(r) && fits(r, b.cap[o*nd:(o+1)*nd]) {
				ok = true
				break
			}
		}
		if !ok {
			b.unfit[g] = left[g]
			continue
		}
		dom := 0.0
		for k, v := range r {
			if v > 0 {
				dom = max(dom, float64(v)/float64(biggest[k]))
			}
		}
		b.shapes = append(b.shapes, g)
		b.req = append(b.req, r...)
		b.need = append(b.need, int64(left[g]))
		b.weight = append(b.weight, max(dom, minWeight))
	}
	// Candidates: offerings that hold some shape, cheapest first, without
	// those another no dearer offering dominates in every dimension.
	idx := make([]int, 0, len(offerings))
	for o := range offerings {
		if b.limit(o) != 0 && b.holdsSome(o) {
			idx = append(idx, o)
		}
	}
	slices.SortStableFunc(idx, func(x, y int) int { return cmp.Compare(b.cost[x], b.cost[y]) })
	for _, o := range idx {
		dominated := false
		for _, k := range b.offs {
			if b.limit(k) < 0 && fits(b.capOf(o), b.capOf(k)) {
				dominated = true
				break
			}
		}
		if !dominated {
			b.offs = append(b.offs, o)
		}
	}
	return b
}

func negative(v []int64) bool { return slices.ContainsFunc(v, func(x int64) bool { return x < 0 }) }

func (b *buyer) capOf(o int) []int64 { return b.cap[o*b.nd : (o+1)*b.nd] }
func (b *buyer) reqOf(i int) []int64 { return b.req[i*b.nd : (i+1)*b.nd] }
func (b *buyer) holdsSome(o int) bool {
	for i := range b.shapes {
		if fits(b.reqOf(i), b.capOf(o)) {
			return true
		}
	}
	return false
}

// limit returns the cap on new nodes of offering o (-1: none).
func (b *buyer) limit(o int) int {
	if o < len(b.opts.Limit) && b.opts.Limit[o] >= 0 {
		return b.opts.Limit[o]
	}
	return -1
}

// spend counts work and reports whether the budget or the deadline is spent.
func (b *buyer) spend(w int) bool {
	b.work += w
	if b.work > b.limitNow {
		b.stop = true
	}
	if !b.stop && !b.opts.Deadline.IsZero() && b.opts.Clock != nil && !b.opts.Clock().Before(b.opts.Deadline) {
		b.stop = true
	}
	return b.stop
}

// rankedOff is an offering and an upper bound on the value per cost of
// one of its nodes.
type rankedOff struct {
	off   int
	ratio float64
}

// rank returns the candidate offerings by a cheap upper bound on a node's
// value per cost, highest first: Σ_i val_i · min(upper_i, items of shape i
// that fit alone) / cost. A free offering ranks first.
func (b *buyer) rank(val []float64, upper []int64) []rankedOff {
	out := make([]rankedOff, 0, len(b.offs))
	for _, o := range b.offs {
		u := 0.0
		for i, v := range val {
			if v > 0 && upper[i] > 0 {
				u += v * float64(min(upper[i], perFit(b.capOf(o), b.reqOf(i))))
			}
		}
		r := math.Inf(1)
		if b.cost[o] > 0 {
			r = u / b.cost[o]
		}
		out = append(out, rankedOff{o, r})
	}
	b.work += len(b.offs) * len(val) * (b.nd + 2)
	slices.SortStableFunc(out, func(x, y rankedOff) int { return cmp.Compare(y.ratio, x.ratio) })
	return out
}

// nodeWork is the work of a knapsack search of nodes nodes (each computes
// a bound over every shape in every dimension).
func (b *buyer) nodeWork(nodes int) int { return (nodes + 2) * len(b.shapes) * (b.nd + 2) * 4 }

// packNodesEstimate bounds the number of new nodes Pack would open: a
// group opens at most ceil(count / k) nodes, k being the fewest of its
// items that fit on an empty node of any offering that holds one.
func (b *buyer) packNodesEstimate() int {
	total := 0.0
	for i := range b.shapes {
		least := int64(math.MaxInt64)
		for o := range b.noffs {
			if k := perFit(b.capOf(o), b.reqOf(i)); k > 0 && b.limit(o) != 0 {
				least = min(least, k)
			}
		}
		total += math.Ceil(float64(b.need[i]) / float64(max(least, 1)))
	}
	return int(min(total, math.MaxInt32))
}

// run solves the LP by column generation and rounds it.
func (b *buyer) run() Purchase {
	m := len(b.shapes)
	out := Purchase{Method: "optimized"}
	b.limitNow = b.opts.Work
	if m == 0 || len(b.offs) == 0 {
		out.HasBound = true
		return out
	}
	if m > maxLPShapes {
		// Too many shapes for the LP: greedy patterns only, no bound.
		left := slices.Clone(b.need)
		out.New, _ = b.greedy(nil, left, make([]int, b.noffs), 0, b.weight)
		out.Cost = planCost(out.New, b.cost)
		return out
	}
	// Initial basis: per shape, the offering cheapest per item of it alone.
	init := make([]column, m)
	n := make([]float64, m)
	for i := range m {
		n[i] = float64(b.need[i])
		best, bestRate, bestK := -1, 0.0, int64(0)
		for _, o := range b.offs {
			k := min(perFit(b.capOf(o), b.reqOf(i)), b.need[i])
			if k <= 0 {
				continue
			}
			if rate := b.cost[o] / float64(k); best < 0 || rate < bestRate {
				best, bestRate, bestK = o, rate, k
			}
		}
		a := make([]int64, m)
		a[i] = bestK
		init[i] = column{off: best, a: a, cost: b.cost[best]}
	}
	lp := newMaster(n, init)
	// Column generation may use 60 % of the budget; the bound and the
	// rounding share the rest.
	b.limitNow = b.opts.Work * 6 / 10
	exact := b.generate(lp)
	b.stop, b.limitNow = false, b.opts.Work
	out.Optimal = exact

	// Farley's bound from the duals (clamped at zero): scaled to be feasible
	// for the dual of the full LP, y's value bounds every purchase.
	y := make([]float64, m)
	for i := range m {
		y[i] = max(lp.y[i], 0)
	}
	theta, free := 0.0, false
	upper := make([]int64, m)
	// The bound's searches share what is left of the budget (at least 30
	// nodes each: the Lagrangian bound covers a search cut short).
	per := max(0, min(4000, (b.opts.Work-b.work)/max(1, len(b.offs)*b.nodeWork(1))))
	for i := range m {
		upper[i] = b.need[i]
	}
	for _, r := range b.rank(y, upper) {
		o := r.off
		if b.cost[o] > 0 && r.ratio <= theta {
			break // no offering left can raise theta
		}
		b.k.reset(b.nd, b.capOf(o), b.req, y, upper, per)
		_, _, u := b.k.solve(theta * b.cost[o])
		b.work += b.k.work
		if b.cost[o] <= 0 {
			free = free || u > 0
			continue
		}
		theta = max(theta, u/b.cost[o])
	}
	dual := 0.0
	for i := range m {
		dual += n[i] * y[i]
	}
	switch {
	case free:
		out.Bound = 0
	case theta > 0:
		out.Bound = dual / max(theta, 1)
	}
	out.HasBound = true

	// Round down, then buy the remainder greedily.
	var plan []Bought
	left := slices.Clone(b.need)
	used := make([]int, b.noffs)
	nodes := 0
	type frac struct {
		col int
		x   float64
	}
	var fr []frac
	for r, j := range lp.basis {
		if j >= 0 && lp.xb[r] > 1e-9 {
			fr = append(fr, frac{j, lp.xb[r]})
		}
	}
	slices.SortStableFunc(fr, func(p, q frac) int { return cmp.Compare(q.x, p.x) })
	for _, f := range fr {
		c := &lp.cols[f.col]
		cnt := b.room(c.off, used, nodes, int64(math.Floor(f.x+1e-9)))
		if cnt <= 0 {
			continue
		}
		plan, nodes = b.assign(plan, c.off, c.a, cnt, left, used, nodes)
	}
	bestPlan, bestLeft := plan, left
	bestCost := planCost(plan, b.cost)
	// Two greedy finishes: by LP duals and by dominant share.
	yv := slices.Clone(y)
	top := slices.Max(y)
	for i := range yv {
		yv[i] += 1e-6 * max(top, 1e-9) * b.weight[i] // shapes the duals price at 0 still count
	}
	for _, val := range [][]float64{yv, b.weight} {
		l2 := slices.Clone(left)
		u2 := slices.Clone(used)
		p2, _ := b.greedy(slices.Clone(plan), l2, u2, nodes, val)
		if c := planCost(p2, b.cost); sum(l2) < sum(bestLeft) || sum(l2) == sum(bestLeft) && c < bestCost {
			bestPlan, bestLeft, bestCost = p2, l2, c
		}
	}
	if sum(bestLeft) > 0 || len(fr) == 0 {
		// Greedy from scratch as a last resort.
		l2 := slices.Clone(b.need)
		p2, _ := b.greedy(nil, l2, make([]int, b.noffs), 0, b.weight)
		if c := planCost(p2, b.cost); sum(l2) < sum(bestLeft) || sum(l2) == sum(bestLeft) && c < bestCost {
			bestPlan, bestLeft, bestCost = p2, l2, c
		}
	}
	out.New = bestPlan
	out.Cost = bestCost
	return out
}

// sum adds counts, saturating at math.MaxInt64.
func sum(v []int64) int64 {
	s := int64(0)
	for _, x := range v {
		if s > math.MaxInt64-x {
			return math.MaxInt64
		}
		s += x
	}
	return s
}

func planCost(p []Bought, cost []float64) float64 {
	c := 0.0
	for _, n := range p {
		c += float64(n.Count) * cost[n.Offering]
	}
	return c
}

// room returns how many of want nodes of offering o the limits still allow.
func (b *buyer) room(o int, used []int, nodes int, want int64) int64 {
	if b.opts.MaxNodes >= 0 {
		want = min(want, int64(b.opts.MaxNodes-nodes))
	}
	if l := b.limit(o); l >= 0 {
		want = min(want, int64(l-used[o]))
	}
	return max(want, 0)
}

// generate runs column generation until no pattern prices out (it returns
// true: the LP is optimal) or the budget is spent (false).
func (b *buyer) generate(lp *master) bool {
	m := len(b.shapes)
	upper := make([]int64, m)
	for i := range m {
		upper[i] = b.need[i]
	}
	limit := 300
	perRound := max(2, m/2)
	for {
		before := lp.work
		lp.improve(4 * m)
		if b.spend(lp.work - before) {
			return false
		}
		// Price the candidate offerings with the branch-and-bound knapsack,
		// most promising first (by a cheap bound on value per cost), and add
		// the patterns that price out; a round stops after a few.
		promise := b.rank(lp.y, upper)
		added, exact := 0, true
		for _, r := range promise {
			o := r.off
			if r.ratio <= 1+1e-9 || added >= perRound {
				break // the rest cannot price out (or wait for the next round)
			}
			b.k.reset(b.nd, b.capOf(o), b.req, lp.y, upper, limit)
			fill, v, _ := b.k.solve(b.cost[o] * (1 + 1e-9))
			exact = exact && b.k.exact
			if b.spend(b.k.work) {
				return false
			}
			if v > b.cost[o]*(1+1e-9)+1e-12 {
				lp.cols = append(lp.cols, column{off: o, a: slices.Clone(fill), cost: b.cost[o]})
				added++
			}
		}
		if added >= perRound {
			exact = false // not every offering was priced
		}
		if added == 0 && !exact && limit < 4000 {
			limit = 4000 // search harder before giving up on the LP
			continue
		}
		if added == 0 {
			return exact
		}
		if len(lp.cols) > 4096 {
			return false
		}
	}
}

// assign adds cnt nodes of offering o filled with pattern a, placing only
// the items still left; nodes that would hold nothing are not bought. It
// returns the plan and the new node count.
func (b *buyer) assign(plan []Bought, o int, a []int64, cnt int64, left []int64, used []int, nodes int) ([]Bought, int) {
	// Shape i fills the first full_i nodes with a[i] items and one more
	// node with the remainder: the nodes split into segments of equal fill.
	cuts := []int64{0, cnt}
	for i, ai := range a {
		if ai <= 0 {
			continue
		}
		take := min(left[i], ai*cnt)
		full := take / ai
		cuts = append(cuts, full, min(full+1, cnt))
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	for s := 0; s+1 < len(cuts); s++ {
		lo, hi := cuts[s], cuts[s+1]
		if lo >= cnt {
			break
		}
		var pl []Placement
		for i, ai := range a {
			if ai <= 0 {
				continue
			}
			take := min(left[i], ai*cnt)
			full := take / ai
			var per int64
			switch {
			case lo < full:
				per = ai
			case lo == full:
				per = take - full*ai
			}
			if per > 0 {
				pl = append(pl, Placement{Group: b.shapes[i], Count: int(per)})
			}
		}
		if len(pl) == 0 {
			continue
		}
		plan = append(plan, Bought{Offering: o, Count: int(hi - lo), Placements: pl})
		used[o] += int(hi - lo)
		nodes += int(hi - lo)
	}
	for i, ai := range a {
		if ai > 0 {
			left[i] -= min(left[i], ai*cnt)
		}
	}
	return plan, nodes
}

// greedy buys the items left pattern by pattern: each step takes, over the
// offerings with room, the fill of best value (val per item) per cost and
// as many copies of it as the backlog fills completely.
func (b *buyer) greedy(plan []Bought, left []int64, used []int, nodes int, val []float64) ([]Bought, int) {
	m := len(b.shapes)
	for step := 0; step < 8*m+64 && sum(left) > 0; step++ {
		best, bestRate := -1, 0.0
		var bestFill []int64
		for _, r := range b.rank(val, left) {
			o := r.off
			if best >= 0 && r.ratio <= 1/bestRate {
				break // no offering left can beat the best rate
			}
			if b.room(o, used, nodes, 1) == 0 {
				continue
			}
			limit := 30
			if b.stop {
				limit = 0
			}
			b.k.reset(b.nd, b.capOf(o), b.req, val, left, limit)
			skip := 0.0
			if best >= 0 {
				skip = b.cost[o] / bestRate // cannot beat the best rate so far
			}
			fill, v, _ := b.k.solve(skip)
			b.spend(b.k.work)
			if v <= 0 {
				continue
			}
			if rate := b.cost[o] / v; best < 0 || rate < bestRate {
				best, bestRate, bestFill = o, rate, slices.Clone(fill)
			}
		}
		if best < 0 {
			break
		}
		copies := int64(math.MaxInt64)
		for i, a := range bestFill {
			if a > 0 {
				copies = min(copies, left[i]/a)
			}
		}
		copies = b.room(best, used, nodes, max(copies, 1))
		plan, nodes = b.assign(plan, best, bestFill, copies, left, used, nodes)
	}
	if sum(left) > 0 {
		// Whatever is still left (a long tail): pack it first fit decreasing.
		var rest []capacity.Pending
		var shapeOf []int
		for i := range m {
			if left[i] > 0 {
				rest = append(rest, capacity.Pending{Requests: b.d.resources(b.reqOf(i)), Count: int(left[i])})
				shapeOf = append(shapeOf, i)
			}
		}
		if sum(left) <= maxPackNodes {
			offs := make([]capacity.Offering, len(b.allOf))
			copy(offs, b.allOf)
			for o := range offs {
				if b.room(o, used, nodes, 1) == 0 {
					offs[o].Resources = capacity.Resources{}
				}
			}
			maxNew := -1
			if b.opts.MaxNodes >= 0 {
				maxNew = b.opts.MaxNodes - nodes
			}
			res := Pack(rest, offs, WithMaxNew(maxNew))
			cp := fromResult(&res, len(offs))
			if b.fitsLimits(cp.Counts, used) {
				for _, n := range cp.New {
					pl := make([]Placement, len(n.Placements))
					for j, x := range n.Placements {
						pl[j] = Placement{Group: b.shapes[shapeOf[x.Group]], Count: x.Count}
					}
					plan = append(plan, Bought{Offering: n.Offering, Count: n.Count, Placements: pl})
					used[n.Offering] += n.Count
					nodes += n.Count
				}
				for j, i := range shapeOf {
					left[i] = int64(res.Unplaced[j])
				}
			}
		}
	}
	return plan, nodes
}

// fitsLimits reports whether buying counts more on top of used stays within every Limit.
func (b *buyer) fitsLimits(counts, used []int) bool {
	for o, c := range counts {
		if l := b.limit(o); l >= 0 && used[o]+c > l {
			return false
		}
	}
	return true
}

// withinLimits reports whether a purchase stays within MaxNodes and every Limit.
func (b *buyer) withinLimits(p *Purchase) bool {
	if b.opts.MaxNodes >= 0 && p.Nodes > b.opts.MaxNodes {
		return false
	}
	return b.fitsLimits(p.Counts, make([]int, b.noffs))
}

// finish fills the derived fields of an optimized purchase.
func (b *buyer) finish(p *Purchase, groups []capacity.Pending) {
	p.Counts = make([]int, b.noffs)
	p.Unplaced = make([]int, len(groups))
	placed := make([]int, len(groups))
	// Saturating sums: groups of huge counts buy "more than any max",
	// never a count wrapped negative.
	for _, n := range p.New {
		p.Counts[n.Offering] = validate.Add(p.Counts[n.Offering], n.Count)
		p.Nodes = validate.Add(p.Nodes, n.Count)
		for _, pl := range n.Placements {
			placed[pl.Group] = validate.Add(placed[pl.Group], validate.Mul(pl.Count, n.Count))
		}
	}
	for _, e := range p.Existing {
		for _, pl := range e.Placements {
			placed[pl.Group] = validate.Add(placed[pl.Group], pl.Count)
		}
	}
	for g := range groups {
		p.Unplaced[g] = max(max(groups[g].Count, 0)-placed[g], 0)
		p.UnplacedTotal = validate.Add(p.UnplacedTotal, p.Unplaced[g])
	}
	if p.UnplacedTotal > sumInt(b.unfit) {
		p.HasBound = false // a cap left items out: the bound is for all of them
	}
}

func sumInt(v []int) int { return validate.Sum(v...) }
