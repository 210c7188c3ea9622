// Package autoscale runs one pool's scaling policy: it receives the
// scheduler's pressure reports, evaluates the pool's policy on every change
// and on a periodic tick that replays the last report (so an idle pool still
// shrinks, seed 000), and hands each decision to the pool's controller.
//
//	head scheduler ──Observe(pressure)──► Pool ──policy.Decide──► controller.SetDesired
//	                                       ▲                       controller.ReportBusy
//	                         clock tick ───┘ (replays the last report)
//
// The policy stays pure; this package owns the loop, the clock and the
// bookkeeping a policy needs between calls (its State and the current
// desired count), and it says why in an event whenever the decision, or the
// reason for not deciding, changes. Withdraw tells it that waiting work was
// given up on, so that nodes still booting for it are cancelled. One goroutine (Run) owns the evaluation;
// Observe is safe from any goroutine. Evaluate is the same pass, called
// synchronously, for tests and the simulator.
package autoscale

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// Target is the pool's controller as this loop needs it.
type Target interface {
	// SetDesired hands a decision to the reconciler.
	SetDesired(d policy.Decision)
	// ReportBusy says whether a node runs non-daemon work.
	ReportBusy(id reconcile.NodeID, busy bool)
}

// unavailabler is a Target that knows which offerings are out of capacity
// (controller.Controller's ICE cache).
type unavailabler interface {
	Unavailable(now time.Time) []string
}

// holder is a Target that knows what the pool's machines add up to
// (controller.Controller), for the policy's limits.
type holder interface {
	Held() policy.Held
}

// booter is a Target that knows the machines launched and not joined yet
// (controller.Controller), for the policy's purchase.
type booter interface {
	Booting() []string
}

// Event is one thing worth telling a person: a decision or a reason not to
// decide.
type Event struct {
	Time    time.Time
	Pool    string
	Reason  string // the policy's reason code, e.g. "scale-up", "at-max", "cooldown"
	Message string
	// Changed is set when the desired count changed.
	Changed bool
}

// Config configures one pool's loop.
type Config struct {
	// Pool names the pool.
	Pool string
	// Policy is the pool's policy.
	Policy policy.Policy
	// Desired is the desired count to start from (the controller's).
	Desired int
	// Interval is the period of the tick that replays the last report
	// (default 5s; seed 000 uses the cooldown).
	Interval time.Duration
	// Ordinal maps a node id of the pressure report (a worker name) to the
	// reconciler's ordinal; ok=false for nodes that are not the pool's
	// machines (they are left out of the report). Nil keeps every node with
	// the ordinal the report carries.
	Ordinal func(nodeID string) (reconcile.NodeID, bool)
	// Figures, when set, receives every decision's figures (the
	// target-tracking gauges); nil records none.
	Figures *FigureMetrics
}

// Pool is the loop of one pool.
type Pool struct {
	cfg    Config
	target Target
	clk    clock.Clock
	emit   func(Event)

	poke chan struct{}

	mu       sync.Mutex
	pressure capacity.Pressure
	observed bool
	state    policy.State
	desired  int
	last     policy.Decision
	lastAt   time.Time
	lastCode string
	busy     map[reconcile.NodeID]bool
	// idleSince is when each node was first seen empty of non-daemon work
	// since it last ran some; it fills Node.IdleSince when the report has none.
	idleSince map[reconcile.NodeID]time.Time
	// reports counts the reports observed. withdrawn is when Withdraw was
	// last called (zero: none pending) and withdrawnSeq the report count
	// then: the withdrawal applies to a later report (see Withdraw).
	reports      uint64
	withdrawn    time.Time
	withdrawnSeq uint64
}

// CodeWithdrawn is the reason code of a decision that cancels booting
// nodes bought for work given up on (Pool.Withdraw).
const CodeWithdrawn = "withdrawn"

// withdrawWindow bounds how long a withdrawal waits for a report without
// backlog: past it, booting nodes are left to the policy (they join and go
// once idle, like any empty node).
const withdrawWindow = 30 * time.Second

// Withdraw says that waiting work of the pool was given up on before it
// was placed (a gang or an instance failed by its max_wait, or cancelled
// while it waited): nodes the
// policy bought for it may still be booting, and a policy keeps booting
// nodes (it cannot tell them from nodes bought for work that landed
// elsewhere in the meantime, which the next burst may need). On the first
// evaluation of a report observed after the call (within withdrawWindow)
// that has no backlog, the policy decides again as if only the pool's
// joined nodes were asked for; when that asks for fewer nodes than the
// current desired count, that decision is taken (reason CodeWithdrawn),
// and the reconciler cancels the booting nodes first. Work still waiting
// keeps everything: its purchase stands while it waits. Safe for concurrent
// use.
func (p *Pool) Withdraw() {
	p.mu.Lock()
	p.withdrawn, p.withdrawnSeq = p.clk.Now(), p.reports
	p.mu.Unlock()
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// rebase is the decision of a pending withdrawal (Withdraw) for in, and
// whether it applies. Called with the lock held.
func (p *Pool) rebase(in policy.Input) (policy.Decision, bool) {
	if p.withdrawn.IsZero() {
		return policy.Decision{}, false
	}
	if in.Now.Sub(p.withdrawn) > withdrawWindow {
		p.withdrawn = time.Time{}
		return policy.Decision{}, false
	}
	if p.reports == p.withdrawnSeq || in.Pressure.Queued() > 0 {
		return policy.Decision{}, false // the report may predate the withdrawal, or work still waits
	}
	p.withdrawn = time.Time{}
	joined := 0
	for i := range in.Pressure.Nodes {
		if in.Pressure.Nodes[i].MarkedAt.IsZero() {
			joined++
		}
	}
	if joined >= in.Desired {
		return policy.Decision{}, false // nothing booting
	}
	booting := in.Desired - joined
	in.Desired = joined
	d := p.cfg.Policy.Decide(in)
	if d.Desired >= in.Desired+booting {
		return policy.Decision{}, false
	}
	d.Reason = policy.NewReason(CodeWithdrawn,
		"waiting work was given up on while %d nodes booted for the pool and no other work waits: desired lowered by %d ("+
			strings.ReplaceAll(d.Reason.String(), "%", "%%")+")", int64(booting), int64(in.Desired+booting-d.Desired))
	return d, true
}

// New returns the loop of one pool. emit receives events (may be nil).
func New(cfg Config, target Target, clk clock.Clock, emit func(Event)) (*Pool, error) {
	if cfg.Pool == "" {
		return nil, fmt.Errorf("autoscale: pool: must be set")
	}
	if cfg.Policy == nil {
		return nil, fmt.Errorf("autoscale: pool %q: policy: must be set", cfg.Pool)
	}
	if target == nil || clk == nil {
		return nil, fmt.Errorf("autoscale: pool %q: a target and a clock are required", cfg.Pool)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if emit == nil {
		emit = func(Event) {}
	}
	return &Pool{cfg: cfg, target: target, clk: clk, emit: emit, poke: make(chan struct{}, 1),
		desired: cfg.Desired, busy: map[reconcile.NodeID]bool{}, idleSince: map[reconcile.NodeID]time.Time{}}, nil
}

// Observe records a new pressure report for the pool and wakes the loop.
// Safe for concurrent use; the report is not retained by the caller.
func (p *Pool) Observe(pr capacity.Pressure) {
	pr = p.ownNodes(pr)
	p.mu.Lock()
	p.pressure, p.observed = pr, true
	p.reports++
	p.mu.Unlock()
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// ownNodes copies the pool's machines out of a report, with the
// reconciler's ordinals.
func (p *Pool) ownNodes(pr capacity.Pressure) capacity.Pressure {
	out := capacity.Pressure{Pending: pr.Pending, Nodes: make([]capacity.Node, 0, len(pr.Nodes))}
	for _, n := range pr.Nodes {
		if p.cfg.Ordinal != nil {
			ord, ok := p.cfg.Ordinal(n.ID)
			if !ok {
				continue
			}
			n.Ordinal = int(ord)
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out
}

// Run evaluates on every report, every Interval, and at the time a decision
// asks to be rechecked (the end of a batching window), until ctx ends.
func (p *Pool) Run(ctx context.Context) error {
	t := p.clk.NewTicker(p.cfg.Interval)
	defer t.Stop()
	var recheck clock.Timer
	var recheckC <-chan time.Time // nil: no recheck armed
	defer func() {
		if recheck != nil {
			recheck.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.poke:
		case <-t.C():
		case <-recheckC:
			recheckC = nil
		}
		now := p.clk.Now()
		d, ok := p.Evaluate(now)
		if !ok || !d.Recheck.After(now) {
			continue
		}
		if recheck == nil {
			recheck = p.clk.NewTimer(d.Recheck.Sub(now))
		} else {
			recheck.Stop()
			recheck.Reset(d.Recheck.Sub(now))
		}
		recheckC = recheck.C()
	}
}

// Evaluate runs the policy once on the last report at now, reports node
// busyness and a changed decision to the target, and returns the decision.
// Before the first report it does nothing and returns ok=false.
func (p *Pool) Evaluate(now time.Time) (d policy.Decision, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.observed {
		return d, false
	}
	present := make(map[reconcile.NodeID]bool, len(p.pressure.Nodes))
	for i := range p.pressure.Nodes {
		n := &p.pressure.Nodes[i]
		id, busy := reconcile.NodeID(n.Ordinal), n.Busy()
		present[id] = true
		if was, seen := p.busy[id]; !seen || was != busy {
			p.busy[id] = busy
			p.target.ReportBusy(id, busy)
		}
		switch since, ok := p.idleSince[id]; {
		case busy:
			delete(p.idleSince, id)
		case !ok:
			p.idleSince[id] = now
			since = now
			fallthrough
		default:
			if n.IdleSince.IsZero() {
				n.IdleSince = since
			}
		}
	}
	for id := range p.idleSince {
		if !present[id] {
			delete(p.idleSince, id) // the node left; its ordinal may come back as a new machine
			delete(p.busy, id)
		}
	}
	in := policy.Input{Now: now, Desired: p.desired, Pressure: p.pressure, State: p.state}
	if u, ok := p.target.(unavailabler); ok {
		in.Unavailable = u.Unavailable(now) // the controller's ICE cache
	}
	if b, ok := p.target.(booter); ok {
		in.Booting = b.Booting()
	}
	if h, ok := p.target.(holder); ok {
		held := h.Held()
		in.Held = &held
	}
	d, ok = p.rebase(in)
	if !ok {
		d = p.cfg.Policy.Decide(in)
	}
	ok = true
	p.cfg.Figures.Observe(p.cfg.Pool, d)
	p.state = d.State
	changed := d.Desired != p.desired
	if changed {
		p.target.SetDesired(d)
	}
	if changed || d.Reason.Code != p.lastCode {
		msg := d.Reason.String()
		if changed {
			msg = "desired " + strconv.Itoa(p.desired) + " -> " + strconv.Itoa(d.Desired) + ": " + msg
			if buy := d.Tide.Purchase(); buy != "" && d.Desired > p.desired {
				msg += "; " + buy
			}
		}
		p.emit(Event{Time: now, Pool: p.cfg.Pool, Reason: d.Reason.Code, Message: msg, Changed: changed})
	}
	p.desired, p.last, p.lastAt, p.lastCode = d.Desired, d, now, d.Reason.Code
	return d, true
}

// Status is the loop's view of the pool.
type Status struct {
	Desired  int
	Queued   int
	Inflight int
	// Reason is the last decision's reason and At when it was taken.
	Reason string
	At     time.Time
}

// Status returns the last decision and the last report's counts.
func (p *Pool) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Desired: p.desired, Queued: p.pressure.Queued(), Inflight: p.pressure.Inflight(), At: p.lastAt}
	if p.lastCode != "" {
		s.Reason = p.lastCode + ": " + p.last.Reason.String()
	}
	return s
}
