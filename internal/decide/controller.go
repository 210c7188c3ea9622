package decide

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/lifecycle"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/validate"
)

// Machine states a snapshot's controller view may state.
const (
	// MachineProvisioning: created, not yet joined (booting).
	MachineProvisioning = "provisioning"
	// MachineReady: joined and in rotation.
	MachineReady = "ready"
	// MachineDraining: joined and told to drain.
	MachineDraining = "draining"
	// MachineDrained: was draining and now runs nothing (DrainComplete).
	MachineDrained = "drained"
	// MachineMarked: joined and carrying a deletion mark since marked_at.
	MachineMarked = "marked"
	// MachineLost: gone or unusable (spot interruption, crash, failed check).
	MachineLost = "lost"
)

// MachineStates lists the states a machine may be in, for errors and docs.
var MachineStates = []string{MachineProvisioning, MachineReady, MachineDraining, MachineDrained, MachineMarked, MachineLost}

// Provision outcomes of the provision call in flight.
const (
	// OutcomeInFlight: the call has not returned yet.
	OutcomeInFlight = "in_flight"
	// OutcomeAll: every asked machine was created.
	OutcomeAll = "all"
	// OutcomeSome: only the machines listed in created were created.
	OutcomeSome = "some"
	// OutcomeFailed: the call failed; none was created.
	OutcomeFailed = "failed"
)

// Controller is the reconciler's view of the pool in a snapshot: its
// machines, the provision call in flight and its outcome, and the last tick.
type Controller struct {
	// LastTick is the time of the controller's last reconcile tick; zero
	// means none yet, so this step ticks. A step ticks when a reconcile
	// interval has passed since LastTick.
	LastTick time.Time `json:"last_tick,omitzero"`
	// Backoff says a provision failed (or created none) since the last
	// tick: only the next tick may provision again.
	Backoff *bool `json:"backoff,omitempty"`
	// Machines are the pool's machines by ordinal.
	Machines []Machine `json:"machines"`
	// Provision is the provision call in flight, if any.
	Provision *ProvisionCall `json:"provision,omitempty"`
}

// Machine is one machine of the pool as the controller knows it.
type Machine struct {
	// Ordinal is the machine's node id in the pool (0 is the first node).
	Ordinal int `json:"ordinal"`
	// State is one of MachineStates.
	State string `json:"state"`
	// MarkedAt is when a marked machine got its deletion mark.
	MarkedAt time.Time `json:"marked_at,omitzero"`
	// Resources is the node's allocatable capacity (default: the resources
	// of the pool's first offering).
	Resources capacity.Resources `json:"resources,omitzero"`
	// Running lists the instances on the machine; a non-daemon one makes
	// it busy, so it is never drained, marked or terminated by scale-down.
	Running []capacity.Instance `json:"running,omitempty"`
	// CreatedAt is when the machine was created (expire_after counts from
	// it); zero: it never expires.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Unhealthy says why a joined machine is unhealthy (worker OFFLINE,
	// Node NotReady), since UnhealthySince.
	Unhealthy      string    `json:"unhealthy,omitempty"`
	UnhealthySince time.Time `json:"unhealthy_since,omitzero"`
	// Drifted says how the pool settings that shaped the machine changed.
	Drifted string `json:"drifted,omitempty"`
	// Blocked says why the machine's work may not be disrupted
	// (non-restartable work, do-not-disrupt): drift and expiry wait.
	Blocked string `json:"blocked,omitempty"`
	// Replacing is the reason a joined machine is being replaced (repair,
	// drift, expired, replace): a node is launched in its place before it
	// drains.
	Replacing string `json:"replacing,omitempty"`
	// Offering is the offering the machine runs on (the replace move
	// swaps it for a cheaper one that hosts its running work), and
	// WorkHours the work a restart of that work loses, in node hours.
	Offering  string  `json:"offering,omitempty"`
	WorkHours float64 `json:"work_hours,omitempty"`
}

// ProvisionCall is the one provision call a pool may have in flight.
type ProvisionCall struct {
	// Asked are the ordinals the call asked for.
	Asked []int `json:"asked"`
	// Outcome is in_flight (default), all, some or failed.
	Outcome string `json:"outcome,omitempty"`
	// Created are the ordinals created, for outcome some.
	Created []int `json:"created,omitempty"`
	// Error is the provider's error, for outcome failed.
	Error string `json:"error,omitempty"`
}

// Plan is the controller's half of a decision: the actions one controller
// step takes after the policy, each with its reason, and the view the step
// leaves behind (the next step's starting point).
type Plan struct {
	// Ticked says the step included a reconcile tick.
	Ticked bool `json:"ticked"`
	// NextTick is when the next tick is due.
	NextTick time.Time `json:"next_tick"`
	// Before and After are the reconciler's state (watching, scaling_up,
	// draining) before and after the step.
	Before string `json:"before"`
	After  string `json:"after"`
	// Events are the reconciler events the step fed, in order.
	Events []string `json:"events"`
	// Actions are what the controller does, in order.
	Actions []Action `json:"actions"`
	// View is the controller's view after the step.
	View Controller `json:"view"`
}

// Action is one thing the controller does (or waits for) in a step.
type Action struct {
	// Event is the reconciler event whose step produced the action ("" for waits).
	Event string `json:"event,omitempty"`
	// Kind is provision, drain, abort-drain, terminate, mark, unmark,
	// replace (repair, drift, expired: Code says which), note or wait.
	Kind string `json:"action"`
	// Nodes are the ordinals the action is about.
	Nodes []int `json:"nodes,omitempty"`
	// Offerings says which offerings a provision launches.
	Offerings []policy.OfferingCount `json:"offerings,omitempty"`
	// Code is a note's stable code.
	Code string `json:"code,omitempty"`
	// Reason explains the action to a person.
	Reason string `json:"reason"`
}

// validate checks the controller view; errors name the field.
func (c *Controller) validate(where string) []error {
	var errs []error
	seen := map[int]bool{}
	for i, m := range c.Machines {
		at := fmt.Sprintf("%s.machines[%d]", where, i)
		switch {
		case m.Ordinal < 0:
			errs = append(errs, fmt.Errorf("%s.ordinal: must not be negative, got %d", at, m.Ordinal))
		case m.Ordinal > maxOrdinal:
			errs = append(errs, fmt.Errorf("%s.ordinal: must be at most %d, got %d", at, maxOrdinal, m.Ordinal))
		case seen[m.Ordinal]:
			errs = append(errs, fmt.Errorf("%s.ordinal: duplicate ordinal %d", at, m.Ordinal))
		}
		seen[m.Ordinal] = true
		if !slices.Contains(MachineStates, m.State) {
			errs = append(errs, fmt.Errorf("%s.state: want one of %s, got %q", at, strings.Join(MachineStates, ", "), m.State))
		}
		if m.Replacing != "" && m.State != MachineReady && m.State != MachineDraining && m.State != MachineDrained {
			errs = append(errs, fmt.Errorf("%s.replacing: only a ready, draining or drained machine is replaced, this one is %s", at, m.State))
		}
		if (m.Unhealthy != "") != !m.UnhealthySince.IsZero() {
			errs = append(errs, fmt.Errorf("%s.unhealthy_since: set exactly when unhealthy is", at))
		}
		if (m.State == MachineMarked) != !m.MarkedAt.IsZero() {
			errs = append(errs, fmt.Errorf("%s.marked_at: set exactly when the state is marked", at))
		}
		errs = append(errs, resources(at+".resources", m.Resources))
		for j, in := range m.Running {
			errs = append(errs, resources(fmt.Sprintf("%s.running[%d].requests", at, j), in.Requests))
		}
	}
	if p := c.Provision; p != nil {
		at := where + ".provision"
		if len(p.Asked) == 0 {
			errs = append(errs, fmt.Errorf("%s.asked: must name the ordinals asked for", at))
		}
		asked := map[int]bool{}
		for _, id := range p.Asked {
			if id < 0 || id > maxOrdinal {
				errs = append(errs, fmt.Errorf("%s.asked: ordinal %d is outside [0, %d]", at, id, maxOrdinal))
			}
			if seen[id] {
				errs = append(errs, fmt.Errorf("%s.asked: ordinal %d is also a machine", at, id))
			}
			asked[id] = true
		}
		switch p.Outcome {
		case "", OutcomeInFlight, OutcomeAll, OutcomeFailed:
			if len(p.Created) > 0 {
				errs = append(errs, fmt.Errorf("%s.created: only for outcome some", at))
			}
		case OutcomeSome:
			for _, id := range p.Created {
				if !asked[id] {
					errs = append(errs, fmt.Errorf("%s.created: ordinal %d was not asked for", at, id))
				}
			}
		default:
			errs = append(errs, fmt.Errorf("%s.outcome: want in_flight, all, some or failed, got %q", at, p.Outcome))
		}
		if p.Error != "" && p.Outcome != OutcomeFailed {
			errs = append(errs, fmt.Errorf("%s.error: only for outcome failed", at))
		}
	}
	return errs
}

// maxOrdinal bounds node ordinals: no pool has more nodes than this.
const maxOrdinal = validate.MaxNodes

// plan runs one controller step of the live reconciler (internal/reconcile)
// on the snapshot's controller view after the policy decided d.
func plan(in Input, s *Snapshot, d policy.Decision) (*Plan, error) {
	c := s.Controller
	nodes := s.nodes(in.Pool, in.Policy.Offerings)
	busy := map[int]bool{}
	for i := range nodes {
		if nodes[i].Busy() {
			busy[nodes[i].Ordinal] = true
		}
	}
	ticks := c.LastTick.IsZero() || !s.Time.Before(c.LastTick.Add(in.Interval))

	// The pool before the step: lost and drained machines are still what
	// they were (the controller sees them at a tick), and a draining
	// machine that became busy is first restored as draining.
	v := reconcile.View{Desired: s.Desired, Reason: "snapshot", Marks: map[reconcile.NodeID]time.Time{}, Replacing: map[reconcile.NodeID]string{}}
	if c.Backoff != nil {
		v.Backoff = *c.Backoff
	}
	var events []reconcile.Event
	var waits []Action
	var busyDraining []reconcile.NodeID
	machines := map[int]Machine{}
	for _, m := range c.Machines {
		machines[m.Ordinal] = m
		id := reconcile.NodeID(m.Ordinal)
		switch m.State {
		case MachineProvisioning:
			v.Pending = append(v.Pending, id)
			continue
		case MachineDraining, MachineDrained:
			v.Draining = append(v.Draining, id)
			if busy[m.Ordinal] {
				busyDraining = append(busyDraining, id)
			}
		case MachineMarked:
			v.Marks[id] = m.MarkedAt
		}
		if m.Replacing != "" {
			v.Replacing[id] = m.Replacing
		}
		v.Current = append(v.Current, id)
		if busy[m.Ordinal] && m.State != MachineDraining && m.State != MachineDrained {
			v.Busy = append(v.Busy, id)
		}
	}
	if p := c.Provision; p != nil {
		for _, id := range p.Asked {
			v.Asked = append(v.Asked, reconcile.NodeID(id))
		}
		switch p.Outcome {
		case OutcomeAll:
			events = append(events, reconcile.Provisioned{IDs: v.Asked})
		case OutcomeSome:
			ids := make([]reconcile.NodeID, len(p.Created))
			for i, id := range p.Created {
				ids[i] = reconcile.NodeID(id)
			}
			events = append(events, reconcile.Provisioned{IDs: ids})
		case OutcomeFailed:
			events = append(events, reconcile.ProvisionFailed{Err: cmp.Or(p.Error, "provider error")})
		}
	}
	pool, err := reconcile.Restore(in.Reconcile, v)
	if err != nil {
		return nil, fmt.Errorf("snapshot: controller: %w", err)
	}
	before := pool.State()

	// The events in the order the live controller feeds them: the result
	// of its provision call (returned within the previous pass), the
	// policy's decision and busy reports (any pass), then what a tick's
	// List observes, then the tick itself.
	events = append(events, reconcile.DesiredChanged{Desired: d.Desired, Reason: d.Reason.String(), Launch: d.Launch})
	for _, id := range busyDraining {
		events = append(events, reconcile.NodeBusy{ID: id, Busy: true})
	}
	next := s.Time.Add(in.Interval)
	if !ticks {
		next = c.LastTick.Add(in.Interval)
	}
	for _, m := range c.Machines {
		id := reconcile.NodeID(m.Ordinal)
		var ev reconcile.Event
		switch m.State {
		case MachineLost:
			ev = reconcile.NodeLost{ID: id}
		case MachineDrained:
			if !busy[m.Ordinal] {
				ev = reconcile.DrainComplete{ID: id}
			}
		}
		if ev == nil {
			continue
		}
		if ticks {
			events = append(events, ev)
		} else {
			waits = append(waits, Action{Kind: "wait", Nodes: []int{m.Ordinal},
				Reason: fmt.Sprintf("node %d is %s: the controller sees it at the next tick, %s", m.Ordinal, m.State, stamp(next))})
		}
	}
	var lifeActs []Action
	if ticks {
		var reps []reconcile.Event
		reps, lifeActs = lifecycleStep(in, s, c.Machines)
		events = append(events, reps...)
		events = append(events, reconcile.Tick{})
	}

	out := &Plan{Ticked: ticks, NextTick: next, Before: before.String(), Events: []string{}, Actions: []Action{}}
	for _, ev := range events {
		backoff := pool.View().Backoff
		acts := pool.Step(s.Time, ev)
		out.Events = append(out.Events, ev.String())
		if r, ok := ev.(reconcile.Replace); ok {
			for _, la := range lifeActs {
				if la.Kind == "replace" && la.Nodes[0] == int(r.ID) {
					la.Event = ev.String()
					out.Actions = append(out.Actions, la)
				}
			}
		}
		for _, a := range acts {
			act := explain(pool, ev, a, backoff)
			act.Event = ev.String()
			if p, ok := a.(reconcile.Provision); ok {
				act.Offerings = offerings(in.Policy.Offerings, p)
			}
			// One line for a run of the same action with the same
			// reason (victims drained in order, drains completed).
			if n := len(out.Actions); n > 0 && len(act.Nodes) == 1 && act.Offerings == nil {
				prev := &out.Actions[n-1]
				if prev.Kind == act.Kind && prev.Reason == act.Reason && (prev.Event == act.Event || act.Kind == "terminate") {
					if prev.Event != act.Event {
						prev.Event += ", " + act.Event
					}
					prev.Nodes = append(prev.Nodes, act.Nodes...)
					continue
				}
			}
			out.Actions = append(out.Actions, act)
		}
	}
	out.Actions = append(out.Actions, waits...)
	for _, la := range lifeActs {
		if la.Kind != "replace" {
			out.Actions = append(out.Actions, la)
		}
	}
	out.Actions = append(out.Actions, waitsAfter(pool, s.Time, next, in.Reconcile.ScaleDownDelay)...)
	out.After = pool.State().String()

	// The view the step leaves: carried machines keep their resources and
	// running instances; lost and drained ones not yet seen stay so.
	after := pool.View()
	view := Controller{LastTick: c.LastTick}
	if ticks {
		view.LastTick = s.Time
	}
	bo := after.Backoff
	view.Backoff = &bo
	carry := func(id reconcile.NodeID, state string) {
		m := machines[int(id)]
		m.Ordinal, m.State, m.MarkedAt = int(id), state, time.Time{}
		m.Replacing = after.Replacing[id]
		if state == MachineMarked {
			m.MarkedAt = after.Marks[id]
		}
		view.Machines = append(view.Machines, m)
	}
	draining := idSetOf(after.Draining)
	for _, id := range after.Current {
		switch {
		case !ticks && machines[int(id)].State == MachineLost:
			carry(id, MachineLost)
		case draining[id] && !ticks && machines[int(id)].State == MachineDrained:
			carry(id, MachineDrained)
		case draining[id]:
			carry(id, MachineDraining)
		case !after.Marks[id].IsZero():
			carry(id, MachineMarked)
		default:
			carry(id, MachineReady)
		}
	}
	for _, id := range after.Pending {
		state := MachineProvisioning
		if !ticks && machines[int(id)].State == MachineLost {
			state = MachineLost
		}
		carry(id, state)
	}
	slices.SortFunc(view.Machines, func(a, b Machine) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	if len(after.Asked) > 0 {
		call := &ProvisionCall{Outcome: OutcomeInFlight}
		for _, id := range after.Asked {
			call.Asked = append(call.Asked, int(id))
		}
		view.Provision = call
	}
	out.View = view
	return out, nil
}

type idSet map[reconcile.NodeID]bool

func idSetOf(ids []reconcile.NodeID) idSet {
	s := idSet{}
	for _, id := range ids {
		s[id] = true
	}
	return s
}

// explain turns one reconciler action into an Action with its reason.
func explain(pool *reconcile.Pool, ev reconcile.Event, a reconcile.Action, backoff bool) Action {
	desired := pool.Desired()
	switch a := a.(type) {
	case reconcile.Provision:
		ids := ordinals(a.IDs)
		have := pool.Effective() - len(a.IDs)
		why := fmt.Sprintf("desired %d, %s joined, booting or in flight: provision the %d missing under the lowest free ordinals",
			desired, plural(have, "node"), len(a.IDs))
		switch ev := ev.(type) {
		case reconcile.Provisioned:
			why = fmt.Sprintf("the provider created %d of the nodes asked: ask for the rest (%d)", len(ev.IDs), len(a.IDs))
		case reconcile.NodeLost:
			why = fmt.Sprintf("node %d was lost and desired is %d: replace it", ev.ID, desired)
		case reconcile.Replace:
			why = fmt.Sprintf("node %d is replaced (%s): launch its replacement first; it no longer counts toward desired %d", ev.ID, ev.Reason, desired)
		case reconcile.Tick:
			if backoff {
				why = fmt.Sprintf("the tick retries the failed provision: desired %d, %s", desired, plural(have, "node"))
			}
		}
		return Action{Kind: "provision", Nodes: ids, Reason: why}
	case reconcile.Drain:
		if r, ok := pool.Replacing()[a.ID]; ok {
			return Action{Kind: "drain", Nodes: []int{int(a.ID)}, Reason: fmt.Sprintf(
				"it is replaced (%s) and the joined nodes kept make desired %d without it: drain it (a repaired node is deleted as a lost one)", r, desired)}
		}
		why := fmt.Sprintf("desired %d is below the joined nodes kept: drain the excess, highest ordinal first, never a busy or protected node", desired)
		if d := pool.Config().ScaleDownDelay; d > 0 {
			why = fmt.Sprintf("its deletion mark is %s old: drain it (desired %d)", d, desired)
		}
		return Action{Kind: "drain", Nodes: []int{int(a.ID)}, Reason: why}
	case reconcile.AbortDrain:
		why := fmt.Sprintf("desired %d rose above the joined nodes kept: abort the drain before provisioning anything", desired)
		if b, ok := ev.(reconcile.NodeBusy); ok && b.ID == a.ID {
			why = "the node became busy while draining: put it back in rotation"
		}
		return Action{Kind: "abort-drain", Nodes: []int{int(a.ID)}, Reason: why}
	case reconcile.Terminate:
		why := "its drain completed: delete its machine"
		if _, ok := ev.(reconcile.NodeLost); ok {
			why = "it was lost: delete its machine so nothing leaks"
		}
		return Action{Kind: "terminate", Nodes: []int{int(a.ID)}, Reason: why}
	case reconcile.Mark:
		return Action{Kind: "mark", Nodes: ordinals(a.IDs), Reason: fmt.Sprintf(
			"desired %d leaves them in excess: mark them for deletion; drained once the mark is %s old unless demand returns",
			desired, pool.Config().ScaleDownDelay)}
	case reconcile.Unmark:
		return Action{Kind: "unmark", Nodes: ordinals(a.IDs), Reason: fmt.Sprintf(
			"demand returned (desired %d) or the node became busy: remove the deletion mark", desired)}
	case reconcile.Note:
		return Action{Kind: "note", Code: a.Code, Reason: a.Message}
	}
	return Action{Kind: "note", Reason: a.String()}
}

// waitsAfter explains what the pool waits for after the step.
func waitsAfter(pool *reconcile.Pool, now, next time.Time, delay time.Duration) []Action {
	var out []Action
	v := pool.View()
	short := v.Desired - pool.Effective()
	if len(v.InFlight) > 0 {
		out = append(out, Action{Kind: "wait", Nodes: ordinals(v.InFlight), Reason: fmt.Sprintf(
			"a provision call for %s is in flight: no second provision until its result is known", plural(len(v.InFlight), "node"))})
	}
	if v.Backoff && short > 0 {
		out = append(out, Action{Kind: "wait", Reason: fmt.Sprintf(
			"the last provision failed: the %d missing are retried at the next tick, %s", short, stamp(next))})
	}
	if len(v.Pending) > 0 {
		out = append(out, Action{Kind: "wait", Nodes: ordinals(v.Pending), Reason: "booting: they count toward desired until they join or are lost"})
	}
	if len(v.Draining) > 0 {
		out = append(out, Action{Kind: "wait", Nodes: ordinals(v.Draining), Reason: "draining: terminated once their work is done"})
	}
	// Marks due at the same time wait together.
	var due time.Time
	for _, id := range sortedMarks(v.Marks) {
		at := v.Marks[id].Add(delay)
		if !at.After(now) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Kind == "wait" && at.Equal(due) && strings.HasPrefix(out[n-1].Reason, "marked") {
			out[n-1].Nodes = append(out[n-1].Nodes, int(id))
			continue
		}
		due = at
		out = append(out, Action{Kind: "wait", Nodes: []int{int(id)}, Reason: "marked for deletion: drained at " + stamp(at) + " unless demand returns"})
	}
	return out
}

func sortedMarks(m map[reconcile.NodeID]time.Time) []reconcile.NodeID {
	ids := make([]reconcile.NodeID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// offerings says which offerings provision p launches: the purchase the
// reconciler attached to it (the policy's, as the live controller launches
// it), else the controller's order without a plan (cheapest effective
// cost first, then name) with the first offering taking all.
func offerings(offs []capacity.Offering, p reconcile.Provision) []policy.OfferingCount {
	if len(p.Launch) > 0 {
		out := make([]policy.OfferingCount, 0, len(p.Launch))
		for _, l := range p.Launch {
			out = append(out, policy.OfferingCount{Offering: l.Offering, Count: l.Count})
		}
		return out
	}
	if len(offs) == 0 {
		return nil
	}
	best := slices.MinFunc(offs, func(a, b capacity.Offering) int {
		return cmp.Or(cmp.Compare(a.EffectiveCost(), b.EffectiveCost()), cmp.Compare(a.Name(), b.Name()))
	})
	return []policy.OfferingCount{{Offering: best.Name(), Count: len(p.IDs)}}
}

func ordinals(ids []reconcile.NodeID) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// lifecycleStep decides, as the live controller does at a tick, which
// joined machines are replaced (lifecycle.Decide on the stated health,
// drift, age and blocking work): it returns their Replace events and one
// action per replacement and per machine that waits.
func lifecycleStep(in Input, s *Snapshot, machines []Machine) ([]reconcile.Event, []Action) {
	li := lifecycle.Input{Now: s.Time}
	for _, m := range machines {
		switch m.State {
		case MachineReady, MachineMarked:
		case MachineDraining, MachineDrained:
			if m.Replacing == "" {
				li.Disrupting++
			}
			if m.Replacing == "" {
				continue
			}
		default:
			continue
		}
		var used capacity.Resources
		for _, r := range m.Running {
			if !r.Daemon {
				used = used.Add(r.Requests)
			}
		}
		li.Nodes = append(li.Nodes, lifecycle.Node{ID: m.Ordinal, Machine: strconv.Itoa(m.Ordinal), CreatedAt: m.CreatedAt,
			Offering: m.Offering, Used: used, WorkHours: m.WorkHours,
			Unhealthy: m.Unhealthy, UnhealthySince: m.UnhealthySince, Drift: m.Drifted, Blocked: m.Blocked, Replacing: m.Replacing != "",
			Protected: in.Reconcile.ProtectFirstNode && m.Ordinal == 0})
	}
	cfg := in.Lifecycle
	if cfg.Offerings == nil {
		cfg.Offerings = in.Policy.Offerings
	}
	d := lifecycle.Decide(cfg, li)
	var evs []reconcile.Event
	var acts []Action
	for _, r := range d.Replace {
		evs = append(evs, reconcile.Replace{ID: reconcile.NodeID(r.ID), Reason: r.Reason})
		why := r.Why + "; a node is launched in its place before it is drained"
		if r.Offering != "" {
			why = r.Why + "; a node of " + r.Offering + " is launched in its place before it is drained"
		}
		acts = append(acts, Action{Kind: "replace", Nodes: []int{r.ID}, Code: r.Reason, Reason: why})
	}
	if d.Breaker != "" {
		acts = append(acts, Action{Kind: "note", Code: lifecycle.ReasonBreaker, Reason: "repair held: " + d.Breaker})
	}
	for _, w := range d.Waits {
		acts = append(acts, Action{Kind: "wait", Nodes: []int{w.ID}, Code: w.Reason, Reason: w.Why})
	}
	return evs, acts
}
