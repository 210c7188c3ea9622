// Package lifecycle decides which joined nodes of a pool are replaced, and
// why: repair (unhealthy for longer than the pool's repair_after), drift
// (the pool settings that shaped the node changed), expiry (older than the
// pool's expire_after), and the replace move (a node swapped for a cheaper
// offering that hosts its work, when the saving over the horizon beats the
// work a restart loses). It is pure: no I/O, no clock (time is Input.Now),
// the same inputs give the same decision.
//
// A replacement is carried out by the pool's reconciler (reconcile.Replace):
// a node is launched in the replaced node's place first, and the replaced
// node is drained once the pool makes its desired size without it. This
// package only chooses, under these rules:
//
//   - Repair is not bound by the disruption budget, nor by the work on the
//     node (an unhealthy node's work is handled as a lost worker's is), but
//     by a breaker: while more than MaxUnhealthyPercent of the pool's
//     joined nodes (rounded up: one node of a pool of up to five at 20 %)
//     are unhealthy at once, nothing is repaired (a fault of
//     the whole pool, or of what watches it, is not fixed by replacing
//     nodes), and the decision says so.
//   - Drift, expiry and the replace move are voluntary disruptions: never more nodes at once
//     than the pool's disruption budget allows (nodes already being
//     replaced or otherwise disrupted count), never a node whose work may
//     not be disrupted (non-restartable work, tide.dev/do-not-disrupt): it
//     waits, and the wait says why.
package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/consolidate"
)

// Reasons of replacements, as events, metrics ({reason}) and reconciler
// notes name them.
const (
	// ReasonRepair: the node was unhealthy for longer than repair_after.
	ReasonRepair = "repair"
	// ReasonDrift: the pool settings that shaped the node changed.
	ReasonDrift = "drift"
	// ReasonExpired: the node is older than expire_after.
	ReasonExpired = "expired"
	// ReasonReplace: the node is swapped for a cheaper offering.
	ReasonReplace = "replace"
	// ReasonBreaker: repair is held because too much of the pool is
	// unhealthy at once.
	ReasonBreaker = "repair-breaker"
)

// DefaultMaxUnhealthyPercent is the share of a pool's joined nodes that may
// be unhealthy at once for repair to go on (Karpenter's 20 %).
const DefaultMaxUnhealthyPercent = 20

// Config is a pool's node lifecycle settings.
type Config struct {
	// RepairAfter is how long a joined node may stay unhealthy before it
	// is replaced; zero: never repaired.
	RepairAfter time.Duration
	// MaxUnhealthyPercent is the breaker: no repair while more than this
	// share of the pool's joined nodes, rounded up to a whole node, is
	// unhealthy (0: the default, 20).
	MaxUnhealthyPercent int
	// ExpireAfter is the oldest a node may get before it is replaced;
	// zero: nodes never expire.
	ExpireAfter time.Duration
	// Disruption holds the pool's disruption budgets, shared with
	// consolidation; with consolidation Enabled, its Horizon prices the
	// replace move.
	Disruption consolidate.Config
	// Offerings are the pool's offerings: a node running on one of them
	// is swapped for a cheaper one that hosts its work (the replace move)
	// when the saving over Disruption.Horizon beats the work it loses.
	Offerings []capacity.Offering
}

// Validate checks the settings; errors name the YAML field.
func (c Config) Validate() error {
	switch {
	case c.RepairAfter < 0:
		return fmt.Errorf("repair_after: must not be negative, got %s", c.RepairAfter)
	case c.ExpireAfter < 0:
		return fmt.Errorf("expire_after: must not be negative, got %s", c.ExpireAfter)
	case c.MaxUnhealthyPercent < 0 || c.MaxUnhealthyPercent > 100:
		return fmt.Errorf("max_unhealthy: must be within 0%%..100%%, got %d%%", c.MaxUnhealthyPercent)
	}
	return nil
}

func (c Config) maxUnhealthy() int { return cmp.Or(c.MaxUnhealthyPercent, DefaultMaxUnhealthyPercent) }

// Node is one joined node of the pool.
type Node struct {
	// ID is the node's ordinal; Machine its machine id.
	ID      int
	Machine string
	// CreatedAt is when its machine was created (zero: unknown, never
	// expires).
	CreatedAt time.Time
	// Unhealthy says why the node is unhealthy ("" when it is healthy),
	// and UnhealthySince since when.
	Unhealthy      string
	UnhealthySince time.Time
	// Drift says how the pool settings that shaped the node changed (""
	// when they did not).
	Drift string
	// Blocked says why the node's work may not be disrupted now ("" when
	// it may): drift and expiry wait for it, repair does not.
	Blocked string
	// Replacing is set while the node is being replaced: it counts toward
	// the disruption in progress and is not chosen again.
	Replacing bool
	// Protected is the pool's protected first node: repaired, never
	// replaced for drift, expiry or a cheaper offering.
	Protected bool
	// Offering is the node's offering (by name); Used what its non-daemon
	// work requests; WorkHours the work a restart of it loses, in node
	// hours (each instance's run time × its share of the node). The
	// replace move reads them.
	Offering  string
	Used      capacity.Resources
	WorkHours float64
}

// Input is what one decision looks at.
type Input struct {
	Now time.Time
	// Nodes are the pool's joined nodes; a caller may leave out the
	// healthy ones that are neither drifted, nor expired, nor being
	// replaced, and state their number in Total.
	Nodes []Node
	// Total is the number of joined nodes in the pool (len(Nodes) when
	// smaller): the breaker's share and percentage budgets are of it.
	Total int
	// Disrupting counts the nodes disrupted otherwise (scale-down drains,
	// consolidation) that count against the budget, besides the nodes
	// being replaced.
	Disrupting int
}

// Replacement is one node to replace.
type Replacement struct {
	ID      int
	Machine string
	// Reason is ReasonRepair, ReasonDrift, ReasonExpired or ReasonReplace.
	Reason string
	// Why says it in words.
	Why string
	// Offering is, for ReasonReplace, the cheaper offering to launch in
	// its place.
	Offering string
}

// String formats the replacement for events.
func (r Replacement) String() string {
	return fmt.Sprintf("node %d (%s): %s: %s", r.ID, r.Machine, r.Reason, r.Why)
}

// Wait is a node that is due for a replacement it does not get yet.
type Wait struct {
	ID      int
	Machine string
	// Reason is the replacement it waits for (or ReasonBreaker).
	Reason string
	// Kind is what it waits for: "due" (repair_after not reached),
	// "breaker", "work" (work that may not be disrupted), "budget",
	// "protected" (the protected first node: never, for drift or expiry).
	Kind string
	// Why says what it waits for.
	Why string
}

// Decision is what Decide chose.
type Decision struct {
	// Replace are the nodes to replace now, repairs first.
	Replace []Replacement
	// Waits are the nodes due for a replacement that waits.
	Waits []Wait
	// Unhealthy counts the unhealthy joined nodes.
	Unhealthy int
	// Breaker is set while the breaker holds repair, and says why.
	Breaker string
	// Allowed is how many nodes the budget lets be disrupted now, and
	// Budget says which budget allows it.
	Allowed int
	Budget  string
}

// cand is a voluntary replacement (drift, expiry, cheaper offering).
type cand struct {
	n        Node
	reason   string
	why      string
	offering string
}

// Decide chooses the nodes to replace now. Nodes are considered in ordinal
// order within each reason; repairs come first, then drift, then expiry
// (oldest first).
func Decide(cfg Config, in Input) Decision {
	var d Decision
	nodes := slices.Clone(in.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	total := max(len(nodes), in.Total)
	replacing := 0
	for _, n := range nodes {
		if n.Replacing {
			replacing++
		}
		if n.Unhealthy != "" {
			d.Unhealthy++
		}
	}

	// Repair, under the breaker.
	if cfg.RepairAfter > 0 && d.Unhealthy > 0 {
		limit := cfg.maxUnhealthy()
		if allowed := (limit*total + 99) / 100; d.Unhealthy > allowed {
			d.Breaker = fmt.Sprintf("%d of %d nodes are unhealthy (%d%%), more than the %d%% breaker allows (%d): no node is repaired until fewer are",
				d.Unhealthy, total, d.Unhealthy*100/total, limit, allowed)
		}
		for _, n := range nodes {
			if n.Unhealthy == "" || n.Replacing {
				continue
			}
			due := n.UnhealthySince.Add(cfg.RepairAfter)
			switch {
			case d.Breaker != "":
				d.Waits = append(d.Waits, Wait{ID: n.ID, Machine: n.Machine, Reason: ReasonBreaker, Kind: "breaker",
					Why: fmt.Sprintf("unhealthy (%s) since %s: %s", n.Unhealthy, stamp(n.UnhealthySince), d.Breaker)})
			case in.Now.Before(due):
				d.Waits = append(d.Waits, Wait{ID: n.ID, Machine: n.Machine, Reason: ReasonRepair, Kind: "due",
					Why: fmt.Sprintf("unhealthy (%s) since %s: repaired at %s unless it recovers", n.Unhealthy, stamp(n.UnhealthySince), stamp(due))})
			default:
				d.Replace = append(d.Replace, Replacement{ID: n.ID, Machine: n.Machine, Reason: ReasonRepair,
					Why: fmt.Sprintf("unhealthy (%s) for %s, longer than repair_after %s", n.Unhealthy, in.Now.Sub(n.UnhealthySince).Round(time.Second), cfg.RepairAfter)})
			}
		}
	}

	// Drift and expiry, under the budget.
	var cands []cand
	var expired []cand
	for _, n := range nodes {
		if n.Replacing || n.Unhealthy != "" {
			continue
		}
		switch {
		case n.Drift != "":
			cands = append(cands, cand{n: n, reason: ReasonDrift, why: "drifted: " + n.Drift})
		case cfg.ExpireAfter > 0 && !n.CreatedAt.IsZero() && !in.Now.Before(n.CreatedAt.Add(cfg.ExpireAfter)):
			expired = append(expired, cand{n: n, reason: ReasonExpired, why: fmt.Sprintf("created %s, older than expire_after %s", stamp(n.CreatedAt), cfg.ExpireAfter)})
		}
	}
	slices.SortStableFunc(expired, func(a, b cand) int { return a.n.CreatedAt.Compare(b.n.CreatedAt) })
	cands = append(cands, expired...)
	for _, n := range nodes {
		if n.Replacing || n.Unhealthy != "" || n.Drift != "" || n.Blocked != "" || n.Protected {
			continue
		}
		if c, ok := cheaper(cfg, n); ok && !slices.ContainsFunc(cands, func(x cand) bool { return x.n.ID == n.ID }) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return d
	}
	budgets := cfg.Disruption
	if budgets.Budgets == nil {
		budgets = consolidate.Config{Budgets: []consolidate.Budget{{Percent: consolidate.DefaultBudgetPercent, Percentage: true}}}
	}
	d.Allowed = budgets.Allowed(in.Now, total)
	d.Budget = budgets.BudgetText(in.Now, total)
	room := d.Allowed - replacing - len(d.Replace) - in.Disrupting
	for _, c := range cands {
		switch {
		case c.n.Protected:
			d.Waits = append(d.Waits, Wait{ID: c.n.ID, Machine: c.n.Machine, Reason: c.reason, Kind: "protected",
				Why: c.why + "; the pool's protected first node is not replaced for it"})
		case c.n.Blocked != "":
			d.Waits = append(d.Waits, Wait{ID: c.n.ID, Machine: c.n.Machine, Reason: c.reason, Kind: "work",
				Why: c.why + "; waits: " + c.n.Blocked + " runs there"})
		case room <= 0:
			d.Waits = append(d.Waits, Wait{ID: c.n.ID, Machine: c.n.Machine, Reason: c.reason, Kind: "budget",
				Why: fmt.Sprintf("%s; waits for the disruption budget (%d of %d being disrupted; %s)",
					c.why, replacing+len(d.Replace)+in.Disrupting, d.Allowed, d.Budget)})
		default:
			room--
			d.Replace = append(d.Replace, Replacement{ID: c.n.ID, Machine: c.n.Machine, Reason: c.reason, Why: c.why, Offering: c.offering})
		}
	}
	return d
}

// cheaper finds the replace move of node n: the cheapest offering of the
// pool (by effective cost) whose resources host n's work, when the saving
// over the horizon beats the work a restart loses (its node hours at n's
// price). An empty node is left to scale-down.
func cheaper(cfg Config, n Node) (c cand, ok bool) {
	if !cfg.Disruption.Enabled || n.Used.IsZero() || n.Offering == "" {
		return c, false
	}
	i := slices.IndexFunc(cfg.Offerings, func(o capacity.Offering) bool { return o.Name() == n.Offering })
	if i < 0 {
		return c, false
	}
	cur := cfg.Offerings[i]
	var best *capacity.Offering
	for j := range cfg.Offerings {
		o := &cfg.Offerings[j]
		if o.EffectiveCost() >= cur.EffectiveCost() || !n.Used.Fits(o.Resources) {
			continue
		}
		if best == nil || o.EffectiveCost() < best.EffectiveCost() || o.EffectiveCost() == best.EffectiveCost() && o.Name() < best.Name() {
			best = o
		}
	}
	if best == nil {
		return c, false
	}
	horizon := cmp.Or(cfg.Disruption.Horizon, consolidate.DefaultHorizon)
	saving := (cur.EffectiveCost() - best.EffectiveCost()) * horizon.Hours()
	lost := n.WorkHours * cur.PricePerHour
	if saving <= lost {
		return c, false
	}
	return cand{n: n, reason: ReasonReplace, offering: best.Name(), why: fmt.Sprintf(
		"%s ($%.4g/h) can be %s ($%.4g/h), which hosts its work (%s): saves $%.4g over %s, loses $%.4g of work",
		cur.Name(), cur.EffectiveCost(), best.Name(), best.EffectiveCost(), n.Used, saving, horizon, lost)}, true
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
