package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/policy"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// ErrDeposed is returned (wrapped) by Tick, Sync and Run once a provider
// refused one of this controller's calls with a stale fence: a controller
// with a higher epoch holds the pool, and this one no longer acts.
var ErrDeposed = errors.New("controller deposed: another controller holds the pool")

// Controller drives one pool: it feeds the pool's reconciler and carries out
// its actions through a provider. See the package doc.
//
// Tick, Sync and Run drive it and must not be called concurrently with each
// other: one goroutine owns the controller's state. SetDesired, SetBounds,
// ReportBusy and Status are safe to call from any goroutine.
type Controller struct {
	cfg       Config
	prov      provider.Provider
	journal   Journal
	work      Workload
	clock     clock.Clock
	log       *slog.Logger
	sink      EventSink
	metrics   *poolMetrics
	offerings []capacity.Offering // by EffectiveCost, then name

	// The state below is owned by the goroutine that drives the controller.
	started   bool
	deposed   bool
	epoch     uint64
	seq       uint64
	pool      *reconcile.Pool
	nodes     []*node // by ordinal; nil where no machine serves the ordinal
	byMachine map[string]*node
	doomed    []*doomed // machines to delete until NotFound, oldest first
	doomedBy  map[string]*doomed
	skipUntil map[string]time.Time // offering name → skipped until
	// orphanSeen is when each orphan (a listed machine no journal knows)
	// was first seen; it is deleted OrphanGrace later.
	orphanSeen map[string]time.Time
	// lastLaunch is the purchase's launch of the last node launched by one
	// (nil until then): the default for nodes a Provision has no launch for.
	lastLaunch *capacity.Launch
	queue      []reconcile.Event // events for the reconciler, in order
	// busyHint is the last busy report of each node. A report can arrive
	// before the controller sees the node join (the worker registers with
	// the head before the next List); it is replayed after NodeJoined.
	busyHint  map[reconcile.NodeID]bool
	saved     int // desired count in the journal
	hasSaved  bool
	list      []provider.Machine // this tick's List
	listed    map[string]int     // by id, index into list
	decisions uint64
	events    uint64
	// Latched until the next tick: a total quota refused a Create (its
	// error), and an offering was probed while all were being skipped.
	quotaHit string
	probed   bool
	// dirty are the ordinals whose node was tracked or untracked or whose
	// host, join or drain changed since the last publish: publish copies
	// those into shown only (a pass over every node per pass costs a large
	// pool dearly).
	dirty []reconcile.NodeID
	// claimed marks the machines of list that a node holds (observe).
	claimed []bool
	// info is this tick's Inspect answer (infoOK: it succeeded); refs is
	// the node list asked, kept for its backing array.
	info   map[string]NodeInfo
	infoOK bool
	refs   []Node
	// timeouts counts the launch and registration timeouts in a row of
	// each offering; breaker is the repair breaker's last text.
	timeouts map[string]int
	breaker  string
	// replaceOffers are the cheaper offerings replace moves asked for, in
	// order: the next nodes provisioned beyond a purchase take them.
	replaceOffers []string

	mu     sync.Mutex
	inbox  []reconcile.Event
	status Status
	poke   chan struct{}
	// shown is each ordinal's node status as of the last publish (an
	// empty MachineID where no machine serves the ordinal); status.Nodes
	// is nil: Status builds the list from shown.
	shown []NodeStatus
}

// New returns the controller of cfg.Pool. It does no I/O: the first Tick
// takes the pool over (raises the epoch, lists and adopts its machines).
func New(cfg Config, deps Deps) (*Controller, error) {
	cfg = cfg.withDefaults()
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, fmt.Errorf("controller of pool %q: %w", cfg.Pool, err)
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	metrics, err := newPoolMetrics(deps.Metrics, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("controller of pool %q: %w", cfg.Pool, err)
	}
	prov := deps.Provider
	if deps.Metrics != nil {
		prov = tideprovider.Instrument(prov, deps.Metrics, tideprovider.WithClock(clk))
	}
	prov = withCallTimeout(prov, cfg.CallTimeout)
	offs := slices.Clone(cfg.Offerings)
	slices.SortStableFunc(offs, func(a, b capacity.Offering) int {
		if c := cmp.Compare(a.EffectiveCost(), b.EffectiveCost()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name(), b.Name())
	})
	c := &Controller{
		cfg: cfg, prov: prov, journal: deps.Journal, work: deps.Workload, clock: clk,
		log: logger.With("pool", cfg.Pool), sink: deps.Events, metrics: metrics, offerings: offs,
		byMachine: map[string]*node{}, doomedBy: map[string]*doomed{}, skipUntil: map[string]time.Time{},
		orphanSeen: map[string]time.Time{},
		listed:     map[string]int{}, poke: make(chan struct{}, 1),
	}
	c.status = Status{Pool: cfg.Pool}
	return c, nil
}

// SetDesired hands the controller a policy decision; the reconciler gets it
// as DesiredChanged on the next Sync or Tick (Run syncs at once). Safe for
// concurrent use.
func (c *Controller) SetDesired(d policy.Decision) {
	c.input(reconcile.DesiredChanged{Desired: d.Desired, Reason: d.Reason.String(), Launch: d.Launch})
}

// SetBounds resizes the pool (BoundsChanged). Safe for concurrent use.
func (c *Controller) SetBounds(nodes capacity.NodeSpec) {
	c.input(reconcile.BoundsChanged{Nodes: nodes})
}

// ReportBusy tells the reconciler whether a joined node runs non-daemon work
// (NodeBusy): busy nodes are never drained. Safe for concurrent use.
func (c *Controller) ReportBusy(id reconcile.NodeID, busy bool) {
	c.input(reconcile.NodeBusy{ID: id, Busy: busy})
}

func (c *Controller) input(ev reconcile.Event) {
	c.mu.Lock()
	c.inbox = append(c.inbox, ev)
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// takeInbox moves the inputs to the reconciler's queue, in arrival order.
func (c *Controller) takeInbox() {
	c.mu.Lock()
	c.queue = append(c.queue, c.inbox...)
	clear(c.inbox)
	c.inbox = c.inbox[:0]
	c.mu.Unlock()
}

// lastInboxDesired returns the last desired count waiting in the inbox,
// and its purchase.
func (c *Controller) lastInboxDesired() (int, []capacity.Launch, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range slices.Backward(c.inbox) {
		if d, ok := ev.(reconcile.DesiredChanged); ok {
			return d.Desired, d.Launch, true
		}
	}
	return 0, nil, false
}

// Run drives the controller until ctx is done (it then returns nil) or the
// controller is deposed (ErrDeposed). It ticks at once and then every
// ReconcileInterval of the Clock, and syncs whenever an input arrives.
// Errors of single passes are reported as events, not returned.
func (c *Controller) Run(ctx context.Context) error {
	t := c.clock.NewTicker(c.cfg.ReconcileInterval)
	defer t.Stop()
	err := c.Tick(ctx)
	for {
		if errors.Is(err, ErrDeposed) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			err = c.Tick(ctx)
		case <-c.poke:
			err = c.Sync(ctx)
		}
	}
}

// Tick runs one full reconcile pass at the Clock's now: on the first call it
// takes the pool over; then it lists the pool's machines, turns what it sees
// into reconciler events (joined, lost, drained), configures Idle machines,
// deletes what is doomed, advances drains, feeds the inputs and a
// reconcile.Tick to the reconciler and carries out its actions. The
// simulator and tests call it directly on virtual time; Run calls it every
// ReconcileInterval.
//
// Provider, journal and workload errors do not stop a pass: they become
// events and are retried. Tick returns an error when it could not take the
// pool over (retried on the next Tick), when ctx is done, or ErrDeposed.
func (c *Controller) Tick(ctx context.Context) error { return c.pass(ctx, true) }

// Sync feeds the waiting inputs (SetDesired, SetBounds, ReportBusy) to the
// reconciler and carries out its actions, without listing the pool. Before
// the first Tick it does nothing: the inputs wait for the takeover.
func (c *Controller) Sync(ctx context.Context) error { return c.pass(ctx, false) }

func (c *Controller) pass(ctx context.Context, tick bool) error {
	if c.deposed {
		return c.errDeposed()
	}
	listed := false
	if !c.started {
		if !tick {
			return nil
		}
		if err := c.start(ctx); err != nil {
			if !c.deposed {
				c.emit(TypeWarning, ReasonProviderError, "take over the pool: %v; retried on the next tick", err)
			}
			return fmt.Errorf("pool %q: start: %w", c.cfg.Pool, err)
		}
		listed = true
	}
	c.takeInbox()
	if tick {
		c.quotaHit, c.probed = "", false
		if !listed {
			list, err := c.prov.List(ctx, provider.Filter{Pool: c.cfg.Pool})
			if err != nil {
				c.emit(TypeWarning, ReasonProviderError, "list machines: %v; the pool is not observed until the next tick", err)
			} else {
				c.index(list)
				listed = true
			}
		}
		if listed {
			c.inspect(ctx)
			c.observe(ctx)
			c.lifecycleStep(c.clock.Now())
		}
		c.sweep(ctx, listed)
		c.advanceDrains(ctx)
		c.queue = append(c.queue, reconcile.Tick{})
	}
	c.drive(ctx)
	c.publish()
	if c.deposed {
		return c.errDeposed()
	}
	return ctx.Err()
}

func (c *Controller) errDeposed() error { return fmt.Errorf("pool %q: %w", c.cfg.Pool, ErrDeposed) }

// index makes list this tick's view of the pool. A list of the same
// machines in the same order as the last one keeps the last one's index.
func (c *Controller) index(list []provider.Machine) {
	same := len(list) == len(c.list) && len(c.listed) == len(list)
	for i := 0; same && i < len(list); i++ {
		same = list[i].ID == c.list[i].ID
	}
	c.list = list
	if same {
		return
	}
	clear(c.listed)
	for i := range list {
		c.listed[list[i].ID] = i
	}
}

// listedMachine returns this tick's listing of machine id, nil when the
// pool's list does not have it. hint, when not nil, is where the machine
// was found last time (checked first, then updated).
func (c *Controller) listedMachine(id string, hint *int) *provider.Machine {
	if hint != nil {
		if i := *hint; i >= 0 && i < len(c.list) && c.list[i].ID == id {
			return &c.list[i]
		}
	}
	i, ok := c.listed[id]
	if !ok {
		return nil
	}
	if hint != nil {
		*hint = i
	}
	return &c.list[i]
}

// start takes the pool over: it raises the epoch, loads the journal, lists
// the pool, keeps the machines the journal wants, dooms the rest (unknown,
// failed, interrupted, superseded or missing ones) and queues Adopt.
func (c *Controller) start(ctx context.Context) error {
	epoch, err := c.journal.RaiseEpoch(ctx)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	st, err := c.journal.Load(ctx)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	list, err := c.prov.List(ctx, provider.Filter{Pool: c.cfg.Pool})
	if err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	// Start from the last desired count known (an input waiting, else the
	// journal's), so adoption does not drain what a restart finds.
	rcfg := c.cfg.Reconcile
	want, ok := st.Desired, st.HasDesired
	var launch []capacity.Launch
	if d, l, found := c.lastInboxDesired(); found {
		want, ok, launch = d, true, l
	}
	if ok && rcfg.Nodes.Elastic {
		rcfg.Nodes.Desired = min(max(want, 0), rcfg.Nodes.Max)
	}
	pool, err := reconcile.New(rcfg)
	if err != nil {
		return err
	}
	c.pool, c.epoch, c.seq = pool, epoch, 0
	c.saved, c.hasSaved = st.Desired, st.HasDesired
	c.index(list)
	now := c.clock.Now()

	// One machine per ordinal: the highest serial wins.
	keep := map[reconcile.NodeID]Record{}
	var superseded []Record
	for _, r := range st.Records {
		switch {
		case r.Intent == IntentDelete:
			c.doomedBy[r.MachineID] = &doomed{rec: r, persisted: true}
			c.doomed = append(c.doomed, c.doomedBy[r.MachineID])
		case r.Ordinal < 0:
			superseded = append(superseded, r)
		default:
			if old, dup := keep[r.Ordinal]; dup {
				if old.Serial > r.Serial {
					old, r = r, old
				}
				superseded = append(superseded, old)
			}
			keep[r.Ordinal] = r
		}
	}
	for _, r := range superseded {
		c.doom(ctx, r)
	}
	adopt := reconcile.Adopt{Launch: launch}
	for _, id := range slices.Sorted(maps.Keys(keep)) {
		r := keep[id]
		m := c.listedMachine(r.MachineID, nil)
		if m == nil || m.State == provider.Failed || m.State == provider.Deleting || !m.ReclaimAt.IsZero() {
			c.doom(ctx, r)
			continue
		}
		n := &node{id: id, rec: r, host: m.Host, confirmed: true, joined: m.State == provider.Configured}
		switch {
		case n.joined:
			adopt.Current = append(adopt.Current, id)
		case m.State == provider.Creating || m.State == provider.Speculative:
			n.deadline = m.CreatedAt.Add(c.cfg.LaunchTimeout)
			adopt.Pending = append(adopt.Pending, id)
		default: // Idle, Configuring, Draining: (re)joining from now
			n.deadline = now.Add(c.cfg.LaunchTimeout)
			adopt.Pending = append(adopt.Pending, id)
		}
		c.track(n)
	}
	for i := range c.list {
		if m := &c.list[i]; c.byMachine[m.ID] == nil && c.doomedBy[m.ID] == nil {
			c.orphan(ctx, m)
		}
	}
	// A drain in progress at the crash is forgotten by Adopt: put every
	// adopted node back in rotation, and ask which joined ones run work.
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		c.uncordon(ctx, n)
		if !n.joined {
			continue
		}
		busy, err := c.work.Busy(ctx, n.ref(c.cfg.Pool))
		if err != nil {
			busy = true
			c.emit(TypeWarning, ReasonWorkloadError, "node %d: busy: %v; treated as busy", n.id, err)
		}
		if busy {
			adopt.Busy = append(adopt.Busy, n.id)
			continue
		}
		if mr, ok := c.work.(MarkReader); ok && rcfg.ScaleDownDelay > 0 {
			at, err := mr.MarkedAt(ctx, n.ref(c.cfg.Pool))
			switch {
			case err != nil:
				c.emit(TypeWarning, ReasonWorkloadError, "node %d: read its deletion mark: %v; adopted unmarked", n.id, err)
			case !at.IsZero():
				if adopt.Marks == nil {
					adopt.Marks = map[reconcile.NodeID]time.Time{}
				}
				adopt.Marks[n.id] = at
			}
		}
	}
	c.started = true
	c.queue = append(c.queue, adopt)
	c.emit(TypeNormal, ReasonStarted, "took the pool over at epoch %d: %d joined and %d launching machines adopted, %d to delete",
		epoch, len(adopt.Current), len(adopt.Pending), len(c.doomed))
	return nil
}

// drive feeds the queued events to the reconciler, one at a time, carrying
// out each step's actions in order before the next event; executing an
// action may queue further events (a provision result, a lost node).
func (c *Controller) drive(ctx context.Context) {
	for len(c.queue) > 0 && !c.deposed {
		ev := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		switch e := ev.(type) {
		case reconcile.NodeBusy:
			if c.busyHint == nil {
				c.busyHint = map[reconcile.NodeID]bool{}
			}
			c.busyHint[e.ID] = e.Busy
			if !c.pool.IsCurrent(e.ID) {
				continue // not joined yet: replayed after NodeJoined
			}
		case reconcile.NodeJoined:
			if busy, ok := c.busyHint[e.ID]; ok {
				c.queue = slices.Insert(c.queue, 0, reconcile.Event(reconcile.NodeBusy{ID: e.ID, Busy: busy}))
			}
		case reconcile.NodeLost:
			delete(c.busyHint, e.ID)
		case reconcile.DrainComplete:
			delete(c.busyHint, e.ID)
		}
		before := c.pool.Desired()
		acts := c.pool.Step(c.clock.Now(), ev)
		if d := c.pool.Desired(); d != before {
			c.emit(TypeNormal, ReasonDesiredChanged, "desired %d → %d (%s)", before, d, eventReason(ev))
		}
		c.saveDesired(ctx)
		for _, a := range acts {
			if c.deposed {
				return
			}
			c.exec(ctx, a)
		}
	}
	if len(c.queue) == 0 {
		c.queue = c.queue[:0:0] // let the drained backing array go
	}
}

func eventReason(ev reconcile.Event) string {
	switch ev := ev.(type) {
	case reconcile.DesiredChanged:
		if ev.Reason != "" {
			return ev.Reason
		}
	case reconcile.BoundsChanged:
		return "bounds " + ev.Nodes.String()
	}
	return ev.String()
}

// saveDesired writes the reconciler's desired count to the journal when it
// changed, before the step's actions are carried out.
func (c *Controller) saveDesired(ctx context.Context) {
	d := c.pool.Desired()
	if c.hasSaved && c.saved == d {
		return
	}
	if err := c.journal.SetDesired(ctx, c.epoch, d); err != nil {
		c.journalFailed(err, "record desired %d: %v; retried after the next step", d, err)
		return
	}
	c.saved, c.hasSaved = d, true
}

// exec carries out one reconciler action.
func (c *Controller) exec(ctx context.Context, a reconcile.Action) {
	if n, ok := a.(reconcile.Note); ok {
		c.emit(noteType(n.Code), n.Code, "%s", n.Message)
		return
	}
	c.decisions++
	switch a := a.(type) {
	case reconcile.Provision:
		c.emit(TypeNormal, ReasonProvision, "%s (desired %d)", a, c.pool.Desired())
		c.provision(ctx, a.IDs, a.Launch)
	case reconcile.Drain:
		c.emit(TypeNormal, ReasonDrain, "%s (desired %d)", a, c.pool.Desired())
		c.startDrain(ctx, a.ID)
	case reconcile.AbortDrain:
		c.emit(TypeNormal, ReasonAbortDrain, "%s (desired %d)", a, c.pool.Desired())
		c.abortDrain(ctx, a.ID)
	case reconcile.Terminate:
		c.emit(TypeNormal, ReasonTerminate, "%s", a)
		c.terminate(ctx, a.ID)
	case reconcile.Mark:
		c.emit(TypeNormal, ReasonMark, "%s", a)
	case reconcile.Unmark:
		c.emit(TypeNormal, ReasonUnmark, "%s", a)
	default:
		c.emit(TypeWarning, reconcile.NoteIgnored, "unknown action %T: %s", a, a)
	}
}

// emit reports one event to the log, the metrics and the sink.
func (c *Controller) emit(typ, reason, format string, args ...any) {
	ev := Event{Time: c.clock.Now(), Pool: c.cfg.Pool, Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...)}
	c.events++
	c.metrics.event(typ, reason)
	level := slog.LevelInfo
	if typ == TypeWarning {
		level = slog.LevelWarn
	}
	if ctx := context.Background(); c.log.Enabled(ctx, level) {
		c.log.LogAttrs(ctx, level, ev.Message, slog.String("reason", reason))
	}
	if c.sink != nil {
		c.sink.Emit(ev)
	}
}

// journalFailed reports a failed journal write; a stale epoch deposes the
// controller. It reports whether the controller still acts.
func (c *Controller) journalFailed(err error, format string, args ...any) bool {
	if errors.Is(err, ErrStaleEpoch) {
		c.depose(err)
		return false
	}
	c.emit(TypeWarning, ReasonJournalError, format, args...)
	return true
}

// depose stops the controller after a stale fence or journal epoch.
func (c *Controller) depose(err error) {
	if c.deposed {
		return
	}
	c.deposed = true
	c.emit(TypeWarning, ReasonDeposed, "%v: this controller stops acting on the pool", err)
}

// fence returns the fence of the next mutating call.
func (c *Controller) fence() provider.Fence {
	c.seq++
	return provider.Fence{Controller: c.cfg.ControllerID, Epoch: c.epoch, Seq: c.seq}
}

// Status is a snapshot of a controller, taken at the end of its last pass.
type Status struct {
	Pool string
	// Started is set once the controller took the pool over.
	Started bool
	// Deposed is set once a provider refused its fence.
	Deposed bool
	// Epoch is the fencing epoch it holds.
	Epoch uint64
	// State is the reconciler's state ("watching", "scaling_up",
	// "draining"); empty before the takeover.
	State string
	// Desired, Current, Pending and Draining are the reconciler's figures:
	// Pending counts booting nodes and provision calls in flight.
	Desired, Current, Pending, Draining int
	// Nodes are the machines serving the pool's ordinals, by ordinal.
	Nodes []NodeStatus
	// Deleting lists the machine ids being deleted until NotFound.
	Deleting []string
	// Decisions counts the reconciler actions carried out (notes excluded);
	// Events counts the events emitted.
	Decisions, Events uint64
	// Unavailable names the offerings being skipped after running out of
	// capacity (the ICE cache), with when each skip ends.
	Unavailable map[string]time.Time
	// Marks are the reconciler's deletion marks (seed 001) by node, with
	// when each was made; Kubernetes mode mirrors them as taints.
	Marks map[reconcile.NodeID]time.Time
}

// Unavailable returns the offerings out of capacity at now (the ICE cache
// as of the last pass), sorted: a policy's purchase does not count on them.
// Safe for concurrent use.
func (c *Controller) Unavailable(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, until := range c.status.Unavailable {
		if now.Before(until) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Held is what the pool's machines add up to as of the last pass: every
// machine the controller holds (booting and draining ones included), with
// the resources and price of the offering it was launched as. The policy
// cuts purchases to the pool's limits with it. Safe for concurrent use.
func (c *Controller) Held() policy.Held {
	c.mu.Lock()
	defer c.mu.Unlock()
	var h policy.Held
	for i := range c.shown {
		if c.shown[i].MachineID == "" {
			continue
		}
		h.Nodes++
		if j := slices.IndexFunc(c.offerings, func(o capacity.Offering) bool { return o.Name() == c.shown[i].Offering }); j >= 0 {
			h.Resources = h.Resources.Add(c.offerings[j].Resources)
			h.CostPerHour += c.offerings[j].PricePerHour
		}
	}
	return h
}

// Booting returns the offering name of each machine launched and not
// joined as of the last pass (a machine being drained or replaced is not
// booting): what the policy's purchase may count on to join. Empty, not
// nil, when none boots. Safe for concurrent use.
func (c *Controller) Booting() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{}
	for i := range c.shown {
		if n := &c.shown[i]; n.MachineID != "" && !n.Joined && !n.Draining && n.Replacing == "" {
			out = append(out, n.Offering)
		}
	}
	return out
}

// NodeStatus is one ordinal's machine.
type NodeStatus struct {
	ID        reconcile.NodeID
	MachineID string
	Offering  string
	Host      string
	// Joined is set once the machine reached Configured and its node joined.
	Joined bool
	// Draining is set while the node is being drained.
	Draining bool
	// Unhealthy says why the joined node is unhealthy ("" when healthy).
	Unhealthy string
	// Replacing is the reason the node is being replaced ("" when it is
	// not): repair, drift, expired.
	Replacing string
	// Disruption says why the node is, or is due to be, replaced and what
	// it waits for (drifted, expiring, unhealthy); "" when nothing.
	Disruption string
}

// Status returns a snapshot as of the end of the last Tick or Sync. Safe for
// concurrent use.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Nodes = c.shownNodes()
	s.Deleting = slices.Clone(s.Deleting)
	s.Unavailable = maps.Clone(s.Unavailable)
	s.Marks = maps.Clone(s.Marks)
	return s
}

// Summary is Status without the per-node list (Nodes is nil): for a caller
// that reads the figures after every pass of a large pool (the simulator),
// without a copy of every node each time. Safe for concurrent use.
func (c *Controller) Summary() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Nodes = nil
	s.Deleting = slices.Clone(s.Deleting)
	s.Unavailable = maps.Clone(s.Unavailable)
	return s
}

// Node returns the status of the machine serving ordinal id as of the end
// of the last pass (false when none does). Safe for concurrent use.
func (c *Controller) Node(id reconcile.NodeID) (NodeStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id < 0 || int(id) >= len(c.shown) || c.shown[id].MachineID == "" {
		return NodeStatus{}, false
	}
	return c.shown[id], true
}

// shownNodes returns the nodes of shown, by ordinal (c.mu held).
func (c *Controller) shownNodes() []NodeStatus {
	var out []NodeStatus
	for i := range c.shown {
		if c.shown[i].MachineID != "" {
			out = append(out, c.shown[i])
		}
	}
	return out
}

// status is n's NodeStatus.
func (n *node) status() NodeStatus {
	return NodeStatus{ID: n.id, MachineID: n.rec.MachineID, Offering: n.rec.Offering,
		Host: n.host, Joined: n.joined, Draining: n.drain != drainNone,
		Unhealthy: n.unhealthy, Replacing: n.replace, Disruption: n.waitWhy}
}

// changed notes that the status of ordinal id's node changed.
func (c *Controller) changed(id reconcile.NodeID) { c.dirty = append(c.dirty, id) }

// checkPublish makes publish compare, on every pass, the node list it
// keeps with one built from every node, and panic when they differ: a
// change that was not noted (tests).
var checkPublish = false

// nodeStatus appends every node's status to dst, by ordinal (checkPublish).
func (c *Controller) nodeStatus(dst []NodeStatus) []NodeStatus {
	for _, n := range c.nodes {
		if n != nil {
			dst = append(dst, n.status())
		}
	}
	return dst
}

// publish updates the gauges and the Status snapshot.
func (c *Controller) publish() {
	c.doomed = slices.DeleteFunc(c.doomed, func(d *doomed) bool { return d.done })
	s := Status{Pool: c.cfg.Pool, Started: c.started, Deposed: c.deposed, Epoch: c.epoch,
		Decisions: c.decisions, Events: c.events}
	if c.pool != nil {
		s.State = c.pool.State().String()
		s.Desired = c.pool.Desired()
		s.Current = c.pool.CurrentCount()
		s.Pending = c.pool.Effective() - s.Current
		s.Draining = len(c.pool.Draining())
		if m := c.pool.Marks(); len(m) > 0 {
			s.Marks = m
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.dirty {
		for int(id) >= len(c.shown) {
			c.shown = append(c.shown, NodeStatus{})
		}
		c.shown[id] = NodeStatus{}
		if n := c.node(id); n != nil {
			c.shown[id] = n.status()
		}
	}
	c.dirty = c.dirty[:0]
	if checkPublish && !slices.Equal(c.nodeStatus(nil), c.shownNodes()) {
		panic("controller: a node's status changed without being noted (Controller.changed)")
	}
	now := c.clock.Now()
	for name, until := range c.skipUntil {
		if now.Before(until) {
			if s.Unavailable == nil {
				s.Unavailable = map[string]time.Time{}
			}
			s.Unavailable[name] = until
		}
	}
	s.Deleting = c.status.Deleting[:0]
	for _, d := range c.doomed {
		s.Deleting = append(s.Deleting, d.rec.MachineID)
	}
	c.status = s
	c.metrics.set(s.Desired, s.Current, s.Pending, s.Draining)
}
