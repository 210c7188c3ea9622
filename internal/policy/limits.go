package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// Limits bound what a pool may hold in all (Karpenter's NodePool limits,
// plus a cost ceiling): the resources and the price per hour of its
// machines, booting and draining ones included. A nil field is no limit.
// A purchase never crosses a limit: the limited wrapper cuts it.
type Limits struct {
	// MilliCPU bounds the pool's CPU in millicores.
	MilliCPU *int64
	// Memory bounds the pool's memory in bytes.
	Memory *int64
	// GPUs bounds the pool's GPUs.
	GPUs *int64
	// CostPerHour bounds the sum of the pool's machines' prices per hour
	// (the offerings' price, not the effective cost).
	CostPerHour *float64
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool {
	return l.MilliCPU == nil && l.Memory == nil && l.GPUs == nil && l.CostPerHour == nil
}

// Validate checks the limits against the pool: none negative or NaN, and
// nodes.min machines of the smallest offering within each one (else the
// floor alone would cross it). Errors name the field as the YAML does.
func (l Limits) Validate(nodes capacity.NodeSpec, offerings []capacity.Offering) []error {
	var errs []error
	for _, c := range []struct {
		name string
		v    *int64
	}{{"limits.cpu", l.MilliCPU}, {"limits.memory", l.Memory}, {"limits.gpus", l.GPUs}} {
		if c.v != nil && *c.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", c.name, *c.v))
		}
	}
	if c := l.CostPerHour; c != nil && (*c < 0 || math.IsNaN(*c) || math.IsInf(*c, 0)) {
		errs = append(errs, fmt.Errorf("limits.cost_per_hour: must be a non-negative number, got %v", *c))
	}
	if len(errs) > 0 || nodes.Min == 0 || len(offerings) == 0 {
		return errs
	}
	small, cost := offerings[0].Resources, offerings[0].PricePerHour
	for _, o := range offerings[1:] {
		small.MilliCPU = min(small.MilliCPU, o.Resources.MilliCPU)
		small.Memory = min(small.Memory, o.Resources.Memory)
		small.GPUs = min(small.GPUs, o.Resources.GPUs)
		cost = min(cost, o.PricePerHour)
	}
	floor := small.Scale(int64(nodes.Min))
	if l.MilliCPU != nil && floor.MilliCPU > *l.MilliCPU {
		errs = append(errs, fmt.Errorf("limits.cpu: %s is below nodes.min (%d) x the smallest offering's %s",
			capacity.FormatCPU(*l.MilliCPU), nodes.Min, capacity.FormatCPU(small.MilliCPU)))
	}
	if l.Memory != nil && floor.Memory > *l.Memory {
		errs = append(errs, fmt.Errorf("limits.memory: %s is below nodes.min (%d) x the smallest offering's %s",
			capacity.FormatBytes(*l.Memory), nodes.Min, capacity.FormatBytes(small.Memory)))
	}
	if l.GPUs != nil && floor.GPUs > *l.GPUs {
		errs = append(errs, fmt.Errorf("limits.gpus: %d is below nodes.min (%d) x the smallest offering's %d",
			*l.GPUs, nodes.Min, small.GPUs))
	}
	if l.CostPerHour != nil && cost*float64(nodes.Min) > *l.CostPerHour {
		errs = append(errs, fmt.Errorf("limits.cost_per_hour: %.2f is below nodes.min (%d) x the cheapest offering's %.2f",
			*l.CostPerHour, nodes.Min, cost))
	}
	return errs
}

// Held is what a pool's machines add up to now: every machine the
// controller holds (booting and draining included), with the resources
// and price of the offering it was launched as.
type Held struct {
	// Nodes is the number of machines counted.
	Nodes int
	// Resources are their resources summed.
	Resources capacity.Resources
	// CostPerHour is their prices summed.
	CostPerHour float64
}

// limited cuts the scale-ups of a policy to the pool's limits.
type limited struct {
	Policy
	cfg Config
}

// withLimits wraps p when cfg sets a limit.
func withLimits(p Policy, cfg Config) Policy {
	if cfg.Limits.IsZero() {
		return p
	}
	return &limited{Policy: p, cfg: cfg}
}

// CodeAtLimit is the reason code of a scale-up cut by a pool limit.
const CodeAtLimit = "at-limit"

// Decide evaluates the wrapped policy and cuts a scale-up to what fits
// under the limits. The pool holds in.Held (the controller's machines),
// plus, for every desired node without a machine yet, the most any
// offering could add (the count does not say which offering it will be).
// New nodes are taken launch by launch, each counted at the most its
// offering or any of its fallbacks could add, until the next would cross
// a limit; the reason then names the limit and the figures.
//
// A gang is bought whole or not at all under the limits too: when the
// backlog holds a gang and the purchase would be cut, the policy decides
// again on the longest run of the backlog by priority (highest first, the
// report's order within one) whose purchase fits within the limits whole,
// plus as many instances of the next group as fit when that group is no
// gang, as the pool's max does (prioritized.withinMax). A gang that
// crosses a limit even in an empty pool is left out of that run (it can
// never be bought for, so it holds up no work of lower priority). Gangs
// left out wait whole; the reason names those that can never fit and the
// first that waits for room.
func (p *limited) Decide(in Input) Decision {
	d := p.Policy.Decide(in)
	c := p.cut(&in, &d)
	if c.why == "" {
		return d
	}
	backlog := d.Backlog
	if backlog == nil {
		backlog = in.Pressure.Pending
	}
	if c.took < c.add && slices.ContainsFunc(backlog, func(g capacity.Pending) bool { return g.Gang != "" }) {
		return p.gangsWhole(in, backlog, c.why)
	}
	return p.apply(&in, d, c)
}

// limitCut is what the limits leave of a decision's scale-up.
type limitCut struct {
	add, took int
	kept      []capacity.Launch
	// why names the limit the next node would cross ("" when the whole
	// scale-up fits).
	why string
}

// cut takes the new nodes of d launch by launch until the next would cross
// a limit.
func (p *limited) cut(in *Input, d *Decision) limitCut {
	c := limitCut{add: d.Desired - in.Desired}
	if c.add <= 0 {
		return c
	}
	held := p.held(in)
	launches := d.Launch
	if len(launches) == 0 && len(p.cfg.Offerings) > 0 {
		// No purchase: the controller tries every offering, cheapest first.
		launches = []capacity.Launch{{Offering: p.cfg.Offerings[0].Name(), Fallback: p.names(), Count: c.add}}
	}
	for _, l := range launches {
		res, cost := p.most(append([]string{l.Offering}, l.Fallback...))
		n := 0
		for ; n < l.Count && c.took+n < c.add; n++ {
			if why := p.crosses(held, res, cost); why != "" {
				c.why = why
				break
			}
			held.Resources = held.Resources.Add(res)
			held.CostPerHour += cost
		}
		if n > 0 {
			l.Count = n
			c.kept = append(c.kept, l)
		}
		c.took += n
		if c.why != "" || c.took == c.add {
			break
		}
	}
	return c
}

// apply cuts d to c: the launches kept, the desired count they make.
func (p *limited) apply(in *Input, d Decision, c limitCut) Decision {
	desired := max(in.Desired+c.took, p.cfg.Nodes.Min)
	if len(d.Launch) > 0 {
		d.Launch = c.kept
	}
	if d.Tide != nil && c.took < c.add {
		t := *d.Tide
		t.Mix, t.Cost, t.Nodes, t.HasBound, t.Bound, t.Gap = nil, 0, 0, false, 0, 0
		for _, l := range c.kept {
			t.Mix = append(t.Mix, OfferingCount{Offering: l.Offering, Count: l.Count})
			t.Cost += p.offering(l.Offering).EffectiveCost() * float64(l.Count)
			t.Nodes += l.Count
		}
		d.Tide = &t
	}
	msg := fmt.Sprintf("%s; %d of %d new nodes bought (%s)", c.why, c.took, c.add, d.Reason.String())
	d.Reason = Reason{Code: CodeAtLimit, Format: strings.ReplaceAll(msg, "%", "%%")}
	d.Desired = desired
	return d
}

// gangsWhole decides on the longest run of backlog, by priority, whose
// purchase fits within the limits whole, plus what fits of the next group
// when it is no gang; gangs that cross a limit even in an empty pool are
// left out first. why is the limit the whole backlog's purchase crossed.
func (p *limited) gangsWhole(in Input, backlog []capacity.Pending, why string) Decision {
	order := slices.Clone(backlog)
	slices.SortStableFunc(order, func(a, b capacity.Pending) int { return cmp.Compare(b.Priority, a.Priority) })
	inner := p.inner()
	decide := func(pend []capacity.Pending) (Decision, bool) {
		sub := in
		sub.Pressure.Pending = pend
		d := inner.Decide(sub)
		return d, p.cut(&sub, &d).why == ""
	}
	// fits remembers its last fitting decision: the run's, most often.
	var lastK = -1
	var last Decision
	fits := func(k int) bool {
		d, ok := decide(order[:k])
		if ok {
			lastK, last = k, d
		}
		return ok
	}
	// k is the longest run that fits. A gang that stops it and crosses a
	// limit even in an empty pool is never bought for: it is left out and
	// holds up no other work.
	var never []string
	k := longestRun(0, p.guess(&in, order), len(order), fits)
	for k < len(order) && order[k].Gang != "" {
		name := order[k].Gang
		gang := GangGroups(order, name) // a gang may be several groups
		w := p.alone(in, gang)
		if w == "" {
			break
		}
		never = append(never, fmt.Sprintf("gang %s (%d instances) can never fit, not even in an empty pool: %s", name, instances(gang), w))
		first := slices.IndexFunc(order, func(g capacity.Pending) bool { return g.Gang == name })
		order = slices.DeleteFunc(order, func(g capacity.Pending) bool { return g.Gang == name })
		k = longestRun(first, first, len(order), fits) // the groups before its first are unchanged
	}
	run, part := order[:k:k], 0
	if k < len(order) && order[k].Gang == "" {
		// The most instances of the plain group that fit beside the run.
		g := order[k]
		part = sort.Search(g.Count, func(n int) bool {
			g.Count = n + 1
			_, ok := decide(append(run, g))
			return !ok
		})
		if part > 0 {
			g.Count = part
			run = append(run, g)
		}
	}
	// A gang whose groups the run cuts is left out whole.
	cut := map[string]bool{}
	for _, g := range order[k:] {
		if g.Gang != "" {
			cut[g.Gang] = true
		}
	}
	whole := slices.DeleteFunc(slices.Clone(run), func(g capacity.Pending) bool { return cut[g.Gang] })
	d := last
	if part > 0 || lastK != k || len(whole) != len(run) {
		run = whole
		d, _ = decide(run)
	}
	d.Backlog = run
	parts := []string{why}
	parts = append(parts, never...)
	for _, g := range order[k:] {
		if g.Gang != "" {
			parts = append(parts, fmt.Sprintf("gang %s (%d instances) waits whole: its nodes would cross the limit after work of higher priority",
				g.Gang, instances(GangGroups(order, g.Gang))))
			break
		}
	}
	if k < len(order) && order[k].Gang == "" {
		parts = append(parts, fmt.Sprintf("%d of %d instances of the next group bought for", part, order[k].Count))
	}
	msg := strings.Join(parts, "; ") + " (" + d.Reason.String() + ")"
	d.Reason = Reason{Code: CodeAtLimit, Format: strings.ReplaceAll(msg, "%", "%%")}
	return d
}

// GangNeverFits says which of cfg's limits (cfg validated) the purchase for
// the gang of groups g (all its groups) would cross in a pool that holds nothing but its min nodes, at
// now with the policy state st: such a gang is never bought for. "" when
// it fits there or cfg sets no limit. tide decide reports it.
func GangNeverFits(cfg Config, now time.Time, st State, g []capacity.Pending) string {
	p, err := New(cfg)
	if err != nil {
		return ""
	}
	l, ok := p.(*limited)
	if !ok {
		return ""
	}
	return l.alone(Input{Now: now, State: st}, g)
}

// longestRun is the largest k in [lo, n] for which fits(k) holds, given
// that fits(lo) does and that fits holds for a prefix of the ks: it checks
// guess and the one after first (a good guess costs two calls), else it
// searches the side the guess points to.
func longestRun(lo, guess, n int, fits func(int) bool) int {
	guess = min(max(guess, lo), n)
	if guess > lo && !fits(guess) {
		return lo + sort.Search(guess-lo-1, func(i int) bool { return !fits(lo + i + 1) })
	}
	if guess == n || !fits(guess+1) {
		return guess
	}
	return guess + 1 + sort.Search(n-guess-1, func(i int) bool { return !fits(guess + i + 2) })
}

// guess is how many groups of order, from the first, fit within the
// limits beside what the pool holds, each group counted on its own nodes
// of the one offering that hosts it cheapest: a first guess for
// longestRun (the packing shares nodes between groups, the guess does
// not).
func (p *limited) guess(in *Input, order []capacity.Pending) int {
	held := p.held(in)
	for k, g := range order {
		best, bestCost := capacity.Resources{}, -1.0
		for _, o := range p.cfg.Offerings {
			if n, ok := binpack.NodesFor(g.Requests, g.Count, o.Resources); ok {
				if c := o.PricePerHour * float64(n); bestCost < 0 || c < bestCost {
					best, bestCost = o.Resources.Scale(int64(n)), c
				}
			}
		}
		if bestCost < 0 {
			continue // fits no offering: buys nothing
		}
		if p.cfg.Limits.Crosses(held, best, bestCost) != "" {
			return k
		}
		held.Resources = held.Resources.Add(best)
		held.CostPerHour += bestCost
	}
	return len(order)
}

// alone says which limit the purchase for gang g (its groups) crosses in a pool that holds
// nothing (its min nodes aside), "" when it fits there: a gang for which
// it is not "" can never be bought for under the limits.
func (p *limited) alone(in Input, g []capacity.Pending) string {
	empty := Input{Now: in.Now, State: in.State, Desired: p.cfg.Nodes.Min, Held: &Held{},
		Pressure: capacity.Pressure{Pending: g}}
	if p.cfg.Nodes.Min > 0 {
		empty.Held = nil // the min nodes, counted at the dearest offering
	}
	d := p.inner().Decide(empty)
	return p.cut(&empty, &d).why
}

// GangGroups returns the groups of pend of gang name (a gang may be
// several groups: a ProvisioningRequest's pod sets of different shapes).
func GangGroups(pend []capacity.Pending, name string) []capacity.Pending {
	var out []capacity.Pending
	for _, g := range pend {
		if g.Gang == name {
			out = append(out, g)
		}
	}
	return out
}

// instances counts the instances of groups.
func instances(groups []capacity.Pending) int {
	n := 0
	for _, g := range groups {
		n += g.Count
	}
	return n
}

// inner is the policy the limits wrap, below the priority filter: the
// backlogs gangsWhole and alone decide on are within the pool's max
// already (parts of the backlog the filter kept), so it need not search
// them again.
func (p *limited) inner() Policy {
	if pr, ok := p.Policy.(*prioritized); ok {
		return pr.Policy
	}
	return p.Policy
}

// held is what the pool holds before the decision, counted as Decide says.
func (p *limited) held(in *Input) Held {
	var h Held
	if in.Held != nil {
		h = *in.Held
	} else {
		// No controller (tide decide on a saved report): the report's
		// nodes, each priced as the dearest offering of its size.
		for i := range in.Pressure.Nodes {
			n := &in.Pressure.Nodes[i]
			h.Nodes++
			h.Resources = h.Resources.Add(n.Resources)
			h.CostPerHour += p.priceOf(n.Resources)
		}
	}
	if unknown := in.Desired - h.Nodes; unknown > 0 {
		res, cost := p.most(p.names())
		h.Resources = h.Resources.Add(res.Scale(int64(unknown)))
		h.CostPerHour += cost * float64(unknown)
	}
	return h
}

// crosses says which limit one more node of res and cost would cross, in
// words with the figures ("" when none).
func (p *limited) crosses(h Held, res capacity.Resources, cost float64) string {
	return p.cfg.Limits.Crosses(h, res, cost)
}

// Crosses says which limit one more node of res and price cost per hour
// would cross for a pool that holds h, in words with the figures ("" when
// none). Routing asks it to overflow a pool at its limit.
func (l Limits) Crosses(h Held, res capacity.Resources, cost float64) string {
	after := h.Resources.Add(res)
	switch {
	case l.MilliCPU != nil && after.MilliCPU > *l.MilliCPU:
		return fmt.Sprintf("limits.cpu %s: the pool holds %s, a node of %s would make %s", capacity.FormatCPU(*l.MilliCPU),
			capacity.FormatCPU(h.Resources.MilliCPU), capacity.FormatCPU(res.MilliCPU), capacity.FormatCPU(after.MilliCPU))
	case l.Memory != nil && after.Memory > *l.Memory:
		return fmt.Sprintf("limits.memory %s: the pool holds %s, a node of %s would make %s", capacity.FormatBytes(*l.Memory),
			capacity.FormatBytes(h.Resources.Memory), capacity.FormatBytes(res.Memory), capacity.FormatBytes(after.Memory))
	case l.GPUs != nil && after.GPUs > *l.GPUs:
		return fmt.Sprintf("limits.gpus %d: the pool holds %d, a node of %d would make %d", *l.GPUs,
			h.Resources.GPUs, res.GPUs, after.GPUs)
	case l.CostPerHour != nil && h.CostPerHour+cost > *l.CostPerHour+1e-9:
		return fmt.Sprintf("limits.cost_per_hour $%.2f/h: the pool costs $%.2f/h, a node of $%.2f/h would make $%.2f/h",
			*l.CostPerHour, h.CostPerHour, cost, h.CostPerHour+cost)
	}
	return ""
}

// most is the most any of the named offerings adds, per resource and in
// price: what a launch that may fall back to any of them can cost.
func (p *limited) most(names []string) (capacity.Resources, float64) {
	var r capacity.Resources
	cost := 0.0
	for _, name := range names {
		o := p.offering(name)
		r.MilliCPU = max(r.MilliCPU, o.Resources.MilliCPU)
		r.Memory = max(r.Memory, o.Resources.Memory)
		r.GPUs = max(r.GPUs, o.Resources.GPUs)
		cost = max(cost, o.PricePerHour)
	}
	return r, cost
}

// offering returns the offering of that name (the zero offering if none).
func (p *limited) offering(name string) capacity.Offering {
	for _, o := range p.cfg.Offerings {
		if o.Name() == name {
			return o
		}
	}
	return capacity.Offering{}
}

// names lists the pool's offerings by name.
func (p *limited) names() []string {
	out := make([]string, len(p.cfg.Offerings))
	for i, o := range p.cfg.Offerings {
		out[i] = o.Name()
	}
	return out
}

// priceOf is the dearest price among the offerings of exactly res (the
// dearest of all when none matches).
func (p *limited) priceOf(res capacity.Resources) float64 {
	price, any := 0.0, false
	for _, o := range p.cfg.Offerings {
		if o.Resources.Equal(res) {
			price, any = max(price, o.PricePerHour), true
		}
	}
	if !any {
		for _, o := range p.cfg.Offerings {
			price = max(price, o.PricePerHour)
		}
	}
	return price
}
