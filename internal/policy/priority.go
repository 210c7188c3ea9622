package policy

import (
	"cmp"
	"slices"
	"sort"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// prioritized makes every policy buy by priority (issue 36):
//
//   - Work below the pool's ExpendableBelow priority never causes a
//     scale-up: the wrapped policy does not see it (Cluster Autoscaler's
//     expendable-pods cutoff). It still runs on free room.
//   - When the backlog needs more new nodes than the pool's max leaves
//     room for, the wrapped policy sees only the longest run of pending
//     groups, highest priority first, that fits within that room (a first
//     fit packing into the free space, then new nodes): higher priorities
//     are bought for first, and a gang, one group of the report, is in the
//     purchase whole or not at all.
//
// The wrapped policies already buy a whole backlog in one decision, so a
// gang's nodes are bought in one purchase (the cheapest mix that fits all
// its instances, binpack.Buy).
type prioritized struct {
	Policy
	cfg Config
}

// withPriorities wraps p.
func withPriorities(p Policy, cfg Config) Policy { return &prioritized{Policy: p, cfg: cfg} }

// Decide filters the backlog and evaluates the wrapped policy.
func (p *prioritized) Decide(in Input) Decision {
	pend := in.Pressure.Pending
	plain := true
	for i := range pend {
		if pend[i].Priority != pend[0].Priority || pend[i].Gang != "" ||
			(p.cfg.ExpendableBelow != nil && pend[i].Priority < *p.cfg.ExpendableBelow) {
			plain = false
			break
		}
	}
	if plain {
		return p.Policy.Decide(in)
	}
	kept := make([]capacity.Pending, 0, len(pend))
	for _, g := range pend {
		if p.cfg.ExpendableBelow == nil || g.Priority >= *p.cfg.ExpendableBelow {
			kept = append(kept, g)
		}
	}
	in.Pressure.Pending = p.withinMax(&in, kept)
	return p.Policy.Decide(in)
}

// withinMax returns the groups of pend the pool can buy for within its
// max: all of them when they fit, else the longest run by priority
// (highest first, the report's order within one) that does.
func (p *prioritized) withinMax(in *Input, pend []capacity.Pending) []capacity.Pending {
	if len(pend) == 0 || len(p.cfg.Offerings) == 0 {
		return pend
	}
	var free []capacity.Resources
	nodes := 0
	for i := range in.Pressure.Nodes {
		if n := &in.Pressure.Nodes[i]; n.MarkedAt.IsZero() {
			nodes++
			free = append(free, n.Free())
		}
	}
	room := p.cfg.Nodes.Max - nodes
	if room < 0 {
		room = 0
	}
	order := slices.Clone(pend)
	slices.SortStableFunc(order, func(a, b capacity.Pending) int { return cmp.Compare(b.Priority, a.Priority) })
	fits := func(k int) bool {
		if k == 0 {
			return true
		}
		res := binpack.Pack(order[:k], p.cfg.Offerings, binpack.WithFree(free), binpack.WithMaxNew(room))
		for g, u := range res.Unplaced {
			if u > 0 && p.fitsSomeOffering(order[g].Requests) {
				return false
			}
		}
		return true
	}
	if fits(len(order)) {
		return pend
	}
	// The largest k whose first k groups fit (fits(0) holds); the next
	// group, unless a gang, is bought for in part (the policy clamps its
	// purchase to the max).
	k := sort.Search(len(order), func(k int) bool { return !fits(k + 1) })
	if order[k].Gang == "" {
		k++
	}
	return order[:k]
}

func (p *prioritized) fitsSomeOffering(req capacity.Resources) bool {
	for _, o := range p.cfg.Offerings {
		if _, ok := binpack.PerNode(req, o.Resources); ok {
			return true
		}
	}
	return false
}
