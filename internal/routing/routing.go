// Package routing chooses the pool of an instance that names none, among
// the pools of a configuration: the heaviest, then the cheapest pool whose
// selector and offerings fit, a pool with a shortfall overflowing to the
// next, or, with a capacity-provider strategy, the split ECS makes by
// base and weight. The head (internal/assembly), `tide decide` and the
// simulator (internal/sim) all route through it, so they agree.
package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
)

// Pool is what routing needs of a pool (config.Pool.Route makes it).
type Pool struct {
	Name string
	// Weight prefers the pool outright: higher first.
	Weight int
	// Selector labels must all match the instance's.
	Selector map[string]string
	// Offerings are what the pool may launch; the instance must fit one.
	Offerings []capacity.Offering
}

// Strategy is a capacity-provider strategy in ECS's sense, over pools: the
// instances that name no pool, and that some of its pools fit, are split
// across those pools. The first Base instances live at a time go to the
// pool that has a base; the rest are divided in proportion to the weights.
// With base 2 on pool od (weight 1) and weight 3 on spot, a burst of 10
// lands 2 + 2 on od and 6 on spot. A pool of the strategy that cannot take
// more (at its max, over a limit, out of capacity) overflows to the
// strategy's others. config.File.Strategy is the configuration's.
type Strategy []StrategyEntry

// StrategyEntry is one pool of a strategy.
type StrategyEntry struct {
	// Pool names a pool.
	Pool string `json:"pool"`
	// Base is how many live instances, at least, the pool holds before
	// weights count; at most one entry may have one (as in ECS).
	Base int `json:"base,omitempty"`
	// Weight is the pool's share of the instances beyond the bases
	// (0..1000); 0 takes only its base.
	Weight int `json:"weight,omitempty"`
}

// Candidate is a pool that could serve an instance: its selector matches
// and one of its offerings fits.
type Candidate struct {
	// Pool is the pool's name.
	Pool string
	// Weight is the pool's weight (config.Pool.Weight).
	Weight int
	// Cost is the effective cost per hour of the cheapest fitting offering
	// (the node the instance would cost at most).
	Cost float64
	// Order is the pool's place in the config.
	Order int
	// Fits names the pool's offerings the request fits.
	Fits []string
	// Short says why the pool cannot take more now ("" when it can).
	Short string
}

// Decision is a routing decision: the chosen pool ("" for none), the
// candidates in preference order, and, when a strategy chose, why.
type Decision struct {
	Pool  string
	Cands []Candidate
	// Strategy says how the strategy chose ("" when it did not), e.g.
	// "strategy: base 2 of od" or "strategy: weight 3 of 4, 1 of 8 live".
	Strategy string
}

// First is the config's first fitting pool: the choice of first-match
// routing, the behaviour before weights and costs ("" for none).
func (d Decision) First() string {
	if len(d.Cands) == 0 {
		return ""
	}
	return slices.MinFunc(d.Cands, func(x, y Candidate) int { return x.Order - y.Order }).Pool
}

// String says which pools could serve, their costs, and why one was
// chosen, e.g. "spot (weight 0, $0.22/h) chosen over od (weight 0,
// $0.40/h, at its max of 4 nodes with 3 queued)".
func (d Decision) String() string {
	if d.Pool == "" {
		return "no pool's selector and offerings fit"
	}
	chosen := d.Pool + " chosen"
	var others []string
	for _, c := range d.Cands {
		s := fmt.Sprintf("%s (weight %d, $%.2f/h", c.Pool, c.Weight, c.Cost)
		if c.Short != "" {
			s += ", " + c.Short
		}
		s += ")"
		if c.Pool == d.Pool {
			chosen = s + " chosen"
			continue
		}
		others = append(others, s)
	}
	if d.Strategy != "" {
		chosen += " by " + d.Strategy
	}
	if len(others) > 0 {
		chosen += " over " + strings.Join(others, ", ")
	}
	return chosen
}

// Route picks the pool of an instance that names none, among those whose
// selector labels all match and one of whose offerings fits the request:
// the highest weight first, then the lowest effective cost of the
// cheapest fitting offering, then config order. A pool with a shortfall
// (short returns why: at its max, over a limit, every fitting offering
// out of capacity) overflows to the next; when every candidate has one,
// the first is chosen anyway (the instance waits there, as it would on a
// single pool). short may be nil.
func Route(pools []Pool, short func(pool string, fits []string) string, labels map[string]string,
	req capacity.Resources) Decision {
	var cands []Candidate
	for i, p := range pools {
		match := true
		for k, v := range p.Selector {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		cost, fits := math.Inf(1), []string(nil)
		for _, o := range p.Offerings {
			if req.Fits(o.Resources) {
				cost = min(cost, o.EffectiveCost())
				fits = append(fits, o.Name())
			}
		}
		if fits == nil {
			continue
		}
		cands = append(cands, Candidate{Pool: p.Name, Weight: p.Weight, Cost: cost, Order: i, Fits: fits})
	}
	slices.SortStableFunc(cands, func(a, b Candidate) int {
		switch {
		case a.Weight != b.Weight:
			return b.Weight - a.Weight
		case a.Cost < b.Cost:
			return -1
		case a.Cost > b.Cost:
			return 1
		}
		return a.Order - b.Order
	})
	d := Decision{Cands: cands}
	if len(cands) == 0 {
		return d
	}
	d.Pool = cands[0].Pool
	if short != nil {
		for i := range cands {
			cands[i].Short = short(cands[i].Pool, cands[i].Fits)
		}
		if i := slices.IndexFunc(cands, func(c Candidate) bool { return c.Short == "" }); i >= 0 {
			d.Pool = cands[i].Pool
		}
	}
	return d
}

// Split routes n instances of one request through strategy s, given the
// live (not ended) instances each pool holds now (counts, by pool name;
// it is not changed): each instance in turn goes to the strategy's
// candidate pool below its base (strategy order), else to the one whose
// count above its base is furthest below its weight's share, ties to the
// strategy's order, pools with a shortfall overflowing to the others as
// in Route. The returned decisions carry d's candidates. When no pool of
// the strategy is a candidate of d, or s is empty, every instance gets d.
func Split(s Strategy, d Decision, counts map[string]int, n int) []Decision {
	out := make([]Decision, n)
	var in []StrategyEntry
	short := map[string]bool{}
	for _, e := range s {
		if i := slices.IndexFunc(d.Cands, func(c Candidate) bool { return c.Pool == e.Pool }); i >= 0 {
			in = append(in, e)
			short[e.Pool] = d.Cands[i].Short != ""
		}
	}
	if len(in) == 0 {
		for i := range out {
			out[i] = d
		}
		return out
	}
	live := map[string]int{}
	for _, e := range in {
		live[e.Pool] = counts[e.Pool]
	}
	// Pools with no shortfall, unless every one has one.
	usable := slices.DeleteFunc(slices.Clone(in), func(e StrategyEntry) bool { return short[e.Pool] })
	if len(usable) == 0 {
		usable = in
	}
	total := 0
	for _, e := range usable {
		total += e.Weight
	}
	for i := range out {
		pick, why := -1, ""
		for j, e := range usable {
			if live[e.Pool] < e.Base {
				pick, why = j, fmt.Sprintf("strategy: base %d of %s, %d live", e.Base, e.Pool, live[e.Pool])
				break
			}
		}
		if pick < 0 {
			// The pool whose share after one more is smallest:
			// (live - base + 1) / weight, compared without division.
			for j, e := range usable {
				if e.Weight == 0 {
					continue
				}
				if pick < 0 {
					pick = j
					continue
				}
				b := usable[pick]
				if (live[e.Pool]-e.Base+1)*b.Weight < (live[b.Pool]-b.Base+1)*e.Weight {
					pick = j
				}
			}
			if pick >= 0 {
				e := usable[pick]
				why = fmt.Sprintf("strategy: weight %d of %d, %d live above a base of %d", e.Weight, total,
					live[e.Pool], e.Base)
			}
		}
		if pick < 0 {
			// Every usable pool has weight 0 and its base filled: the
			// strategy places no more; rank as without it.
			out[i] = d
			continue
		}
		p := usable[pick].Pool
		live[p]++
		out[i] = Decision{Pool: p, Cands: d.Cands, Strategy: why}
	}
	return out
}
