package policy

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// CodeBatching is the tide policy's reason code while a new backlog is held
// for the batch window so that one decision covers the whole burst.
const CodeBatching = "batching"

// tidePolicy is tide's default policy. Its decision, in order:
//
//	backlog younger than BatchWindow      → batching: desired unchanged
//	backlog                               → pack it (binpack.Pack) into the free space of
//	                                        unmarked nodes, then onto new nodes of the cheapest
//	                                        mix by effective cost (kept to the offerings of the
//	                                        cheapest fleet for all the pool's work when that
//	                                        costs at most 25 % more: fleetShaped); desired = unmarked nodes +
//	                                        new nodes + spare nodes for Headroom or the burst
//	                                        spare, whichever is more (never lowered while a
//	                                        backlog waits), clamped to max; the nodes
//	                                        asked for and not joined count as hosting
//	                                        the backlog, except for shapes that fit none
//	                                        of the machines booting (Input.Booting)
//	no backlog, empty nodes idle for      → scale down by those nodes, keeping Headroom
//	  IdleTimeout or longer                 empty nodes and min; busy nodes never count
//	no backlog, fewer than Headroom empty → scale up to restore the spare nodes
//	otherwise                             → steady
//
// The burst spare: arrivals come in bursts, and an instance that arrives
// after a scale-up waits a whole boot. So when a backlog needs more new
// nodes than are already booting (the burst goes on while the pool grows),
// tide asks for 1 spare node per 10 new nodes or 5 % of the pool's nodes,
// whichever is more, and when it needs 16 new nodes or more at once, 2 +
// 1 per 10. A backlog that the booting nodes cover asks for nothing more
// (no double provisioning), and the first, small scale-up of a burst is
// exact. An unused spare is an empty node and goes after IdleTimeout like
// any other. The spare used to be 2 nodes plus 1 per 10 in both cases:
// measured on Philly, the 2 nodes bought each time a small burst outgrew
// the nodes booting catch long small jobs and stay part-used for days
// (tide's busy node-hours were 0.6 % above Karpenter's, who keeps no
// spare); on Google 2011 tasks the 2 nodes of a large burst are used by
// the rest of it (without them tide cost 1.8 % more) (docs/benchmarks.md,
// "Scaling quality III"). The 5 % of the pool: arrivals go on at a rate
// that grows with the pool, and a burst that outgrew the nodes booting
// once is likely to go on; on Philly it cut the instances that wait a whole
// boot from 7.2 % to 3.9 % (p95 wait 100 s to 93 s) at the same mean cost
// over 30 seeds, and on Google 2011 tasks it cut the mean cost of 10
// seeds by 0.7 %; a pool of fewer than 20 nodes gets none of it, so small
// pools are left alone ("Scaling quality V" and "VI").
//
// The batch window is 1 s (it was 2 s): the backlog of a burst is bought
// a second earlier, which on Philly cut both node-hours and the p95 wait.
//
// Empty nodes go after TideIdleTimeout (1 s) unless the pool sets
// idle_timeout: at the first decision after a node empties. Measured on
// the same traces, a node kept empty for a minute (the first default) is
// seldom used again before it would have been released, and releasing at
// 10 s (the second) cut tide's node-hours on Philly and Google with the
// same p95 wait; on generated cases 1 s is better still (docs/benchmarks.md,
// "Scaling quality XI": 35 dominated cases of 800 held out against 37 at
// 10 s, 6 of 200 against 9 on a seed drawn after), as Karpenter, which
// consolidates an empty node at its next poll. The shipped replica
// configs, azure-conv.yaml among them, set 5 s (measured against the
// 10 s default: a node goes at the next tick after it empties).
//
// Nodes marked for deletion are on their way out: they give no free space
// and do not count as nodes. A new node is assumed to lose to daemons what
// they take on the existing nodes (the most on any one node). Daemon instances never make a node busy. The
// policy never asks for fewer nodes than run non-daemon work, so honouring
// a decision never stops running work.
type tidePolicy struct{ cfg Config }

// NewTide returns the tide policy for a validated cfg.
func NewTide(cfg Config) Policy { return &tidePolicy{cfg: cfg} }

// Name returns "tide".
func (p *tidePolicy) Name() string { return Tide }

// tideView is the pool's nodes as the tide policy counts them.
type tideView struct {
	unmarked int // nodes not marked for deletion
	busy     int // unmarked nodes running non-daemon work
	empty    int // unmarked nodes running none
	// nodes are the indexes (into Pressure.Nodes) of the unmarked nodes.
	nodes []int
	// idle are the indexes of empty unmarked nodes idle for at least IdleTimeout.
	idle []int
	// daemons is the most that daemons take on one node (component-wise):
	// daemons run on every node, so a new node has that much less room.
	daemons capacity.Resources
}

// view counts the nodes, each in one look (Kinds: kept by a report whose
// entries are summarized, else one pass over the node's instances). A node
// without daemons leaves daemons as it is: tideMax with a zero vector
// returns the same (non-negative) maximum.
func (p *tidePolicy) view(in *Input) tideView {
	v := tideView{nodes: make([]int, 0, len(in.Pressure.Nodes))}
	for i := range in.Pressure.Nodes {
		n := &in.Pressure.Nodes[i]
		if !n.MarkedAt.IsZero() {
			continue
		}
		v.unmarked++
		v.nodes = append(v.nodes, i)
		busy, daemons := n.Kinds()
		if daemons {
			v.daemons = tideMax(v.daemons, tideDaemons(n))
		}
		if busy {
			v.busy++
			continue
		}
		v.empty++
		if !n.IdleSince.IsZero() && in.Now.Sub(n.IdleSince) >= p.cfg.IdleTimeout {
			v.idle = append(v.idle, i)
		}
	}
	return v
}

// Decide evaluates the policy once.
func (p *tidePolicy) Decide(in Input) Decision {
	st := in.State
	st.Turnover = st.Turnover.observe(&in)
	v := p.view(&in)
	queued := in.Pressure.Queued()
	var d Decision
	if queued <= 0 {
		st.PendingSince = time.Time{}
		d = p.settle(&in, &v)
	} else {
		if st.PendingSince.IsZero() {
			st.PendingSince = in.Now
		}
		if waited := in.Now.Sub(st.PendingSince); waited < p.cfg.BatchWindow {
			// The batch waits for its window, but never below the nodes
			// that run work.
			d = Decision{Desired: max(in.Desired, v.busy), Tide: &TideFigures{}, Recheck: st.PendingSince.Add(p.cfg.BatchWindow),
				Reason: NewReason(CodeBatching, "%d queued instances batched for %dms of the %dms window",
					int64(queued), waited.Milliseconds(), p.cfg.BatchWindow.Milliseconds())}
		} else {
			d = p.scaleUp(&in, &v, queued, &st.Turnover, st.PendingSince)
		}
	}
	if clamped := p.cfg.Nodes.Clamp(d.Desired); clamped != d.Desired {
		switch {
		case d.Desired > p.cfg.Nodes.Max:
			d.Reason = NewReason(CodeAtMax, "the pool needs %d nodes; held at max %d", int64(d.Desired), int64(p.cfg.Nodes.Max))
		default:
			d.Reason = NewReason(CodeAtMin, "the pool needs %d nodes; held at min %d", int64(d.Desired), int64(p.cfg.Nodes.Min))
		}
		d.Desired = clamped
	}
	if d.Desired != in.Desired {
		st.LastScale = in.Now
	}
	if d.Desired > in.Desired {
		st.Turnover = st.Turnover.bought(in.Now)
	}
	d.State = st
	return d
}

// scaleUp packs the backlog and asks for the nodes it needs: the free
// room of the nodes that joined, and the room of the work sure enough to
// finish before a new node could join (Turnover), hold what they can. The
// completions are counted on for one boot from pendingSince, when the
// backlog began to wait: a backlog still waiting after that is bought for
// whole (see Turnover).
func (p *tidePolicy) scaleUp(in *Input, v *tideView, queued int, turnover *Turnover, pendingSince time.Time) Decision {
	cfg := &p.cfg
	nodes := in.Pressure.Nodes
	free := freeOf(nodes, v.nodes)
	pending := in.Pressure.Pending
	finishing := 0.0
	lapse := pendingSince.Add(turnover.Boot) // when the credit ends
	if z, ok := preferZ(cfg.Prefer); ok && in.Now.Before(lapse) && !slices.ContainsFunc(pending, func(p capacity.Pending) bool { return p.Gang != "" }) {
		finishing = turnover.Expected(z)
		free = turnover.credit(free, finishing)
	}
	offs := cfg.Offerings
	if !v.daemons.IsZero() {
		offs = make([]capacity.Offering, len(cfg.Offerings))
		for i, o := range cfg.Offerings {
			o.Resources = o.Resources.Sub(v.daemons)
			offs[i] = o
		}
	}
	limit := tideLimits(cfg.Offerings, in.Unavailable)
	res := binpack.Buy(pending, offs, binpack.BuyOptions{Free: free, MaxNodes: -1, Limit: limit})
	res, shaped := fleetShaped(nodes, v.nodes, pending, offs, free, limit, res)

	// Empty nodes that the backlog leaves empty are spare capacity already.
	stillEmpty := 0
	var idle []string
	for j, i := range v.nodes {
		if res.Existing[j].Items == 0 && !nodes[i].Busy() {
			stillEmpty++
		}
	}
	for _, i := range v.idle {
		if j, _ := slices.BinarySearch(v.nodes, i); res.Existing[j].Items == 0 {
			idle = append(idle, nodes[i].ID)
		}
	}
	spare := max(max(cfg.Headroom, burstSpare(res.Nodes, in.Desired-v.unmarked, v.unmarked))-stillEmpty, 0)
	// Saturating: a backlog of huge counts needs "more than max", never a
	// sum wrapped negative.
	need := validate.Sum(v.unmarked, res.Nodes, spare)
	// Unfit shapes are those the unlimited packing could not place.
	unfitGroup, unfitCount := -1, 0
	for g, u := range res.Unplaced {
		if u > 0 && unfitGroup < 0 {
			unfitGroup, unfitCount = g, u
		}
	}
	if need > cfg.Nodes.Max {
		// Buy only what max allows: repack with a cap, so that the mix is
		// what will really be launched.
		res = binpack.Buy(pending, offs, binpack.BuyOptions{Free: free, MaxNodes: max(cfg.Nodes.Max-v.unmarked, 0), Limit: limit})
		shaped = false
	}
	fig := &TideFigures{Mix: tideMix(&res, cfg.Offerings), Cost: res.Cost, Idle: idle, Nodes: res.Nodes, Method: res.Method,
		Finishing: int(finishing), FleetShaped: shaped}
	if g := res.Gap(); res.HasBound && !math.IsInf(g, 0) && !math.IsNaN(g) {
		fig.Bound, fig.Gap = res.Bound, g
		fig.HasBound = true
	}
	launch := tideLaunches(&res, offs, cfg.Offerings, spare, pending)
	desired := max(in.Desired, need)
	if extra, rest := p.beyondBooting(in, v, res.Nodes, free, pending, offs); extra > 0 && in.Desired+extra > desired {
		// The nodes on their way cannot host the backlog (a spot
		// replacement, nodes bought for other shapes): buy what they
		// leave, whatever the count says.
		need = validate.Sum(in.Desired, extra)
		desired = need
		res = rest
		fig.Mix, fig.Cost, fig.Nodes, fig.Method = tideMix(&res, cfg.Offerings), res.Cost, res.Nodes, res.Method
		fig.FleetShaped = false // rest is bought for the shapes the booting machines cannot hold, unshaped
		launch = tideLaunches(&res, offs, cfg.Offerings, 0, pending)
	}

	var reason Reason
	switch {
	case unfitGroup >= 0:
		// The reason names the first shape that fits nowhere; the action
		// taken for the rest shows in Desired and the mix.
		r := pending[unfitGroup].Requests
		args := []int64{int64(unfitCount), r.MilliCPU, (r.Memory + 1<<20 - 1) >> 20, r.GPUs}
		switch {
		case desired > cfg.Nodes.Max:
			reason = NewReason(CodeAtMax, "held at max for the rest of the backlog; %d instances of shape cpu=%dm mem=%dMi gpu=%d fit no offering", args...)
		case desired > in.Desired:
			reason = NewReason(CodeScaleUp, "scaling up for the rest of the backlog; %d instances of shape cpu=%dm mem=%dMi gpu=%d fit no offering", args...)
		default:
			reason = NewReason(CodeSteady, "no new node helps; %d instances of shape cpu=%dm mem=%dMi gpu=%d fit no offering", args...)
		}
	case desired > cfg.Nodes.Max:
		reason = NewReason(CodeAtMax, "%d queued instances need %d nodes; held at max %d", int64(queued), int64(desired), int64(cfg.Nodes.Max))
	case desired > in.Desired:
		reason = NewReason(CodeScaleUp, "%d queued instances need %d new nodes and %d spare, effective cost %d cents/h",
			int64(queued), int64(res.Nodes), int64(spare), int64(math.Round(res.Cost*100)))
	case res.Nodes == 0 && spare == 0:
		reason = NewReason(CodeSteady, "%d queued instances fit the free space of existing nodes", int64(queued))
	default:
		reason = NewReason(CodeSteady, "%d queued instances need %d nodes; %d already requested", int64(queued), int64(need), int64(in.Desired))
	}
	if desired > cfg.Nodes.Max {
		desired = cfg.Nodes.Max // reason already says so
	}
	d := Decision{Desired: desired, Reason: reason, Tide: fig}
	if finishing > 0 {
		d.Recheck = lapse // nothing may change before: the backlog is looked at again when its credit ends
	}
	if desired > in.Desired {
		// The purchase and its spares, cut to what is asked for (the max).
		d.Launch = fitLaunches(cfg, launch, desired-in.Desired, pending)
	}
	return d
}

// beyondBooting returns how many new nodes the backlog needs that the
// machines booting (Input.Booting) cannot give it, with the purchase for
// them: the shapes that fit none of those machines are packed into the
// free room of the joined nodes and new nodes, less the nodes asked for
// but not launched yet (counted as able to host them). 0 when the booting
// machines are not known, none boots, or every shape fits one of them:
// the count of nodes asked for then stands, as it always did. newNodes is
// what the whole backlog needs beyond the joined nodes (0: nothing to
// look at).
func (p *tidePolicy) beyondBooting(in *Input, v *tideView, newNodes int, free []capacity.Resources, pending []capacity.Pending,
	offs []capacity.Offering) (int, binpack.Purchase) {
	if len(in.Booting) == 0 || newNodes == 0 {
		return 0, binpack.Purchase{}
	}
	booting := make([]capacity.Resources, 0, len(in.Booting))
	for _, name := range in.Booting {
		i := slices.IndexFunc(offs, func(o capacity.Offering) bool { return o.Name() == name })
		if i < 0 {
			return 0, binpack.Purchase{} // an offering the policy does not know: it cannot tell
		}
		booting = append(booting, offs[i].Resources) // daemons already taken off
	}
	var orphans []capacity.Pending
	for _, g := range pending {
		if !slices.ContainsFunc(booting, func(b capacity.Resources) bool { return g.Requests.Fits(b) }) {
			orphans = append(orphans, g)
		}
	}
	if len(orphans) == 0 {
		return 0, binpack.Purchase{}
	}
	res := binpack.Buy(orphans, offs, binpack.BuyOptions{Free: free, MaxNodes: -1, Limit: tideLimits(p.cfg.Offerings, in.Unavailable)})
	unlaunched := max(in.Desired-v.unmarked-len(in.Booting), 0)
	return max(res.Nodes-unlaunched, 0), res
}

// settle handles a pool without backlog: release nodes idle for long
// enough, keep Headroom empty nodes, or stay.
func (p *tidePolicy) settle(in *Input, v *tideView) Decision {
	cfg := &p.cfg
	fig := &TideFigures{}
	for _, i := range v.idle {
		fig.Idle = append(fig.Idle, in.Pressure.Nodes[i].ID)
	}
	cur := in.Desired
	timeout := int64(cfg.IdleTimeout / time.Second)
	// Remove idle nodes while Headroom empty nodes and min remain; only
	// empty nodes go, so running work always keeps its node.
	release := min(len(v.idle), max(v.empty-cfg.Headroom, 0), max(v.unmarked-cfg.Nodes.Min, 0))
	switch {
	case cur < v.busy:
		return Decision{Desired: v.busy, Tide: fig,
			Reason: NewReason(CodeScaleUp, "desired %d is below the %d nodes running work", int64(cur), int64(v.busy))}
	case release > 0 && v.unmarked-release < cur:
		target := v.unmarked - release
		return Decision{Desired: target, Tide: fig,
			Reason: NewReason(CodeScaleDown, "%d nodes idle for at least %ds: scale down to %d", int64(release), timeout, int64(target))}
	case v.empty < cfg.Headroom && v.unmarked+cfg.Headroom-v.empty > cur:
		target := v.unmarked + cfg.Headroom - v.empty
		return Decision{Desired: target, Tide: fig,
			Reason: NewReason(CodeScaleUp, "keeping %d spare nodes: %d empty, desired %d", int64(cfg.Headroom), int64(v.empty), int64(target))}
	case release > 0:
		return Decision{Desired: cur, Tide: fig,
			Reason: NewReason(CodeSteady, "%d idle nodes already released: desired %d", int64(release), int64(cur))}
	}
	return Decision{Desired: cur, Tide: fig,
		Reason: NewReason(CodeSteady, "no queued instances; %d busy and %d empty nodes, none idle for %ds", int64(v.busy), int64(v.empty), timeout)}
}

// tideMix counts the new nodes per offering name, sorted by name.
func tideMix(res *binpack.Purchase, offerings []capacity.Offering) []OfferingCount {
	var mix []OfferingCount
	for o, c := range res.Counts {
		if c == 0 {
			continue
		}
		name := offerings[o].Name()
		if i := slices.IndexFunc(mix, func(m OfferingCount) bool { return m.Offering == name }); i >= 0 {
			mix[i].Count += c // two offerings with one name: count them together
		} else {
			mix = append(mix, OfferingCount{Offering: name, Count: c})
		}
	}
	slices.SortFunc(mix, func(a, b OfferingCount) int { return cmp.Compare(a.Offering, b.Offering) })
	return mix
}

// tideDaemons returns what the daemons on n request.
func tideDaemons(n *capacity.Node) capacity.Resources {
	var sum capacity.Resources
	for i := range n.Running {
		if n.Running[i].Daemon {
			sum = sum.Add(n.Running[i].Requests)
		}
	}
	return sum
}

// tideMax returns the component-wise maximum of a and b.
func tideMax(a, b capacity.Resources) capacity.Resources {
	out := capacity.Resources{MilliCPU: max(a.MilliCPU, b.MilliCPU), Memory: max(a.Memory, b.Memory), GPUs: max(a.GPUs, b.GPUs)}
	if a.Extended == nil && b.Extended == nil {
		return out // no extended resources: a pass per node stays cheap
	}
	for _, r := range []capacity.Resources{a, b} {
		for k, v := range r.Extended {
			if v > out.Extended[k] {
				if out.Extended == nil {
					out.Extended = map[string]int64{}
				}
				out.Extended[k] = v
			}
		}
	}
	return out
}

// The burst spare (see tidePolicy): 1 per tideBurstPer new nodes or
// tideBurstPoolPercent of the pool's nodes, plus tideBurstBase nodes for a
// backlog of tideBurstAtOnce new nodes or more at once.
const (
	tideBurstBase        = 2
	tideBurstPer         = 10
	tideBurstAtOnce      = 16
	tideBurstPoolPercent = 5
)

// TideIdleTimeout is the tide policy's default IdleTimeout: how long a node
// stays empty before it is released (see tidePolicy).
const TideIdleTimeout = time.Second

// burstSpare returns the spare nodes a backlog that needs newNodes gets,
// booting being the nodes asked for earlier that have not joined yet and
// nodes those that have: none while the backlog fits what is booting; 1
// per tideBurstPer new nodes or tideBurstPoolPercent of the nodes,
// whichever is more, when the backlog outgrew the nodes booting (the burst
// goes on); tideBurstBase + 1 per tideBurstPer when it needs
// tideBurstAtOnce new nodes or more with none booting.
func burstSpare(newNodes, booting, nodes int) int {
	switch {
	case newNodes <= booting || booting <= 0 && newNodes < tideBurstAtOnce:
		return 0
	case booting <= 0:
		return tideBurstBase + newNodes/tideBurstPer // a large burst from a standing start
	}
	// The burst outgrew the nodes booting.
	return max(newNodes/tideBurstPer, nodes*tideBurstPoolPercent/100)
}

// tideLimits turns the offerings out of capacity (by name) into Buy's limits.
func tideLimits(offerings []capacity.Offering, unavailable []string) []int {
	if len(unavailable) == 0 {
		return nil
	}
	lim := make([]int, len(offerings))
	for i, o := range offerings {
		lim[i] = -1
		if slices.Contains(unavailable, o.Name()) {
			lim[i] = 0
		}
	}
	return lim
}

// tideLaunches turns a purchase into the launches a decision carries: per
// group of identical new nodes, its offering and, cheapest first, the other
// offerings that could host the same load (fallbacks should the offering be
// out of capacity). Nodes of the dearest offerings come first, so that a
// partial provision buys the nodes the largest work needs. The spare nodes
// go to the offering the purchase buys most of (or, when it buys none, the
// cheapest offering that fits the largest pending shape).
func tideLaunches(res *binpack.Purchase, offs, named []capacity.Offering, spare int, pending []capacity.Pending) []capacity.Launch {
	byCost := make([]int, len(offs))
	for i := range byCost {
		byCost[i] = i
	}
	slices.SortStableFunc(byCost, func(a, b int) int { return cmp.Compare(offs[a].EffectiveCost(), offs[b].EffectiveCost()) })
	var out []capacity.Launch
	for _, n := range res.New {
		var load capacity.Resources
		for _, pl := range n.Placements {
			load = load.Add(pending[pl.Group].Requests.Scale(int64(pl.Count)))
		}
		l := capacity.Launch{Offering: named[n.Offering].Name(), Count: n.Count}
		for _, o := range byCost {
			if o != n.Offering && load.Fits(offs[o].Resources) && !slices.Contains(l.Fallback, named[o].Name()) && named[o].Name() != l.Offering {
				l.Fallback = append(l.Fallback, named[o].Name())
			}
		}
		if i := slices.IndexFunc(out, func(x capacity.Launch) bool {
			return x.Offering == l.Offering && slices.Equal(x.Fallback, l.Fallback)
		}); i >= 0 {
			out[i].Count += l.Count
		} else {
			out = append(out, l)
		}
	}
	cost := map[string]float64{}
	for _, o := range named {
		cost[o.Name()] = o.EffectiveCost()
	}
	slices.SortStableFunc(out, func(a, b capacity.Launch) int { return cmp.Compare(cost[b.Offering], cost[a.Offering]) })
	if spare > 0 {
		most := -1
		for i := range out {
			if most < 0 || out[i].Count > out[most].Count {
				most = i
			}
		}
		if most >= 0 {
			out = append(out, capacity.Launch{Offering: out[most].Offering, Count: spare, Fallback: slices.Clone(out[most].Fallback)})
		} else if o := tideSpareOffering(offs, byCost, pending); o >= 0 {
			out = append(out, capacity.Launch{Offering: named[o].Name(), Count: spare})
		}
	}
	return out
}

// tideSpareOffering returns the cheapest offering that fits the largest
// pending shape (by dominant share), or -1.
func tideSpareOffering(offs []capacity.Offering, byCost []int, pending []capacity.Pending) int {
	best := -1
	for _, o := range byCost {
		all := true
		for _, g := range pending {
			if g.Count > 0 && !g.Requests.Fits(offs[o].Resources) {
				all = false
				break
			}
		}
		if all {
			return o
		}
		if best < 0 {
			for _, g := range pending {
				if g.Count > 0 && g.Requests.Fits(offs[o].Resources) {
					best = o
					break
				}
			}
		}
	}
	return best
}
