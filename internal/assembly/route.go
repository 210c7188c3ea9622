package assembly

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/routing"
	"github.com/tide-project/tide/internal/store"
)

// route picks the pools of the n replicas of an instance that names none
// (internal/routing): the heaviest, then cheapest pool whose selector and
// offerings fit, a pool with a shortfall overflowing to the next; with a
// strategy in the config, split across its pools by base and weight,
// counting the instances each holds live. "" (no pool) when none fits: the
// instance waits, and `tide pools` shows it as queued nowhere. A choice
// that is not the config's first fitting pool, one made past a pool with a
// shortfall, or a strategy's split, is recorded as a "routed" event (once
// until it changes).
func (a *Assembly) route(labels map[string]string, req capacity.Resources, n int) []string {
	a.mu.Lock()
	d := routing.Route(config.Routes(a.routes), func(pool string, fits []string) string { return a.shortfall(pool, fits, req) }, labels, req)
	strategy := a.strategy
	a.mu.Unlock()
	ds := slices.Repeat([]routing.Decision{d}, n)
	if len(strategy) > 0 && d.Pool != "" {
		counts := map[string]int{}
		for _, e := range strategy {
			counts[e.Pool] = a.liveInstances(e.Pool)
		}
		ds = routing.Split(strategy, d, counts, n)
	}
	pools := make([]string, n)
	split := map[string]int{}
	for i, d := range ds {
		pools[i] = d.Pool
		split[d.Pool]++
	}
	var msg string
	switch {
	case ds[0].Strategy != "":
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(split)) {
			parts = append(parts, fmt.Sprintf("%s %d", p, split[p]))
		}
		msg = fmt.Sprintf("%d instance(s) split by the strategy: %s; the first: %s", n, strings.Join(parts, ", "), ds[0])
	case len(d.Cands) > 1 && d.Pool != "" && (d.First() != d.Pool ||
		slices.ContainsFunc(d.Cands, func(c routing.Candidate) bool { return c.Short != "" })):
		msg = d.String()
	}
	if msg != "" {
		if old := a.lastRoute.Swap(&msg); old == nil || *old != msg {
			a.event(ds[0].Pool, "Normal", "routed", "%s", msg)
		}
	}
	return pools
}

// liveInstances counts pool's instances that have not ended (waiting,
// assigned, running, unknown): what a strategy's base and weights divide.
func (a *Assembly) liveInstances(pool string) int {
	n := 0
	for _, st := range []store.Status{store.StatusPending, store.StatusAssigned, store.StatusRunning, store.StatusUnknown} {
		c, err := a.h.CountInstances(context.Background(), store.Filter{Status: st, Pool: &pool})
		if err != nil {
			a.log.Warn("routing: counting a pool's instances", "pool", pool, "err", err)
			continue
		}
		n += c
	}
	return n
}

// roomFor reports whether a node of pool name, in the last pressure
// report, has room for req now. a.mu held.
func (a *Assembly) roomFor(name string, req capacity.Resources) bool {
	rep := a.reports[name]
	for i := range rep.Nodes {
		if req.Fits(rep.Nodes[i].Free()) {
			return true
		}
	}
	return false
}

// shortfall says why running pool name cannot take more work of req now:
// its desired count is at its max, its last decision was cut by a limit,
// no node of its last report has room for req and one more node of a
// fitting offering would cross a limit, or every fitting offering is out
// of capacity; "" when it can. a.mu held.
func (a *Assembly) shortfall(name string, fits []string, req capacity.Resources) string {
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
	if lim := p.cfg.Limits.Limits; !lim.IsZero() && !a.roomFor(name, req) {
		held := p.ctl.Held()
		why := ""
		for _, o := range p.cfg.Offerings {
			if !slices.Contains(fits, o.Name()) {
				continue
			}
			if why = lim.Crosses(held, o.Resources, o.PricePerHour); why == "" {
				break
			}
		}
		if why != "" {
			return "at a limit: " + why
		}
	}
	un := p.ctl.Unavailable(a.env.Clock.Now())
	if len(un) > 0 && !slices.ContainsFunc(fits, func(o string) bool { return !slices.Contains(un, o) }) {
		return "out of capacity (" + strings.Join(un, ", ") + ")"
	}
	return ""
}
