package policy

import (
	"cmp"
	"slices"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// purchasing gives the decisions of a policy that only counts nodes (skyward,
// target-tracking, utilization) the purchase that the tide policy makes: when
// a decision raises the desired count of a pool of several offerings, its
// Launch says which offerings the new nodes should be, from the cheapest mix
// that hosts the backlog (binpack.Buy). Pending work then only ever drives
// offerings that can run it: a pool of a 2-GPU and an 8-GPU offering fed
// 8-GPU work buys 8-GPU nodes whatever its policy. The count stays the
// policy's own: the purchase is cut to it, or padded with the offering it
// buys most of.
type purchasing struct {
	Policy
	cfg Config
}

// withPurchase wraps p; a pool of one offering needs no purchase.
func withPurchase(p Policy, cfg Config) Policy {
	if len(cfg.Offerings) < 2 {
		return p
	}
	return &purchasing{Policy: p, cfg: cfg}
}

// Decide evaluates the wrapped policy and adds the purchase to a scale-up.
func (p *purchasing) Decide(in Input) Decision {
	d := p.Policy.Decide(in)
	if add := d.Desired - in.Desired; add > 0 && d.Launch == nil {
		if in.Pressure.Queued() > 0 {
			d.Launch = purchaseFor(&p.cfg, &in, add)
		} else {
			d.Launch = spareFor(&p.cfg, &in, add)
		}
	}
	return d
}

// spareFor returns the launches of add nodes that no backlog asks for (a
// buffer, a step of target tracking): the cheapest offering that hosts
// every shape running now, else the largest one; nil when nothing runs.
func spareFor(cfg *Config, in *Input, add int) []capacity.Launch {
	var running []capacity.Pending
	for i := range in.Pressure.Nodes {
		for _, r := range in.Pressure.Nodes[i].Running {
			if each := r.Each(); !r.Daemon && !slices.ContainsFunc(running, func(p capacity.Pending) bool { return p.Requests.Equal(each) }) {
				running = append(running, capacity.Pending{Requests: each, Count: 1})
			}
		}
	}
	if len(running) == 0 {
		return nil
	}
	byCost := make([]int, len(cfg.Offerings))
	for i := range byCost {
		byCost[i] = i
	}
	slices.SortStableFunc(byCost, func(a, b int) int {
		return cmp.Compare(cfg.Offerings[a].EffectiveCost(), cfg.Offerings[b].EffectiveCost())
	})
	if o := tideSpareOffering(cfg.Offerings, byCost, running); o >= 0 {
		return []capacity.Launch{{Offering: cfg.Offerings[o].Name(), Count: add}}
	}
	return nil
}

// purchaseFor returns the launches of add new nodes for the backlog of in:
// the cheapest mix hosting what the free space of the unmarked nodes does
// not, dearest offerings first, cut or padded to add nodes.
func purchaseFor(cfg *Config, in *Input, add int) []capacity.Launch {
	var free []capacity.Resources
	for i := range in.Pressure.Nodes {
		if n := &in.Pressure.Nodes[i]; n.MarkedAt.IsZero() {
			free = append(free, n.Free())
		}
	}
	res := binpack.Buy(in.Pressure.Pending, cfg.Offerings, binpack.BuyOptions{Free: free, MaxNodes: -1,
		Limit: tideLimits(cfg.Offerings, in.Unavailable)})
	ls := tideLaunches(&res, cfg.Offerings, cfg.Offerings, 0, in.Pressure.Pending)
	return fitLaunches(cfg, ls, add, in.Pressure.Pending)
}

// fitLaunches cuts launches (dearest first) to add nodes, or pads them
// with the offering they buy most of (without any, the cheapest offering
// that fits the largest pending shape).
func fitLaunches(cfg *Config, ls []capacity.Launch, add int, pending []capacity.Pending) []capacity.Launch {
	var out []capacity.Launch
	left := add
	for _, l := range ls {
		if left == 0 {
			break
		}
		l.Count = min(l.Count, left)
		left -= l.Count
		out = append(out, l)
	}
	if left > 0 {
		most := -1
		for i := range out {
			if most < 0 || out[i].Count > out[most].Count {
				most = i
			}
		}
		if most >= 0 {
			out[most].Count += left
		} else {
			byCost := make([]int, len(cfg.Offerings))
			for i := range byCost {
				byCost[i] = i
			}
			slices.SortStableFunc(byCost, func(a, b int) int {
				return cmp.Compare(cfg.Offerings[a].EffectiveCost(), cfg.Offerings[b].EffectiveCost())
			})
			if o := tideSpareOffering(cfg.Offerings, byCost, pending); o >= 0 {
				out = append(out, capacity.Launch{Offering: cfg.Offerings[o].Name(), Count: left})
			}
		}
	}
	return out
}
