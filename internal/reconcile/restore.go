package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// View is a pool's reconciler state stated from outside: what a snapshot or
// a person says the pool looks like between two steps. Restore builds a Pool
// from it and Pool.View returns it, so a what-if tool (tide decide) can run
// one Step of the live reconciler on a stated pool and carry the result to
// the next step.
type View struct {
	// Desired is the desired node count, within the config's bounds.
	Desired int
	// Reason is the reason of the last desired change (for Describe).
	Reason string
	// Current are the joined nodes, draining ones included.
	Current []NodeID
	// Pending are the provisioned nodes that have not joined.
	Pending []NodeID
	// Draining are the nodes told to drain: joined ones, and booting ones
	// cancelled by a scale-down.
	Draining []NodeID
	// Busy are the joined nodes running non-daemon work.
	Busy []NodeID
	// Marks are the deletion marks of joined nodes (ScaleDownDelay > 0).
	Marks map[NodeID]time.Time
	// Asked are the ids of the provision call in flight (none: no call).
	Asked []NodeID
	// InFlight are the asked ids that still count toward effective (not
	// joined early, not lost); nil with Asked set means all of Asked.
	InFlight []NodeID
	// Backoff is set after a failed or empty provision: only a Tick may
	// provision again.
	Backoff bool
	// Replacing are the joined nodes being replaced (Replace), with the
	// reason of each; draining ones are drained in place of a replacement.
	Replacing map[NodeID]string
}

// Restore returns a pool of cfg in the state v states. It checks that v is
// one the reconciler can be in (desired within bounds, draining nodes joined
// or booting, busy and marked nodes joined, no id in two of current, pending and in flight);
// errors name the field.
func Restore(cfg Config, v View) (*Pool, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	if cfg.Nodes.Clamp(v.Desired) != v.Desired {
		bad("desired", "%d is outside the bounds %s", v.Desired, cfg.Nodes)
	}
	add := func(field string, into idSet, ids []NodeID) {
		for _, id := range ids {
			switch {
			case id < 0:
				bad(field, "node id %d is negative", id)
			case into.has(id):
				bad(field, "node %d is listed twice", id)
			default:
				into.add(id)
			}
		}
	}
	add("current", p.current, v.Current)
	add("pending", p.pending, v.Pending)
	add("draining", p.draining, v.Draining)
	add("busy", p.busy, v.Busy)
	for _, id := range v.Pending {
		if p.current.has(id) {
			bad("pending", "node %d is also joined", id)
		}
	}
	for _, id := range v.Draining {
		if !p.current.has(id) && !p.pending.has(id) {
			bad("draining", "node %d is neither joined nor booting", id)
		}
		if _, replaced := v.Replacing[id]; p.busy.has(id) && !replaced {
			bad("draining", "node %d runs work: a draining node that becomes busy is no longer draining", id)
		}
	}
	for _, id := range v.Busy {
		if !p.current.has(id) {
			bad("busy", "node %d has not joined", id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(v.Marks)) {
		switch {
		case !p.current.has(id):
			bad("marks", "node %d has not joined", id)
		case v.Marks[id].IsZero():
			bad("marks", "node %d has no mark time", id)
		default:
			p.marks[id] = v.Marks[id]
		}
	}
	for _, id := range slices.Sorted(maps.Keys(v.Replacing)) {
		if !p.current.has(id) {
			bad("replacing", "node %d has not joined", id)
			continue
		}
		p.replacing[id] = v.Replacing[id]
	}
	if len(v.Asked) > 0 {
		c := &provisionCall{open: idSet{}}
		asked := idSet{}
		add("asked", asked, v.Asked)
		c.asked = slices.Clone(v.Asked)
		open := v.InFlight
		if open == nil {
			open = v.Asked
		}
		add("in_flight", c.open, open)
		for _, id := range open {
			if !asked.has(id) {
				bad("in_flight", "node %d was not asked for", id)
			}
			if p.current.has(id) || p.pending.has(id) {
				bad("in_flight", "node %d is also joined or booting", id)
			}
		}
		p.call = c
	} else if len(v.InFlight) > 0 {
		bad("in_flight", "set without asked")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.desired, p.reason, p.backoff = v.Desired, v.Reason, v.Backoff
	p.joinedDraining = p.countDrainingJoined()
	return p, nil
}

// View returns the pool's state in the form Restore takes.
func (p *Pool) View() View {
	v := View{
		Desired: p.desired, Reason: p.reason,
		Current: p.current.sorted(), Pending: p.pending.sorted(),
		Draining: p.draining.sorted(), Busy: p.busy.sorted(),
		Marks: maps.Clone(p.marks), Backoff: p.backoff,
	}
	if len(p.replacing) > 0 {
		v.Replacing = maps.Clone(p.replacing)
	}
	if p.call != nil {
		v.Asked = slices.Clone(p.call.asked)
		v.InFlight = p.call.open.sorted()
	}
	return v
}
