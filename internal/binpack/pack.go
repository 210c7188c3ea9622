package binpack

import (
	"cmp"
	"math"
	"slices"

	"github.com/tide-project/tide/internal/capacity"
)

// lookahead is the number of item groups (beyond the one being placed) that
// Pack simulates when it rates an offering for a new node. It bounds the cost
// of opening a node when the backlog holds many distinct shapes.
const lookahead = 64

// lookaheadMisses ends a simulated fill after this many later groups in a
// row did not fit: the node is then as good as full.
const lookaheadMisses = 8

// minWeight is the weight of an item that asks for nothing, so that every
// item counts when Pack divides a node's cost by the demand it covers.
const minWeight = 1e-6

// Option adjusts a Pack call.
type Option func(*options)

type options struct {
	free   []capacity.Resources
	maxNew int // < 0: unlimited
}

// WithFree gives Pack the free resources of existing nodes. Pack fills them
// (first fit, in the given order) before it opens any new node; they cost
// nothing. Result.Existing has one entry per element of free.
func WithFree(free []capacity.Resources) Option {
	return func(o *options) { o.free = free }
}

// WithMaxNew caps the number of new nodes Pack opens; items that do not fit
// once the cap is reached are reported unplaced. n < 0 means no cap (the
// default), n = 0 allows existing free space only.
func WithMaxNew(n int) Option {
	return func(o *options) { o.maxNew = n }
}

// Placement is a number of items of one group placed on one node.
type Placement struct {
	// Group is the index of the group in the groups given to Pack.
	Group int
	// Count is the number of the group's items placed.
	Count int
}

// Node is one node of a packing: a new node of an offering, or the free
// space of an existing node.
type Node struct {
	// Offering is the index of the new node's offering, or -1 for existing space.
	Offering int
	// Existing is the index of the existing node's free space in WithFree, or -1 for a new node.
	Existing int
	// Used is what the items placed here request in total.
	Used capacity.Resources
	// Items is the number of items placed here.
	Items int
	// Placements lists the items by group, in the order they were placed.
	Placements []Placement
}

// Result is a packing.
type Result struct {
	// New lists the new nodes in the order Pack opened them.
	New []Node
	// Existing has one entry per WithFree element, with what was placed there.
	Existing []Node
	// Unplaced has one entry per group: how many of its items were not placed
	// (they fit no existing free space and no offering, or WithMaxNew was hit).
	Unplaced []int
	// UnplacedTotal is the sum of Unplaced.
	UnplacedTotal int
	// Cost is the sum of the new nodes' effective cost per hour
	// (capacity.Offering.EffectiveCost); existing space costs nothing.
	Cost float64
}

// Counts returns the number of new nodes per offering index (len(offerings) entries).
func (r *Result) Counts(offerings int) []int {
	out := make([]int, offerings)
	for i := range r.New {
		out[r.New[i].Offering]++
	}
	return out
}

// Pack places the items of groups first into the free space of existing nodes
// (WithFree), then onto new nodes of the given offerings, first fit
// decreasing, and returns the nodes it used.
//
// Order: groups are sorted by decreasing dominant share (the largest fraction
// of any dimension's biggest available node an item asks for; ties by the sum
// of the shares, then by group index). Each item goes into the lowest-numbered
// node that fits it: existing nodes in WithFree order, then new nodes in the
// order they were opened. Items of one group are placed as a batch, which is
// the same as placing them one by one.
//
// Choosing a new node: when an item fits no open node, Pack rates every
// offering that fits it by effective cost per unit of demand covered. It
// simulates filling an empty node of the offering with the remaining demand
// in packing order (the rest of the current group, then up to 64 later
// groups, first fit, stopping early after 8 groups in a row that do not fit)
// and divides the offering's EffectiveCost by the summed dominant shares of
// the items that would land on it; the lowest rate wins (ties: more demand
// covered, then lower offering index). A big node is thus
// chosen while it would be filled and a small one for the tail of the
// backlog, and a spot offering wins over on-demand exactly when its price
// plus interruption probability × penalty is lower. Offerings dominated by
// another (no larger in any dimension and no cheaper) are never opened. The
// rating ignores that later items may also fit the leftovers of other open
// nodes, so it is a heuristic: it aims at, but does not guarantee, the
// cheapest mix.
//
// Pack never modifies its arguments. Every placement respects capacity in
// every dimension; every item that fits some offering is placed unless
// WithMaxNew stops it.
func Pack(groups []capacity.Pending, offerings []capacity.Offering, opts ...Option) Result {
	o := options{maxNew: -1}
	for _, opt := range opts {
		opt(&o)
	}
	p := newPacker(groups, offerings, o)
	p.run()
	return p.result(nil)
}

// slowTree makes newPacker build its tree bin by bin with every bin's free
// space, as it did before the one-pass build: tests compare the two.
var slowTree = false

type placement struct {
	bin, group int32
	count      int
}

type packer struct {
	d    dims
	nd   int
	opts options

	groups  []capacity.Pending
	req     []int64   // group requests, nd per group
	weight  []float64 // group item weight (dominant share)
	order   []int32   // groups to place, packing order
	sufMin  []int64   // component-wise min of req over order[i:], nd per position
	offs    []capacity.Offering
	offCap  []int64   // offering capacities, nd per offering
	offCost []float64 // effective cost per offering
	cand    []int32   // offerings worth opening (not dominated), by bound
	bound   []float64 // per offering, a lower bound on its rate (cost per demand covered)

	binFree  []int64 // nd per bin; existing bins first
	binStart []int64 // initial free (existing) or capacity (new), nd per bin
	binOff   []int32 // offering, or -1 for existing
	// exIdx is, per existing bin, its index in options.free: only the
	// existing nodes that could take an item are bins.
	exIdx    []int32
	binItems []int
	tree     tree
	newCount int

	log      []placement
	unplaced []int
	scratch  []int64
	memo     struct{ pos, minRem, choice int }
}

func newPacker(groups []capacity.Pending, offerings []capacity.Offering, o options) *packer {
	p := &packer{opts: o, groups: groups, offs: offerings, unplaced: make([]int, len(groups))}
	p.memo.pos = -1
	for i := range groups {
		if groups[i].Count > 0 {
			p.d.add(groups[i].Requests)
		}
	}
	for i := range offerings {
		p.d.add(offerings[i].Resources)
	}
	for i := range o.free {
		p.d.add(o.free[i])
	}
	nd := p.d.n()
	p.nd = nd
	p.scratch = make([]int64, nd)

	// Offerings: capacity vectors (negative amounts count as zero) and cost.
	p.offCap = make([]int64, len(offerings)*nd)
	p.offCost = make([]float64, len(offerings))
	biggest := make([]int64, nd) // per dimension, the largest node available
	for i := range offerings {
		v := p.offCap[i*nd : (i+1)*nd]
		p.d.vec(offerings[i].Resources, v)
		for k := range v {
			v[k] = max(v[k], 0)
			biggest[k] = max(biggest[k], v[k])
		}
		p.offCost[i] = offerings[i].EffectiveCost()
	}
	p.pruneOfferings()

	// Existing free space counts in the largest node available.
	v := make([]int64, nd)
	for i := range o.free {
		p.d.vec(o.free[i], v)
		for k := range v {
			biggest[k] = max(biggest[k], v[k])
		}
	}

	// Groups: vectors, weights, packing order. A group asking for a negative
	// amount, or for a dimension no node has, is unplaced outright.
	p.req = make([]int64, len(groups)*nd)
	p.weight = make([]float64, len(groups))
	type key struct {
		dom, sum float64
		g        int32
	}
	keys := make([]key, 0, len(groups))
	for i := range groups {
		if groups[i].Count <= 0 {
			continue
		}
		v := p.req[i*nd : (i+1)*nd]
		p.d.vec(groups[i].Requests, v)
		dom, sum, ok := 0.0, 0.0, true
		for k, r := range v {
			if r < 0 || r > biggest[k] {
				ok = false
				break
			}
			if r > 0 {
				s := float64(r) / float64(biggest[k])
				dom, sum = max(dom, s), sum+s
			}
		}
		if !ok {
			p.unplaced[i] = groups[i].Count
			continue
		}
		p.weight[i] = max(dom, minWeight)
		keys = append(keys, key{dom: p.weight[i], sum: sum, g: int32(i)})
	}
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case a.dom > b.dom:
			return -1
		case a.dom < b.dom:
			return 1
		case a.sum > b.sum:
			return -1
		case a.sum < b.sum:
			return 1
		}
		return int(a.g - b.g)
	})
	p.order = make([]int32, len(keys))
	for i, k := range keys {
		p.order[i] = k.g
	}
	p.rankCandidates(biggest)
	p.sufMin = make([]int64, len(p.order)*nd)
	for pos := len(p.order) - 1; pos >= 0; pos-- {
		dst, req := p.sufMin[pos*nd:(pos+1)*nd], p.req[int(p.order[pos])*nd:]
		for k := range dst {
			dst[k] = req[k]
			if pos+1 < len(p.order) {
				dst[k] = min(dst[k], p.sufMin[(pos+1)*nd+k])
			}
		}
	}
	// Existing free space: the first bins, in the given order. A node
	// whose free space does not fit the smallest request in some dimension
	// (sufMin[0], the component-wise minimum over every group to place)
	// fits no item, in this packing or in packTwice's second: it is no bin
	// (its Result entry says nothing was placed), which leaves every
	// first-fit answer as it was and spares each packing the vectors, the
	// tree leaves and the result entries of full nodes (a backlog that
	// waits is mostly one that fits no existing node). slowTree keeps
	// every node as a bin, as before.
	p.exIdx = make([]int32, 0, len(o.free))
	for i := range o.free {
		p.d.vec(o.free[i], v)
		for k := range v {
			v[k] = max(v[k], 0)
		}
		if slowTree || len(p.order) > 0 && fits(p.sufMin[:nd], v) {
			p.exIdx = append(p.exIdx, int32(i))
			p.binFree = append(p.binFree, v...)
		}
	}
	nb := len(p.exIdx)
	p.binFree = slices.Grow(p.binFree, 16*nd)
	p.binOff = make([]int32, nb, nb+16)
	p.binItems = make([]int, nb, nb+16)
	for b := range nb {
		p.binOff[b] = -1
	}
	p.binStart = slices.Clone(p.binFree)
	// The tree over the existing bins, built in one pass.
	p.tree = newTree(nd, nb+16)
	if slowTree {
		for i := range nb {
			p.tree.set(i, p.binFree[i*nd:(i+1)*nd])
		}
	} else {
		p.tree.build(p.binFree, nil)
	}
	return p
}

// pruneOfferings keeps, cheapest first, the offerings that no cheaper-or-equal
// offering dominates in every dimension: opening a dominated offering is
// never better than opening the one that dominates it.
func (p *packer) pruneOfferings() {
	nd := p.nd
	idx := make([]int32, len(p.offs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp.Compare(p.offCost[a], p.offCost[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	p.cand = idx[:0]
	for _, o := range idx {
		v := p.offCap[int(o)*nd : (int(o)+1)*nd]
		dominated := false
		for _, k := range p.cand {
			if fits(v, p.offCap[int(k)*nd:(int(k)+1)*nd]) {
				dominated = true
				break
			}
		}
		if !dominated {
			p.cand = append(p.cand, o)
		}
	}
}

// rankCandidates computes each offering's rate bound and sorts the
// candidates by it. Items on a node cover at most Σ_d capacity_d / biggest_d
// of demand (an item's dominant share is at most the sum of its shares), so
// cost / that sum is a lower bound on the offering's rate: once it exceeds
// the best rate found, no later candidate can win.
func (p *packer) rankCandidates(biggest []int64) {
	nd := p.nd
	p.bound = make([]float64, len(p.offs))
	for _, o := range p.cand {
		most := 0.0
		for k, c := range p.offCap[int(o)*nd : (int(o)+1)*nd] {
			if biggest[k] > 0 {
				most += float64(c) / float64(biggest[k])
			}
		}
		p.bound[o] = p.offCost[o] / max(most, minWeight)
	}
	slices.SortStableFunc(p.cand, func(a, b int32) int { return cmp.Compare(p.bound[a], p.bound[b]) })
}

func (p *packer) run() { p.place(nil) }

// place packs the groups in packing order: each group's Count items, or
// left[g] of them when left is not nil.
func (p *packer) place(left []int) {
	nd := p.nd
	for pos, g32 := range p.order {
		g := int(g32)
		req := p.req[g*nd : (g+1)*nd]
		rem := p.groups[g].Count
		if left != nil {
			rem = left[g]
		}
		for rem > 0 {
			b := p.tree.first(req)
			if b < 0 {
				o := p.choose(pos, g, rem)
				if o < 0 {
					p.unplaced[g] += rem
					break
				}
				b = p.open(o)
			}
			free := p.binFree[b*nd : (b+1)*nd]
			k := fitCount(free, req, rem)
			take(free, req, k)
			p.binItems[b] += k
			p.tree.set(b, free)
			if n := len(p.log); n > 0 && p.log[n-1].bin == int32(b) && p.log[n-1].group == g32 {
				p.log[n-1].count += k
			} else {
				p.log = append(p.log, placement{bin: int32(b), group: g32, count: k})
			}
			rem -= k
		}
	}
}

// choose returns the offering to open for the item group at packing position
// pos (rem items left), or -1 when none fits or the cap on new nodes is hit.
func (p *packer) choose(pos, g, rem int) int {
	if p.opts.maxNew >= 0 && p.newCount >= p.opts.maxNew {
		return -1
	}
	// The rating depends on rem only through k = min(rem, items per node);
	// while rem covers every candidate's k, the last answer still holds.
	if pos == p.memo.pos && rem >= p.memo.minRem {
		return p.memo.choice
	}
	nd := p.nd
	req := p.req[g*nd : (g+1)*nd]
	best, bestRate, bestCover, maxK := -1, 0.0, 0.0, 0
	for _, o32 := range p.cand {
		o := int(o32)
		if best >= 0 && p.bound[o] > bestRate {
			break // no later candidate can rate better
		}
		cp := p.offCap[o*nd : (o+1)*nd]
		if !fits(req, cp) {
			continue
		}
		avail := p.scratch
		copy(avail, cp)
		k := fitCount(avail, req, rem)
		take(avail, req, k)
		maxK = max(maxK, k)
		cover := float64(k) * p.weight[g]
		end := min(len(p.order), pos+1+lookahead)
		misses := 0
		for q := pos + 1; q < end; q++ {
			if !fits(p.sufMin[q*nd:(q+1)*nd], avail) {
				break // nothing later fits any more
			}
			h := int(p.order[q])
			hr := p.req[h*nd : (h+1)*nd]
			if !fits(hr, avail) {
				if misses++; misses == lookaheadMisses {
					break // the node is as good as full
				}
				continue
			}
			misses = 0
			k := 1
			if c := p.groups[h].Count; c > 1 {
				k = fitCount(avail, hr, c)
			}
			take(avail, hr, k)
			cover += float64(k) * p.weight[h]
		}
		rate := p.offCost[o] / cover
		if best < 0 || rate < bestRate || rate == bestRate && (cover > bestCover || cover == bestCover && o < best) {
			best, bestRate, bestCover = o, rate, cover
		}
	}
	p.memo.pos, p.memo.minRem, p.memo.choice = pos, maxK, best
	if maxK >= rem {
		p.memo.minRem = math.MaxInt // some candidate was limited by rem: do not reuse
	}
	return best
}

// open adds a new empty node of offering o and returns its bin index.
func (p *packer) open(o int) int {
	nd := p.nd
	b := len(p.binOff)
	cp := p.offCap[o*nd : (o+1)*nd]
	p.binFree = append(p.binFree, cp...)
	p.binStart = append(p.binStart, cp...)
	p.binOff = append(p.binOff, int32(o))
	p.binItems = append(p.binItems, 0)
	p.tree.set(b, cp)
	p.newCount++
	return b
}

// packTwice returns what Pack(groups, offerings, WithFree(free),
// WithMaxNew(0)) returns, and a function that returns what the same call
// with WithMaxNew(maxNew) returns, at the cost of one packing where the two
// calls would build and fill the existing free space twice (Buy makes both).
//
// The two packings fill the existing space alike: first fit tries the
// existing bins before any new one, and a new bin never changes them, so
// each group's items land on the same existing bins in both, and what the
// first leaves unplaced of a group is exactly what the second places on new
// bins or leaves unplaced. Placing those leftovers, in packing order, on new
// bins after the first packing is the second packing: a leftover fits no
// existing bin then (it did not fit after its own group, and the bins only
// shrank since), and choosing an offering does not read the existing bins.
// The second result shares its Existing entries with the first.
// TestPackTwiceMatchesPack compares both with Pack.
func packTwice(groups []capacity.Pending, offerings []capacity.Offering, free []capacity.Resources) (Result, func(maxNew int) Result) {
	p := newPacker(groups, offerings, options{free: free, maxNew: 0})
	p.run()
	pre := p.result(nil)
	pre.Unplaced = slices.Clone(pre.Unplaced)
	resumed := false
	return pre, func(maxNew int) Result {
		if resumed {
			panic("binpack: packTwice's second packing asked for twice")
		}
		resumed = true
		left := slices.Clone(p.unplaced)
		for _, g := range p.order {
			p.unplaced[g] = 0 // groups not in order were unplaced outright
		}
		p.opts.maxNew = maxNew
		p.place(left)
		return p.result(pre.Existing)
	}
}

// result builds the packing's Result; existing, when not nil, is taken as
// the Existing entries (already built from the same placements).
func (p *packer) result(existing []Node) Result {
	nd := p.nd
	nb := len(p.binOff)
	ne := len(p.exIdx)
	res := Result{Unplaced: p.unplaced, Existing: existing, New: make([]Node, nb-ne)}
	// Placements: one backing array, grouped by bin in placement order.
	start := make([]int, nb+1)
	for _, pl := range p.log {
		start[pl.bin+1]++
	}
	for b := range nb {
		start[b+1] += start[b]
	}
	all := make([]Placement, len(p.log))
	if existing == nil {
		// The existing nodes that are no bin took nothing.
		res.Existing = make([]Node, len(p.opts.free))
		for i := range res.Existing {
			res.Existing[i] = Node{Offering: -1, Existing: i, Placements: all[:0:0]}
		}
	}
	next := slices.Clone(start[:nb])
	for _, pl := range p.log {
		all[next[pl.bin]] = Placement{Group: int(pl.group), Count: pl.count}
		next[pl.bin]++
	}
	used := make([]int64, nd)
	first := 0
	if existing != nil {
		first = ne
	}
	for b := first; b < nb; b++ {
		for k := range used {
			used[k] = p.binStart[b*nd+k] - p.binFree[b*nd+k]
		}
		n := Node{Offering: int(p.binOff[b]), Existing: -1, Used: p.d.resources(used), Items: p.binItems[b],
			Placements: all[start[b]:start[b+1]:start[b+1]]}
		if b < ne {
			n.Existing = int(p.exIdx[b])
			res.Existing[n.Existing] = n
		} else {
			res.Cost += p.offCost[n.Offering]
			res.New[b-ne] = n
		}
	}
	for _, u := range p.unplaced {
		res.UnplacedTotal += u
	}
	return res
}
