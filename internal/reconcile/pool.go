package reconcile

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/deletion"
)

// Config configures one pool's reconciler.
type Config struct {
	// Nodes is the node spec: the pool stays within [Min, Max] and starts
	// with Initial() desired nodes.
	Nodes capacity.NodeSpec
	// ProtectFirstNode keeps node 0 (the head, whose address distributed
	// frameworks use) out of every scale-down.
	ProtectFirstNode bool
	// ScaleDownDelay selects the scale-down mode. Zero drains excess nodes at
	// once; a positive delay marks them first (seed 001) and drains a marked
	// node only once its mark is ScaleDownDelay old.
	ScaleDownDelay time.Duration
}

// Validate checks the config; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Nodes.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("nodes: %w", err))
	}
	if c.ScaleDownDelay < 0 {
		errs = append(errs, fmt.Errorf("scale_down_delay: must not be negative, got %s", c.ScaleDownDelay))
	}
	return errors.Join(errs...)
}

// State is the reconciler's state, derived from its sets.
type State int

// The states of seed 000's reconciler.
const (
	// Watching: no provision call in flight and no node draining.
	Watching State = iota
	// ScalingUp: a provision call is in flight.
	ScalingUp
	// Draining: at least one node is draining.
	Draining
)

// String returns the seed's name of the state.
func (s State) String() string {
	switch s {
	case Watching:
		return "watching"
	case ScalingUp:
		return "scaling_up"
	case Draining:
		return "draining"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Pool is the reconciler of one node pool: a deterministic state machine that
// turns events into actions. It does no I/O and reads no clock. A Pool is not
// safe for concurrent use; one driver goroutine owns it.
type Pool struct {
	cfg     Config
	desired int
	reason  string

	current  idSet // joined nodes, draining ones included
	pending  idSet // provisioned, not yet joined
	draining idSet // subset of current and pending: a draining pending node is a cancelled launch
	busy     idSet // subset of current: nodes running non-daemon work
	marks    map[NodeID]time.Time
	// replacing are the joined nodes being replaced (Replace), with the
	// reason: they count toward no size, and are drained once the other
	// joined nodes kept make the desired size.
	replacing map[NodeID]string

	call    *provisionCall    // the one outstanding Provision, or nil
	plan    []capacity.Launch // the purchase not yet asked for, in order
	backoff bool              // a provision failed: only a Tick may provision again
	blocked string            // the last drain-blocked note, to not repeat it
	// blockedMemo is the last blockedText answer: a pool held above its
	// desired size by busy nodes asks for the same text at every step.
	blockedMemo blockedMemo
	// drainMemo is planDrains' last walk that found no node to drain: while
	// no node set changed (setsVersion) and the excess is the same, the
	// walk would find none again and block on the same nodes.
	drainMemo drainMemo
	// setsVersion counts the changes to current, pending, draining and
	// busy (addNode, delNode, onAdopt): equal values mean none changed.
	setsVersion uint64
	// joinedDraining is the number of draining nodes that have joined
	// (drainingJoined), kept by addNode and delNode: a pass over every
	// draining node per count was a twentieth of a large replay.
	joinedDraining int

	// excessTicks counts the Ticks in a row that found more joined and
	// booting nodes kept than desired (reset on any step without excess):
	// booting nodes are cancelled only once the excess outlived a whole
	// tick interval, not for a policy's dip of a moment.
	excessTicks int
	tick        bool // the step being applied is a Tick

	now time.Time
	out []Action
}

// provisionCall is an outstanding Provision action.
type provisionCall struct {
	asked  []NodeID
	launch []capacity.Launch // the plan's launches it asked for, in id order
	// open holds the asked ids that still count toward the effective size:
	// not yet joined early and not lost.
	open idSet
}

// New returns a pool in the watching state with Nodes.Initial() desired nodes
// and no nodes. It emits nothing: the first Step (a Tick, or Adopt after a
// restart) starts the initial provisioning.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reconcile config: %w", err)
	}
	return &Pool{
		cfg:       cfg,
		desired:   cfg.Nodes.Initial(),
		reason:    "initial",
		current:   idSet{},
		pending:   idSet{},
		draining:  idSet{},
		busy:      idSet{},
		marks:     map[NodeID]time.Time{},
		replacing: map[NodeID]string{},
	}, nil
}

// Step applies one event at time now and returns the actions the driver must
// carry out, in order (nil when there are none). now must not go backwards;
// it is used for deletion marks only. Every Step re-checks the whole pool, so
// drift is corrected on any event, not only on a Tick.
func (p *Pool) Step(now time.Time, ev Event) []Action {
	p.now = now
	p.out = nil
	switch ev := ev.(type) {
	case DesiredChanged:
		p.onDesired(ev)
	case BoundsChanged:
		p.onBounds(ev)
	case Tick:
		p.backoff = false
		p.tick = true
	case Provisioned:
		p.onProvisioned(ev)
	case ProvisionFailed:
		p.onProvisionFailed(ev)
	case NodeJoined:
		p.onJoined(ev.ID)
	case NodeLost:
		p.onLost(ev.ID)
	case NodeBusy:
		p.onBusy(ev)
	case DrainComplete:
		p.onDrainComplete(ev.ID)
	case Replace:
		p.onReplace(ev)
	case Adopt:
		p.onAdopt(ev)
	default:
		p.note(NoteIgnored, fmt.Sprintf("unknown event %T", ev))
	}
	p.reconcile()
	p.tick = false
	out := p.out
	p.out = nil
	return out
}

func (p *Pool) emit(a Action)             { p.out = append(p.out, a) }
func (p *Pool) note(code, msg string)     { p.emit(Note{Code: code, Message: msg}) }
func (p *Pool) protected(id NodeID) bool  { return p.cfg.ProtectFirstNode && id == 0 }
func (p *Pool) known(id NodeID) bool      { return p.current.has(id) || p.pending.has(id) || p.inCall(id) }
func (p *Pool) inCall(id NodeID) bool     { return p.call != nil && p.call.open.has(id) }
func (p *Pool) kept() int                 { return len(p.current) - p.drainingJoined() - p.replacingKept() }
func (p *Pool) clamp(n int) int           { return p.cfg.Nodes.Clamp(n) }
func (p *Pool) boundsText() string        { return p.cfg.Nodes.String() }
func (p *Pool) nodeText(id NodeID) string { return "node " + strconv.Itoa(int(id)) }
func (p *Pool) nodesText(ids []NodeID) string {
	if len(ids) == 1 {
		return p.nodeText(ids[0])
	}
	return "nodes " + formatIDs(ids)
}

func (p *Pool) onDesired(ev DesiredChanged) {
	d := ev.Desired
	switch {
	case d > p.cfg.Nodes.Max:
		p.note(NoteAtMax, fmt.Sprintf("desired %d is above max %d: using %d", d, p.cfg.Nodes.Max, p.cfg.Nodes.Max))
	case d < p.cfg.Nodes.Min:
		p.note(NoteBelowMin, fmt.Sprintf("desired %d is below min %d: refused, using %d", d, p.cfg.Nodes.Min, p.cfg.Nodes.Min))
	}
	old := p.desired
	p.desired = p.clamp(d)
	p.reason = ev.Reason
	switch {
	case ev.Launch != nil:
		p.plan = cloneLaunch(ev.Launch)
	case p.desired < old:
		p.plan = nil // the purchase is no longer wanted
	}
}

// takePlan removes the launches of up to n nodes from the front of the plan.
func (p *Pool) takePlan(n int) []capacity.Launch {
	var out []capacity.Launch
	for n > 0 && len(p.plan) > 0 {
		l := p.plan[0]
		k := min(n, l.Count)
		if k <= 0 {
			p.plan = p.plan[1:]
			continue
		}
		t := l
		t.Count = k
		t.Fallback = slices.Clone(l.Fallback)
		out = append(out, t)
		n -= k
		if p.plan[0].Count -= k; p.plan[0].Count == 0 {
			p.plan = p.plan[1:]
		}
	}
	if len(p.plan) == 0 {
		p.plan = nil
	}
	return out
}

// giveBack returns to the front of the plan the launches of the asked ids
// of call that were not created (got nil: none were).
func (p *Pool) giveBack(c *provisionCall, got idSet) {
	var back []capacity.Launch
	i := 0
	for _, l := range c.launch {
		for range l.Count {
			if i < len(c.asked) && !got.has(c.asked[i]) {
				if n := len(back); n > 0 && back[n-1].Offering == l.Offering && slices.Equal(back[n-1].Fallback, l.Fallback) {
					back[n-1].Count++
				} else {
					back = append(back, capacity.Launch{Offering: l.Offering, Count: 1, Fallback: slices.Clone(l.Fallback)})
				}
			}
			i++
		}
	}
	if len(back) > 0 {
		p.plan = append(back, p.plan...)
	}
}

func cloneLaunch(ls []capacity.Launch) []capacity.Launch {
	out := make([]capacity.Launch, 0, len(ls))
	for _, l := range ls {
		if l.Count > 0 {
			l.Fallback = slices.Clone(l.Fallback)
			out = append(out, l)
		}
	}
	return out
}

func (p *Pool) onBounds(ev BoundsChanged) {
	if err := ev.Nodes.Validate(); err != nil {
		p.note(NoteBoundsRejected, fmt.Sprintf("bounds %s refused, keeping %s: %s", ev.Nodes, p.boundsText(), oneLine(err)))
		return
	}
	p.cfg.Nodes = ev.Nodes
	if d := p.clamp(p.desired); d != p.desired {
		p.note(NoteClamped, fmt.Sprintf("desired %d is outside new bounds %s: using %d", p.desired, p.boundsText(), d))
		p.desired = d
		p.reason = "resize"
	}
}

func (p *Pool) onProvisioned(ev Provisioned) {
	c := p.call
	if c == nil {
		p.note(NoteIgnored, fmt.Sprintf("provision result %s with no provision call in flight", formatIDs(ev.IDs)))
		return
	}
	p.call = nil
	asked := newIDSet(c.asked...)
	got := idSet{}
	var stray []NodeID
	for _, id := range ev.IDs {
		switch {
		case !asked.has(id):
			stray = append(stray, id)
		case !got.has(id):
			got.add(id)
			if c.open.has(id) {
				p.addNode(&p.pending, id)
			}
		}
	}
	if len(stray) > 0 {
		p.note(NoteIgnored, fmt.Sprintf("provision result names %s, which %s not asked for", p.nodesText(sortedIDs(stray)), wasWere(len(stray))))
	}
	p.giveBack(c, got)
	switch {
	case len(got) == 0:
		p.backoff = true
		p.note(NoteProvisionShort, fmt.Sprintf("provision created none of %d nodes, retry on next tick", len(c.asked)))
	case len(got) < len(c.asked):
		p.note(NoteProvisionShort, fmt.Sprintf("provision created %d of %d nodes", len(got), len(c.asked)))
	}
}

func (p *Pool) onProvisionFailed(ev ProvisionFailed) {
	if p.call == nil {
		p.note(NoteIgnored, fmt.Sprintf("provision failure %q with no provision call in flight", ev.Err))
		return
	}
	p.giveBack(p.call, nil)
	p.call = nil
	p.backoff = true
	p.note(NoteProvisionFailed, fmt.Sprintf("provision failed: %s, retry on next tick", ev.Err))
}

func (p *Pool) onJoined(id NodeID) {
	switch {
	case p.current.has(id):
		// A repeated join (reconnect) changes nothing.
	case p.pending.has(id):
		p.delNode(&p.pending, id)
		p.addNode(&p.current, id)
	case p.inCall(id):
		// Joined before the provision call returned: it still counts once.
		p.call.open.del(id)
		p.addNode(&p.current, id)
	case id < 0:
		p.note(NoteIgnored, fmt.Sprintf("join of invalid node id %d", id))
	default:
		p.addNode(&p.current, id)
		p.note(NoteAdopted, fmt.Sprintf("%s joined without a provision by this pool: adopted", p.nodeText(id)))
	}
}

func (p *Pool) onLost(id NodeID) {
	switch {
	case p.current.has(id):
		was := ""
		if p.draining.has(id) {
			was = " while draining"
		} else if p.busy.has(id) {
			was = " with work on it"
		}
		p.forget(id)
		p.note(NoteNodeLost, fmt.Sprintf("%s lost%s: terminating its machine", p.nodeText(id), was))
	case p.pending.has(id):
		p.delNode(&p.pending, id)
		p.delNode(&p.draining, id)
		p.note(NoteNodeLost, fmt.Sprintf("%s lost while booting: terminating its machine", p.nodeText(id)))
	case p.inCall(id):
		p.call.open.del(id)
		p.note(NoteNodeLost, fmt.Sprintf("%s lost before its provision call returned: terminating its machine", p.nodeText(id)))
	default:
		p.note(NoteIgnored, fmt.Sprintf("loss of unknown %s", p.nodeText(id)))
		return
	}
	p.emit(Terminate{ID: id})
}

// forget removes a joined node, or a cancelled booting one, from every set.
func (p *Pool) forget(id NodeID) {
	p.delNode(&p.current, id)
	p.delNode(&p.pending, id)
	p.delNode(&p.draining, id)
	p.delNode(&p.busy, id)
	delete(p.marks, id)
	if _, ok := p.replacing[id]; ok {
		delete(p.replacing, id)
		p.setsVersion++
	}
}

func (p *Pool) onBusy(ev NodeBusy) {
	if !p.current.has(ev.ID) {
		p.note(NoteIgnored, fmt.Sprintf("busy report for %s, which has not joined", p.nodeText(ev.ID)))
		return
	}
	if !ev.Busy {
		p.delNode(&p.busy, ev.ID)
		return
	}
	if _, ok := p.replacing[ev.ID]; ok && p.draining.has(ev.ID) {
		// A replaced node's drain waits for its work instead: the node it
		// is replaced by is already there.
		return
	}
	p.addNode(&p.busy, ev.ID)
	if p.draining.has(ev.ID) {
		// Work reached the node before dispatch stopped. Rather than wait
		// for it, put the node back; reconcile picks an idle victim.
		p.delNode(&p.draining, ev.ID)
		p.emit(AbortDrain{ID: ev.ID})
		p.note(NoteDrainAborted, fmt.Sprintf("%s became busy while draining: drain aborted", p.nodeText(ev.ID)))
	}
}

func (p *Pool) onDrainComplete(id NodeID) {
	if !p.draining.has(id) {
		p.note(NoteIgnored, fmt.Sprintf("drain complete for %s, which is not draining", p.nodeText(id)))
		return
	}
	p.forget(id)
	p.emit(Terminate{ID: id})
}

func (p *Pool) onAdopt(ev Adopt) {
	p.current, p.pending, p.draining, p.busy = idSet{}, idSet{}, idSet{}, idSet{}
	p.replacing = map[NodeID]string{}
	p.joinedDraining = 0
	p.setsVersion++
	p.marks = map[NodeID]time.Time{}
	p.call, p.backoff, p.blocked, p.plan = nil, false, "", cloneLaunch(ev.Launch)
	var bad []string
	for _, id := range ev.Current {
		if id < 0 {
			bad = append(bad, strconv.Itoa(int(id)))
			continue
		}
		p.addNode(&p.current, id)
	}
	for _, id := range ev.Pending {
		if id < 0 {
			bad = append(bad, strconv.Itoa(int(id)))
			continue
		}
		if !p.current.has(id) {
			p.addNode(&p.pending, id)
		}
	}
	for _, id := range ev.Busy {
		if p.current.has(id) {
			p.addNode(&p.busy, id)
		} else {
			bad = append(bad, "busy "+strconv.Itoa(int(id)))
		}
	}
	if p.cfg.ScaleDownDelay > 0 {
		for _, id := range slices.Sorted(maps.Keys(ev.Marks)) {
			if at := ev.Marks[id]; p.current.has(id) && !p.busy.has(id) && !p.protected(id) && !at.IsZero() {
				p.marks[id] = at
			}
		}
	}
	p.note(NoteAdopted, fmt.Sprintf("current %s, pending %s, busy %s",
		formatIDs(p.current.sorted()), formatIDs(p.pending.sorted()), formatIDs(p.busy.sorted())))
	if len(p.marks) > 0 {
		p.note(NoteAdopted, fmt.Sprintf("deletion marks kept: %s", formatIDs(slices.Sorted(maps.Keys(p.marks)))))
	}
	if len(bad) > 0 {
		p.note(NoteIgnored, "adopt entries that name no valid joined node: "+strings.Join(bad, ", "))
	}
}

// reconcile brings the pool toward its desired size. It runs after every
// event, in three stages that never contradict each other:
//
//  1. abort drains while fewer than desired joined nodes would remain
//     (then cancelled launches, while fewer than desired joined and
//     booting nodes would remain);
//  2. scale down: cancel excess booting nodes and drain excess joined
//     ones, or plan deletion marks;
//  3. scale up: provision the shortfall when no call is in flight.
//
// After stage 1, a joined node still draining implies current − draining ≥
// desired, and a booting one still draining implies joined and booting nodes
// kept ≥ desired, so stage 3 never provisions while a drain runs. Stage 2
// waits while a provision call is in flight (its result may change the
// excess).
func (p *Pool) reconcile() {
	p.abortDrains()
	if p.cfg.ScaleDownDelay > 0 {
		p.planMarks()
	} else {
		p.planDrains()
	}
	p.drainReplaced()
	p.scaleUp()
}

// replacingKept counts the nodes being replaced that are not draining yet.
func (p *Pool) replacingKept() int {
	n := 0
	for id := range p.replacing {
		if !p.draining.has(id) {
			n++
		}
	}
	return n
}

func (p *Pool) onReplace(ev Replace) {
	id := ev.ID
	switch _, already := p.replacing[id]; {
	case already:
		return
	case !p.current.has(id):
		p.note(NoteIgnored, fmt.Sprintf("replace of %s, which has not joined", p.nodeText(id)))
		return
	case p.draining.has(id):
		p.note(NoteIgnored, fmt.Sprintf("replace of %s, which is already draining", p.nodeText(id)))
		return
	case p.protected(id) && ev.Reason != "repair":
		p.note(NoteIgnored, fmt.Sprintf("replace of %s (%s): the protected first node is only ever replaced by a repair", p.nodeText(id), ev.Reason))
		return
	}
	p.replacing[id] = ev.Reason
	delete(p.marks, id)
	p.delNode(&p.busy, id)
	p.setsVersion++
	p.note(NoteReplacing, fmt.Sprintf("%s is replaced (%s): a node is launched in its place before it is drained", p.nodeText(id), ev.Reason))
}

// drainReplaced drains the nodes being replaced once the joined nodes kept
// make the desired size without them (their replacements joined, or the
// pool no longer needs them), lowest id first.
func (p *Pool) drainReplaced() {
	if len(p.replacing) == 0 || p.kept() < p.desired {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(p.replacing)) {
		if p.draining.has(id) {
			continue
		}
		p.addNode(&p.draining, id)
		p.emit(Drain{ID: id})
	}
}

// Replacing returns the nodes being replaced, with the reason of each.
func (p *Pool) Replacing() map[NodeID]string { return maps.Clone(p.replacing) }

// drainingJoined counts the draining nodes that have joined.
func (p *Pool) drainingJoined() int { return p.joinedDraining }

// countDrainingJoined counts the draining nodes that have joined anew
// (Restore, and tests that hold joinedDraining to it).
func (p *Pool) countDrainingJoined() int {
	n := 0
	for id := range p.draining {
		if p.current.has(id) {
			n++
		}
	}
	return n
}

// pendingKept counts the booting nodes that are not cancelled.
func (p *Pool) pendingKept() int { return len(p.pending) - (len(p.draining) - p.drainingJoined()) }

func (p *Pool) abortDrains() {
	// Nothing to abort unless the joined nodes kept fall short (the
	// booting ones only add to them).
	if len(p.draining) == 0 || p.desired <= p.kept() {
		return
	}
	// Joined nodes first: victims were taken highest id first, so give
	// back the lowest first. Then cancelled launches, once the joined nodes
	// kept and the booting ones still fall short.
	var joined, booting []NodeID
	for _, id := range p.draining.sorted() {
		if _, ok := p.replacing[id]; ok {
			continue // its replacement is there: never put back
		}
		if p.current.has(id) {
			joined = append(joined, id)
		} else {
			booting = append(booting, id)
		}
	}
	if short := p.desired - p.kept(); short > 0 && len(joined) > 0 {
		ids := joined[:min(short, len(joined))]
		for _, id := range ids {
			p.delNode(&p.draining, id)
			p.emit(AbortDrain{ID: id})
		}
		p.note(NoteDrainAborted, fmt.Sprintf("desired %d is above the %s kept: drain of %s aborted", p.desired, count(p.kept()-len(ids), "joined node"), p.nodesText(ids)))
	}
	if short := p.desired - p.kept() - p.pendingKept(); short > 0 && len(booting) > 0 {
		ids := booting[:min(short, len(booting))]
		for _, id := range ids {
			p.delNode(&p.draining, id)
			p.emit(AbortDrain{ID: id})
		}
		p.note(NoteDrainAborted, fmt.Sprintf("desired %d is above the %s and %s kept: cancel of booting %s aborted", p.desired,
			count(p.kept(), "joined node"), count(p.pendingKept()-len(ids), "booting node"), p.nodesText(ids)))
	}
}

// cancelAfterTicks is how many Ticks in a row must find the joined and
// booting nodes kept above desired before booting nodes are cancelled. A
// policy's desired may dip for a moment below the nodes it is still booting
// (work landed on existing nodes first); cancelling them then buys them
// again soon after, billing the boot twice: on the whole Philly trace the
// tide policy spent 138,208 node-hours cancelling at once and 136,963 with
// this hold. The hold costs at most two tick intervals after a provider
// fault clears.
const cancelAfterTicks = 2

// planDrains is the immediate scale-down mode: remove the excess at once.
// Booting nodes go first: a node that has not joined has no work placed by
// this pool, and cancelling it ends the excess before it joins, where
// draining a joined node instead would leave the booting one to join as one
// too many, and be drained a tick or more later. A booting node is
// cancelled with a Drain like any other (the driver stops dispatch to it,
// waits for it to be empty, unbinds it), so work that reached it early is
// never killed. Joined nodes are drained only down to desired.
func (p *Pool) planDrains() {
	kept, booting := p.kept(), p.pendingKept()
	excess := kept + booting - p.desired
	if excess <= 0 {
		p.excessTicks = 0
		p.setBlocked("")
		return
	}
	if p.tick {
		p.excessTicks++
	}
	cancel := booting > 0 && p.excessTicks >= cancelAfterTicks
	if !cancel {
		// Hold the booting nodes: only the joined excess goes now.
		if excess = kept - p.desired; excess <= 0 {
			p.setBlocked("")
			return
		}
	}
	if p.call != nil {
		return
	}
	memo := drainMemo{ver: p.setsVersion, excess: excess, cancel: cancel, joinedExcess: min(excess, kept-p.desired), valid: true}
	if p.drainMemo.same(memo) {
		p.setBlocked(p.drainMemo.msg)
		return
	}
	var victims, skipped []NodeID
	if cancel {
		for id := range p.pending.descending() {
			if len(victims) == excess {
				break
			}
			switch {
			case p.draining.has(id):
			case p.protected(id):
				skipped = append(skipped, id)
			default:
				victims = append(victims, id)
			}
		}
	}
	cancelled := len(victims)
	joinedExcess := min(excess-cancelled, kept-p.desired)
	for id := range p.current.descending() {
		if len(victims)-cancelled >= joinedExcess {
			break
		}
		_, replaced := p.replacing[id]
		switch {
		case p.draining.has(id), replaced:
		case p.mustKeep(id):
			skipped = append(skipped, id)
		default:
			victims = append(victims, id)
		}
	}
	for _, id := range victims {
		p.addNode(&p.draining, id)
		p.emit(Drain{ID: id})
	}
	msg := p.blockedText(excess-len(victims), skipped)
	p.drainMemo = drainMemo{}
	if len(victims) == 0 {
		memo.msg = msg
		p.drainMemo = memo
	}
	p.setBlocked(msg)
}

// drainMemo is what planDrains' walk depends on, besides the node sets and
// the fixed config, and the drain-blocked text it produced.
type drainMemo struct {
	ver                  uint64 // the pool's setsVersion when it walked
	excess, joinedExcess int
	cancel, valid        bool
	msg                  string
}

// same reports whether m is valid and was taken with o's inputs.
func (m *drainMemo) same(o drainMemo) bool {
	return m.valid && m.ver == o.ver && m.excess == o.excess && m.joinedExcess == o.joinedExcess && m.cancel == o.cancel
}

// planMarks is the deletion-mark scale-down mode (seed 001): one planner
// action per step.
func (p *Pool) planMarks() {
	var nodes []deletion.Node
	byName := map[string]NodeID{}
	for _, id := range p.current.sorted() {
		if _, replaced := p.replacing[id]; replaced || p.draining.has(id) {
			continue
		}
		name := strconv.Itoa(int(id))
		byName[name] = id
		nodes = append(nodes, deletion.Node{
			ID: name, Ordinal: int(id), Busy: p.busy.has(id), Protected: p.protected(id), MarkedAt: p.marks[id],
		})
	}
	plan := deletion.Next(nodes, p.desired, p.now, p.cfg.ScaleDownDelay)
	ids := make([]NodeID, 0, len(plan.IDs))
	for _, name := range plan.IDs {
		ids = append(ids, byName[name])
	}
	switch plan.Action {
	case deletion.Unmark:
		for _, id := range ids {
			delete(p.marks, id)
		}
		p.emit(Unmark{IDs: ids})
	case deletion.Mark:
		if p.call != nil {
			return
		}
		for _, id := range ids {
			p.marks[id] = p.now
		}
		p.emit(Mark{IDs: ids, At: p.now})
	case deletion.Delete:
		if p.call != nil {
			return
		}
		// The marks stay until the node is gone, so an aborted drain is
		// un-marked by the planner like any other mark.
		for _, id := range ids {
			p.addNode(&p.draining, id)
			p.emit(Drain{ID: id})
		}
	}
	excess := p.kept() - p.desired
	marked := 0
	var skipped []NodeID
	for _, n := range nodes {
		id := byName[n.ID]
		switch {
		case p.draining.has(id):
		case !p.marks[id].IsZero():
			marked++
		case p.mustKeep(id):
			skipped = append(skipped, id)
		}
	}
	if plan.Action == deletion.None || plan.Action == deletion.Mark {
		p.setBlocked(p.blockedText(excess-marked, skipped))
	}
}

// mustKeep reports whether scale-down may not take a joined node: the
// protected first node, or a node running non-daemon work.
func (p *Pool) mustKeep(id NodeID) bool { return p.protected(id) || p.busy.has(id) }

// blockedText explains why short excess nodes cannot go ("" when none): the
// kept nodes that blocked them. It names no counts that change while the
// cause stays the same, so setBlocked does not repeat it.
func (p *Pool) blockedText(short int, kept []NodeID) string {
	if short <= 0 {
		return ""
	}
	// The text is a function of short, kept and the (fixed) config: the
	// last answer holds while they are the same.
	if m := &p.blockedMemo; m.text != "" && m.short == short && slices.Equal(m.kept, kept) {
		return m.text
	}
	text := p.formatBlocked(short, kept)
	p.blockedMemo = blockedMemo{short: short, kept: slices.Clone(kept), text: text}
	return text
}

// blockedMemo is one blockedText answer and its arguments.
type blockedMemo struct {
	short int
	kept  []NodeID
	text  string
}

// formatBlocked is blockedText without the memo.
func (p *Pool) formatBlocked(short int, kept []NodeID) string {
	var why []string
	var busy []NodeID
	for _, id := range sortedIDs(kept) {
		if p.protected(id) {
			why = append(why, p.nodeText(id)+" is the protected first node")
		} else {
			busy = append(busy, id)
		}
	}
	switch len(busy) {
	case 0:
	case 1:
		why = append(why, p.nodeText(busy[0])+" runs work")
	default:
		why = append(why, p.nodesText(busy)+" run work")
	}
	return fmt.Sprintf("drain blocked: %s cannot go: %s", count(short, "excess node"), strings.Join(why, ", "))
}

// setBlocked emits the drain-blocked note when it differs from the last one.
func (p *Pool) setBlocked(msg string) {
	if msg != "" && msg != p.blocked {
		p.note(NoteDrainBlocked, msg)
	}
	p.blocked = msg
}

func (p *Pool) scaleUp() {
	need := p.desired - (p.Effective() - len(p.replacing))
	if need <= 0 || p.call != nil || p.backoff {
		return
	}
	ids := make([]NodeID, 0, need)
	for id := NodeID(0); len(ids) < need; id++ {
		if !p.known(id) {
			ids = append(ids, id)
		}
	}
	launch := p.takePlan(len(ids))
	p.call = &provisionCall{asked: ids, open: newIDSet(ids...), launch: launch}
	p.emit(Provision{IDs: slices.Clone(ids), Launch: cloneLaunch(launch)})
}

// State returns the reconciler's state: draining while any node drains,
// scaling_up while a provision call is in flight, watching otherwise.
func (p *Pool) State() State {
	switch {
	case len(p.draining) > 0:
		return Draining
	case p.call != nil:
		return ScalingUp
	}
	return Watching
}

// Config returns the pool's config, with the bounds of the last accepted
// BoundsChanged.
func (p *Pool) Config() Config { return p.cfg }

// Desired returns the desired node count, always within the bounds.
func (p *Pool) Desired() int { return p.desired }

// Effective returns the node count that counts toward desired: joined nodes
// (draining ones included), booting nodes, and the ids of a provision call in
// flight.
func (p *Pool) Effective() int {
	n := len(p.current) + len(p.pending)
	if p.call != nil {
		n += len(p.call.open)
	}
	return n
}

// Current returns the joined nodes in ascending order.
func (p *Pool) Current() []NodeID { return p.current.sorted() }

// IsCurrent reports whether node id is joined (in Current), without
// sorting them.
func (p *Pool) IsCurrent(id NodeID) bool { return p.current.has(id) }

// CurrentCount returns len(Current()) without building it.
func (p *Pool) CurrentCount() int { return len(p.current) }

// Pending returns the provisioned nodes that have not joined, ascending.
func (p *Pool) Pending() []NodeID { return p.pending.sorted() }

// Draining returns the draining nodes in ascending order.
func (p *Pool) Draining() []NodeID { return p.draining.sorted() }

// Busy returns the joined nodes that run non-daemon work, ascending.
func (p *Pool) Busy() []NodeID { return p.busy.sorted() }

// InFlight returns the ids of the outstanding provision call that still
// count (nil when no call is in flight).
func (p *Pool) InFlight() []NodeID {
	if p.call == nil {
		return nil
	}
	return p.call.open.sorted()
}

// Marks returns a copy of the deletion marks by node.
func (p *Pool) Marks() map[NodeID]time.Time { return maps.Clone(p.marks) }

// Describe returns a deterministic multi-line dump of the pool's state for
// transcripts and debugging.
func (p *Pool) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state: %s\n", p.State())
	fmt.Fprintf(&b, "desired: %d in [%d, %d]", p.desired, p.cfg.Nodes.Min, p.cfg.Nodes.Max)
	if p.reason != "" {
		fmt.Fprintf(&b, " (%s)", p.reason)
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "effective: %d\n", p.Effective())
	fmt.Fprintf(&b, "current: %s\n", formatIDs(p.current.sorted()))
	fmt.Fprintf(&b, "pending: %s\n", formatIDs(p.pending.sorted()))
	if p.call != nil {
		fmt.Fprintf(&b, "provisioning: %s (asked %s)\n", formatIDs(p.call.open.sorted()), formatIDs(p.call.asked))
	} else {
		b.WriteString("provisioning: none\n")
	}
	fmt.Fprintf(&b, "draining: %s\n", formatIDs(p.draining.sorted()))
	fmt.Fprintf(&b, "busy: %s\n", formatIDs(p.busy.sorted()))
	if len(p.replacing) > 0 {
		b.WriteString("replacing:")
		for _, id := range slices.Sorted(maps.Keys(p.replacing)) {
			fmt.Fprintf(&b, " %d (%s)", id, p.replacing[id])
		}
		b.WriteByte('\n')
	}
	if len(p.plan) > 0 {
		fmt.Fprintf(&b, "plan: %s\n", FormatLaunch(p.plan))
	}
	if len(p.marks) == 0 {
		b.WriteString("marks: none\n")
	} else {
		b.WriteString("marks:")
		for _, id := range slices.Sorted(maps.Keys(p.marks)) {
			at := p.marks[id].UTC()
			fmt.Fprintf(&b, " %d@%s (due %s)", id, at.Format(time.RFC3339), at.Add(p.cfg.ScaleDownDelay).Format(time.RFC3339))
		}
		b.WriteByte('\n')
	}
	var flags []string
	if p.cfg.ProtectFirstNode {
		flags = append(flags, "protect-first-node")
	}
	if p.cfg.ScaleDownDelay > 0 {
		flags = append(flags, "scale-down-delay "+p.cfg.ScaleDownDelay.String())
	}
	if p.backoff {
		flags = append(flags, "backoff (provision retried on next tick)")
	}
	if len(flags) > 0 {
		fmt.Fprintf(&b, "flags: %s\n", strings.Join(flags, ", "))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// idSet is a set of node ids; iteration always goes through sorted.
type idSet map[NodeID]struct{}

func newIDSet(ids ...NodeID) idSet {
	s := make(idSet, len(ids))
	for _, id := range ids {
		s.add(id)
	}
	return s
}

func (s idSet) has(id NodeID) bool { _, ok := s[id]; return ok }

func (s idSet) add(id NodeID) { s[id] = struct{}{} }
func (s idSet) del(id NodeID) { delete(s, id) }

// addNode and delNode change one of the pool's node sets (current,
// pending, draining, busy) and count the change in setsVersion.
// They keep joinedDraining, the draining nodes that have joined, as the
// sets change.
func (p *Pool) addNode(s *idSet, id NodeID) {
	if !s.has(id) && (s == &p.current && p.draining.has(id) || s == &p.draining && p.current.has(id)) {
		p.joinedDraining++
	}
	s.add(id)
	p.setsVersion++
}

func (p *Pool) delNode(s *idSet, id NodeID) {
	if s.has(id) && (s == &p.current && p.draining.has(id) || s == &p.draining && p.current.has(id)) {
		p.joinedDraining--
	}
	s.del(id)
	p.setsVersion++
}

func (s idSet) sorted() []NodeID      { return slices.Sorted(maps.Keys(s)) }
func sortedIDs(ids []NodeID) []NodeID { return slices.Sorted(slices.Values(ids)) }

// descending yields the ids from the highest down, as ranging over
// slices.Backward(s.sorted()) does. Ids are ordinals, mostly dense: a
// dense set is walked from its highest id down without sorting, so that
// a caller that stops after a few ids pays a pass over the set, not a sort.
func (s idSet) descending() iter.Seq[NodeID] {
	return func(yield func(NodeID) bool) {
		if len(s) == 0 {
			return
		}
		lo, hi := NodeID(math.MaxInt), NodeID(math.MinInt)
		for id := range s {
			lo, hi = min(lo, id), max(hi, id)
		}
		if lo < 0 || int(hi-lo) > 4*len(s)+64 {
			for _, id := range slices.Backward(s.sorted()) {
				if !yield(id) {
					return
				}
			}
			return
		}
		for id := hi; id >= lo; id-- {
			if s.has(id) && !yield(id) {
				return
			}
		}
	}
}

// count writes n and the noun, in the plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// oneLine joins a multi-line (errors.Join) message with "; ".
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
