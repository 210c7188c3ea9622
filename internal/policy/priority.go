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
	kept := Backlog(p.cfg, in)
	in.Pressure.Pending = kept
	d := p.Policy.Decide(in)
	d.Backlog = kept
	return d
}

// Backlog is the part of in's pending work that the pool's policy buys for
// (cfg validated): without what is below cfg.ExpendableBelow, and, when
// the rest needs more nodes than the pool's max leaves room for, the
// longest run by priority that fits (gangs whole). `tide decide` shows
// which gangs it holds.
func Backlog(cfg Config, in Input) []capacity.Pending {
	pend := in.Pressure.Pending
	kept := make([]capacity.Pending, 0, len(pend))
	for _, g := range pend {
		if cfg.ExpendableBelow == nil || g.Priority >= *cfg.ExpendableBelow {
			kept = append(kept, g)
		}
	}
	p := prioritized{cfg: cfg}
	return p.withinMax(&in, kept)
}

// withinMax returns the groups of pend the pool can buy for within its
// max: all of them when they fit, else the longest run by priority
// (highest first, the report's order within one) that does; gangs that
// not even an empty pool of max nodes could hold are left out first.
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
	// A gang that no pool of max nodes could hold is never bought for:
	// left out, it holds up no work of lower priority.
	if never := p.neverFitMax(pend); len(never) > 0 {
		pend = slices.DeleteFunc(slices.Clone(pend), func(g capacity.Pending) bool { return never[g.Gang] })
		if len(pend) == 0 {
			return pend
		}
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
	// A first guess from each group's own nodes on the offering that
	// needs the fewest for it (the groups share no node: at least as many
	// as a joint packing needs, so the guessed run fits, or nearly): the
	// longest run whose nodes stay within the room, plus what the free
	// space may hold. Then packings confirm it, or search below or above.
	guess, used := 0, 0
	for guess < len(order) {
		n, ok := p.ownNodes(order[guess])
		if ok && used+n > room+len(free) {
			break
		}
		used += n
		guess++
	}
	if guess == len(order) && fits(len(order)) {
		return pend
	}
	var k int
	if fits(guess) {
		// The largest k at or above guess whose first k groups fit.
		k = guess + sort.Search(len(order)-guess, func(i int) bool { return !fits(guess + i + 1) })
	} else {
		k = sort.Search(guess, func(k int) bool { return !fits(k + 1) })
	}
	// k is the longest run that fits (fits(0) holds); the next group,
	// unless a gang, is bought for in part (the policy clamps its
	// purchase to the max).
	if k >= len(order) {
		return pend
	}
	if order[k].Gang == "" {
		k++
	}
	// A gang may be several groups (a ProvisioningRequest's pod sets of
	// different shapes): one cut off in part is left out whole.
	cut := map[string]bool{}
	for _, g := range order[k:] {
		if g.Gang != "" {
			cut[g.Gang] = true
		}
	}
	if len(cut) == 0 {
		return order[:k]
	}
	return slices.DeleteFunc(order[:k], func(g capacity.Pending) bool { return cut[g.Gang] })
}

// GangFitsMax reports whether the gang of groups gang (all its groups)
// fits an empty pool of cfg's max nodes (cfg validated): a gang that does
// not is never bought for. tide decide reports it.
func GangFitsMax(cfg Config, gang []capacity.Pending) bool {
	if len(cfg.Offerings) == 0 {
		return true
	}
	return (&prioritized{cfg: cfg}).fitsMax(gang)
}

// neverFitMax names the gangs of pend (all groups of a name together)
// that no empty pool of max nodes could hold.
func (p *prioritized) neverFitMax(pend []capacity.Pending) map[string]bool {
	var never map[string]bool
	for i, g := range pend {
		if g.Gang == "" || slices.ContainsFunc(pend[:i], func(o capacity.Pending) bool { return o.Gang == g.Gang }) {
			continue // plain, or this gang's first group decided it
		}
		gang := []capacity.Pending{g}
		for _, o := range pend[i+1:] {
			if o.Gang == g.Gang {
				gang = append(gang, o)
			}
		}
		if !p.fitsMax(gang) {
			if never == nil {
				never = map[string]bool{}
			}
			never[g.Gang] = true
		}
	}
	return never
}

// fitsMax reports whether the groups of one gang fit an empty pool of max
// nodes together (requests that fit no offering count as fitting: the
// policy reports such shapes).
func (p *prioritized) fitsMax(gang []capacity.Pending) bool {
	if len(gang) == 1 {
		if n, ok := p.ownNodes(gang[0]); !ok || n <= p.cfg.Nodes.Max {
			return true
		}
	}
	res := binpack.Pack(gang, p.cfg.Offerings, binpack.WithMaxNew(p.cfg.Nodes.Max))
	for g, u := range res.Unplaced {
		if u > 0 && p.fitsSomeOffering(gang[g].Requests) {
			return false
		}
	}
	return true
}

// ownNodes is the fewest nodes of one offering that host group g alone;
// false when no offering fits its request.
func (p *prioritized) ownNodes(g capacity.Pending) (int, bool) {
	best, ok := 0, false
	for _, o := range p.cfg.Offerings {
		if n, fit := binpack.NodesFor(g.Requests, g.Count, o.Resources); fit && (!ok || n < best) {
			best, ok = n, true
		}
	}
	return best, ok
}

func (p *prioritized) fitsSomeOffering(req capacity.Resources) bool {
	for _, o := range p.cfg.Offerings {
		if _, ok := binpack.PerNode(req, o.Resources); ok {
			return true
		}
	}
	return false
}
