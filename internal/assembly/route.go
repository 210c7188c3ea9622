package assembly

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
)

// candidate is a pool that could serve an instance: its selector matches
// and one of its offerings fits.
type candidate struct {
	pool   string
	weight int
	// cost is the effective cost per hour of the cheapest fitting offering
	// (the node the instance would cost at most).
	cost float64
	// order is the pool's place in the config.
	order int
	// short says why the pool cannot take more now ("" when it can).
	short string
}

// routing is a routing decision: the chosen pool ("" for none) and the
// candidates, in preference order, for events and logs.
type routing struct {
	pool  string
	cands []candidate
}

// String says which pools could serve, their costs, and why one was
// chosen, e.g. "spot (weight 0, $0.13/h) chosen over od (weight 0,
// $0.40/h): cheapest".
func (r routing) String() string {
	if r.pool == "" {
		return "no pool's selector and offerings fit"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s chosen", r.pool)
	var others []string
	for _, c := range r.cands {
		s := fmt.Sprintf("%s (weight %d, $%.2f/h", c.pool, c.weight, c.cost)
		if c.short != "" {
			s += ", " + c.short
		}
		s += ")"
		if c.pool == r.pool {
			b.Reset()
			fmt.Fprintf(&b, "%s chosen", s)
			continue
		}
		others = append(others, s)
	}
	if len(others) > 0 {
		b.WriteString(" over " + strings.Join(others, ", "))
	}
	return b.String()
}

// route picks the pool of an instance that names none, among those whose
// selector labels all match and one of whose offerings fits the request:
// the highest weight first, then the lowest effective cost of the
// cheapest fitting offering, then config order. A pool with a shortfall
// (short returns why: at its max, over a limit, every fitting offering
// out of capacity) overflows to the next; when every candidate has one,
// the first is chosen anyway (the instance waits there, as it would on a
// single pool). short may be nil.
func route(pools []config.Pool, short func(pool string, fits []string) string, labels map[string]string,
	req capacity.Resources) routing {
	var cands []candidate
	fitsBy := map[string][]string{}
	for i, p := range pools {
		match := true
		for k, v := range p.Selector.Labels {
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
		cands = append(cands, candidate{pool: p.Name, weight: p.Weight, cost: cost, order: i})
		fitsBy[p.Name] = fits
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		switch {
		case a.weight != b.weight:
			return b.weight - a.weight
		case a.cost < b.cost:
			return -1
		case a.cost > b.cost:
			return 1
		}
		return a.order - b.order
	})
	r := routing{cands: cands}
	if len(cands) == 0 {
		return r
	}
	r.pool = cands[0].pool
	if short != nil {
		for i := range cands {
			cands[i].short = short(cands[i].pool, fitsBy[cands[i].pool])
		}
		if i := slices.IndexFunc(cands, func(c candidate) bool { return c.short == "" }); i >= 0 {
			r.pool = cands[i].pool
		}
	}
	return r
}

// shortfall says why running pool name cannot take more work now: its
// desired count is at its max, its last decision was cut by a limit, or
// every fitting offering is out of capacity; "" when it can. a.mu held.
func (a *Assembly) shortfall(name string, fits []string) string {
	p, ok := a.pools[name]
	if !ok || p.retiring || p.loop == nil || p.ctl == nil {
		return ""
	}
	st := p.loop.Status()
	switch {
	case p.cfg.Nodes.Max > 0 && st.Desired >= p.cfg.Nodes.Max && st.Queued > 0:
		return fmt.Sprintf("at its max of %d nodes with %d queued", p.cfg.Nodes.Max, st.Queued)
	case strings.HasPrefix(st.Reason, policy.CodeAtLimit+":"):
		return "over a limit"
	}
	un := p.ctl.Unavailable(a.env.Clock.Now())
	if len(un) > 0 && !slices.ContainsFunc(fits, func(o string) bool { return !slices.Contains(un, o) }) {
		return "out of capacity (" + strings.Join(un, ", ") + ")"
	}
	return ""
}
