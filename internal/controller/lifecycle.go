package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/lifecycle"
	"github.com/tide-project/tide/internal/reconcile"
)

// HashLabel is the machine label that records the hash of the pool
// settings a machine was made with (Config.NodeHash).
const HashLabel = "tide.dev/settings-hash"

// mustRegister reports whether a Configured machine joins only once its
// agent registered.
func (c *Controller) mustRegister() bool {
	_, ok := c.work.(Inspector)
	return ok && c.cfg.RequireRegistration
}

// inspect asks the Workload (an Inspector) about every tracked node, for
// this tick's registration, health and disruption checks.
func (c *Controller) inspect(ctx context.Context) {
	in, ok := c.work.(Inspector)
	if !ok {
		return
	}
	c.infoOK = false
	refs := c.refs[:0]
	for _, n := range c.nodes {
		if n != nil {
			refs = append(refs, n.ref(c.cfg.Pool))
		}
	}
	c.refs = refs
	info, err := in.Inspect(ctx, refs)
	if err != nil {
		c.emit(TypeWarning, ReasonInspectError, "inspect the pool's nodes: %v; no node joins or is judged until the next tick", err)
		return
	}
	c.info, c.infoOK = info, true
}

// timedOut replaces a machine that did not launch or register in time, and
// backs its offering off once it timed out TimeoutsBeforeBackoff times in
// a row: an offering whose machines never come up is treated as out of
// capacity.
func (c *Controller) timedOut(ctx context.Context, n *node, reason string, now time.Time, format string, args ...any) {
	off := n.rec.Offering
	c.lose(ctx, n, reason, format, args...)
	if c.timeouts == nil {
		c.timeouts = map[string]int{}
	}
	c.timeouts[off]++
	if k := c.timeouts[off]; k >= c.cfg.TimeoutsBeforeBackoff {
		delete(c.timeouts, off)
		until := c.skip(off, now)
		c.emit(TypeWarning, ReasonOfferingBackedOff, "offering %s timed out %d times in a row (last: %s): skipped until %s, %s",
			off, k, reason, until.UTC().Format(time.RFC3339), c.nextText(c.offerings, now))
	}
}

// drift says how the settings that shaped n changed ("" when they did not,
// or when n's machine records no hash).
func (c *Controller) drift(n *node) string {
	if len(c.cfg.NodeHash) == 0 || n.hash == "" {
		return ""
	}
	want, ok := c.cfg.NodeHash[n.rec.Offering]
	switch {
	case !ok:
		return fmt.Sprintf("offering %s is no longer offered by the pool", n.rec.Offering)
	case want != n.hash:
		return fmt.Sprintf("the pool's settings for offering %s changed since the machine was made (hash %s, now %s)", n.rec.Offering, n.hash, want)
	}
	return ""
}

// lifecycleOn reports whether any lifecycle rule can act on the pool.
func (c *Controller) lifecycleOn() bool {
	_, inspects := c.work.(Inspector)
	return inspects || c.cfg.Lifecycle.ExpireAfter > 0 || len(c.cfg.NodeHash) > 0
}

// lifecycleStep follows the health of the joined nodes and asks
// lifecycle.Decide which to replace: repairs, drifted and expired nodes.
// Each replacement is a reconcile.Replace, an event and a count of
// tide_nodes_disrupted_total{reason}; a held repair (the breaker) and a
// node that waits say so, once each.
func (c *Controller) lifecycleStep(now time.Time) {
	if c.pool == nil || !c.lifecycleOn() {
		return
	}
	replacing := c.pool.Replacing()
	draining := 0
	for _, id := range c.pool.Draining() {
		if _, ok := replacing[id]; !ok && c.pool.IsCurrent(id) {
			draining++
		}
	}
	in := lifecycle.Input{Now: now, Disrupting: draining}
	byID := map[int]*node{}
	unhealthy := 0
	for _, n := range c.nodes {
		if n == nil || !n.joined || !c.pool.IsCurrent(n.id) {
			continue
		}
		_, repl := replacing[n.id]
		if n.drain != drainNone && !repl {
			continue // drained by scale-down: counted in Disrupting
		}
		in.Total++
		c.judge(n, now)
		if n.unhealthy != "" {
			unhealthy++
		}
		ln := lifecycle.Node{ID: int(n.id), Machine: n.rec.MachineID, CreatedAt: n.createdAt,
			Unhealthy: n.unhealthy, UnhealthySince: n.unhealthySince, Drift: c.drift(n), Replacing: repl,
			Protected: c.cfg.Reconcile.ProtectFirstNode && n.id == 0, Offering: n.rec.Offering}
		if info, ok := c.info[n.rec.MachineID]; c.infoOK && ok {
			ln.Used, ln.WorkHours = info.Used, info.WorkHours
		}
		expiring := c.cfg.Lifecycle.ExpireAfter > 0 && !n.createdAt.IsZero() && !now.Before(n.createdAt.Add(c.cfg.Lifecycle.ExpireAfter))
		// A node on an offering dearer than the cheapest, running work,
		// may be swapped for a cheaper one.
		dearer := c.cfg.Lifecycle.Disruption.Enabled && !ln.Used.IsZero() && len(c.offerings) > 1 && c.offerings[0].Name() != n.rec.Offering
		if ln.Unhealthy == "" && ln.Drift == "" && !expiring && !repl && !dearer {
			if n.waitWhy != "" {
				n.wait, n.waitWhy = "", ""
				c.changed(n.id)
			}
			continue
		}
		ln.Blocked = c.blocked(n)
		in.Nodes = append(in.Nodes, ln)
		byID[ln.ID] = n
	}
	d := lifecycle.Decide(c.cfg.Lifecycle, in)
	if d.Breaker != c.breaker {
		switch {
		case d.Breaker != "":
			c.emit(TypeWarning, ReasonRepairBreaker, "repair held: %s", d.Breaker)
		case c.breaker != "":
			c.emit(TypeNormal, ReasonRepairBreaker, "repair resumes: %d of %d nodes unhealthy, within the breaker", d.Unhealthy, in.Total)
		}
		c.breaker = d.Breaker
	}
	c.metrics.health(unhealthy, d.Breaker != "")
	for _, r := range d.Replace {
		n := byID[r.ID]
		n.replace = r.Reason
		n.wait, n.waitWhy = "", "replacing ("+r.Reason+"): "+r.Why
		c.changed(n.id)
		c.metrics.disrupt(r.Reason)
		if r.Offering != "" {
			c.replaceOffers = append(c.replaceOffers, r.Offering)
		}
		c.emit(TypeNormal, r.Reason, "node %d: machine %s is replaced: %s; a node is launched in its place before it is drained", r.ID, r.Machine, r.Why)
		c.queue = append(c.queue, reconcile.Replace{ID: n.id, Reason: r.Reason})
	}
	for _, w := range d.Waits {
		n := byID[w.ID]
		key := w.Reason + ":" + w.Kind
		if n.wait == key {
			continue
		}
		n.wait, n.waitWhy = key, w.Why
		c.changed(n.id)
		c.emit(TypeNormal, ReasonDisruptionWait, "node %d: machine %s (%s) waits: %s", w.ID, w.Machine, w.Reason, w.Why)
	}
}

// judge updates n's health from this tick's inspection, with an event when
// it changes. Without an inspection (no Inspector, or it failed) the last
// judgement stands.
func (c *Controller) judge(n *node, now time.Time) {
	if !c.infoOK {
		return
	}
	why := ""
	info, ok := c.info[n.rec.MachineID]
	switch {
	case ok && info.Registered:
		why = info.Unhealthy
	case c.mustRegister():
		why = "its agent is not registered"
	}
	switch {
	case why == n.unhealthy:
	case why == "":
		c.changed(n.id)
		c.emit(TypeNormal, ReasonRecovered, "node %d: machine %s is healthy again after %s", n.id, n.rec.MachineID, now.Sub(n.unhealthySince).Round(time.Second))
		n.unhealthy, n.unhealthySince = "", time.Time{}
	default:
		if n.unhealthy == "" {
			n.unhealthySince = now
			repair := "it is not repaired (no repair_after)"
			if r := c.cfg.Lifecycle.RepairAfter; r > 0 {
				repair = "repaired at " + now.Add(r).UTC().Format(time.RFC3339) + " unless it recovers"
			}
			c.emit(TypeWarning, ReasonUnhealthy, "node %d: machine %s is unhealthy: %s; %s", n.id, n.rec.MachineID, why, repair)
		}
		n.unhealthy = why
		c.changed(n.id)
	}
}

// blocked says why n's work may not be disrupted now ("" when it may).
func (c *Controller) blocked(n *node) string {
	if c.infoOK {
		if info, ok := c.info[n.rec.MachineID]; ok {
			return info.Blocked
		}
	}
	if _, ok := c.work.(Inspector); !ok && c.busy(n.id) {
		return "work"
	}
	return ""
}

// busy reports whether the reconciler knows node id runs non-daemon work.
func (c *Controller) busy(id reconcile.NodeID) bool {
	for _, b := range c.pool.Busy() {
		if b == id {
			return true
		}
	}
	return false
}
