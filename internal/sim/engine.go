package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	cloudsim "github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/scheduler"
	"github.com/tide-project/tide/internal/trace"
	"github.com/tide-project/tide/sdk/provider"
)

// Origin is the virtual wall time of a trace's second 0.
var Origin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Tail is how long a run may go on after the last job's arrival and end
// while work still waits: a policy that never places the work is stopped
// there, and billed to then.
const Tail = 24 * time.Hour

// SettleTime is how long a run goes on once every instance completed, for
// the pool to scale down to its floor; machines still up then are billed
// to then.
const SettleTime = time.Hour

// ErrInvariant is wrapped by Run's error when the run broke one of the
// invariants the engine checks on every step: capacity exceeded on a node,
// a node running work drained or deleted by scale-down, an instance in two
// places, a machine created twice.
var ErrInvariant = errors.New("simulation invariant violated")

// Options change one run.
type Options struct {
	// Policy names the policy ("" keeps the pool's own).
	Policy string
	// Seed seeds the simulated cloud's randomness (boot latencies, spot
	// interruptions, API errors). The same seed gives the same Result.
	Seed uint64
	// Progress, when set, is called with the fraction of the trace's
	// virtual time replayed, at most about 200 times per run.
	Progress func(fraction float64)
	// Check runs the full invariant check (every node, every counter) on
	// every step instead of only on what the step touched. Tests use it.
	Check bool
	// Buckets is the number of points of Result.Series (0: none).
	Buckets int

	// perInstance keeps every instance in a group of its own: the engine
	// as it was before groups, which tests compare with.
	perInstance bool
	// lookAll looks at every machine in flight on each look at the cloud,
	// as the engine did before it watched the cloud's changes (tests).
	lookAll bool
}

// Run replays the workload on the pool under one policy: the same policy,
// reconciler, controller and scheduler code as the live system, on virtual
// time, against the simulated cloud. It returns the run's figures.
//
// Jobs flagged Preexisting (running before the trace's origin) are the
// initial load: they arrive a warm-up before the origin (long enough for
// the pool to boot: the longest boot and configure plus two reconcile
// ticks and a minute) and run until their trace end; billing and
// utilization count from the origin on. An instance of the initial load
// running by the origin waited for nothing the replay measures and counts
// in no wait figure; one the pool left queued at the origin waited from
// the origin to its start (without that, a policy that never bought for
// the initial load would look as fast as one that did, and cheaper).
//
// Run fails on a bad configuration, a controller that cannot run or a
// cancelled ctx; on a broken invariant it returns the Result and an error
// wrapping ErrInvariant.
func Run(ctx context.Context, cfg *Config, w *Workload, opts Options) (*Result, error) {
	e, err := newEngine(cfg, w, opts)
	if err != nil {
		return nil, err
	}
	return e.run(ctx)
}

// engine is one run's state. One goroutine owns it.
type engine struct {
	// gangs follows the multi-node jobs (trace.Job.Parts > 1), by job.
	gangs map[int32]*gangState
	cfg   *Config
	w     *Workload
	opts  Options
	pcfg  policy.Config
	pol   policy.Policy
	clk   *clock.Fake
	cloud *cloudsim.Cloud
	ctl   *controller.Controller
	pool  string
	offs  map[string]capacity.Offering // by name

	q           queue
	start       time.Time // the warm-up's start, or Origin
	doneAt      time.Time // when every instance had completed
	now         time.Time
	nextJob     int
	shapes      []capacity.Resources
	shapeOf     []int32 // job → shape
	queues      []shapeQueue
	queued      int                // instances pending
	running     int                // instances running
	finished    int                // instances completed
	finishedRes capacity.Resources // what the completed instances requested (Pressure.FinishedRequests)
	seq         int64

	// Groups: the instances of one job that share a fate (queued together,
	// running on one node since one instant). Slots of finished groups are
	// reused (free), so their number follows the live groups.
	groups []group
	free   []int32
	runSeq uint64 // numbers the runs of groups, for stale completions
	index  *scheduler.Index
	src    groupSource
	assign []scheduler.GroupAssignment

	nodes     []*node // joined nodes by ordinal
	byMachine map[string]*node
	billed    int // machines the cloud bills now
	// idleHours and clusterHours integrate, from the origin, the empty
	// nodes in the cluster and all nodes in it (Result.IdleNodeHours).
	idleHours, clusterHours float64
	unjoined                int     // nodes not yet reported joined by the controller
	joining                 []*node // those nodes (and some that left or joined since)
	busyDirty               []*node // nodes whose busy state or join changed since reportBusy
	idle                    []*node // the joined nodes running nothing (node.idlePos)

	// Controller and policy.
	desired  int
	state    policy.State
	settled  bool
	ctlDirty bool         // the cloud changed since the last tick
	resync   bool         // the last look at the cloud failed
	tracked  []trackEntry // machines in flight, in the order first seen
	tracking map[string]seenState
	tickAt   time.Time // armed tick; zero when none
	tickGen  uint64
	wakeAt   time.Time // armed policy wake-up; zero when none
	wakeGen  uint64
	marks    bool // the reconciler scales down through deletion marks

	// watched: the cloud notes the machines that change (no injected API
	// errors), so syncMachines looks at those, the ones in lookAgain (newly
	// watched, or whose node left) and no other.
	watched   bool
	trackSeq  uint64
	lookAgain []string
	noted     []string
	cand      []trackEntry

	// countsInstances: the pressure report lists each running instance
	// (Options.perInstance, for tests); otherwise one entry per group,
	// counted (capacity.Instance.Count).
	countsInstances bool
	changed         bool // the pressure changed since the last evaluation
	placeable       bool // placement may succeed since the last Place
	touched         []*node

	// recheck is the last decision's Recheck (the peer policies' loops).
	recheck time.Time
	// lastEval is when the policy was last evaluated and evalBusy whether
	// that pressure had queued or running work; every is the live loop's
	// evaluation tick (config.Pool.EvaluateEvery). See evaluate.
	lastEval time.Time
	evalBusy bool
	every    time.Duration
	// cons is the run's consolidation (consolidate.go); nil when nothing may move.
	cons *consolidation

	// The pressure report, kept between evaluations: nodesMoved says a
	// node joined or left since (the list is rebuilt), repStale lists the
	// nodes whose entry changed (their entries are refreshed).
	report     capacity.Pressure
	nodesMoved bool
	repStale   []*node
	// maxFree is the largest free space of any schedulable node, per
	// dimension (CPU, memory, GPUs), for place; recomputed when a node that
	// held a maximum lost free space (maxDirty).
	maxFree  capacity.Resources
	maxDirty bool

	res Result
	// gangWaits are the multi-node jobs' waits to their whole start;
	// partialGPUSec the GPU-seconds their parts held while part waited.
	gangWaits     []waitCount
	partialGPUSec float64
	waits         []waitCount
	usedSec       [3]float64 // resource-seconds used: millicore-s, byte-s, GPU-s
	violations    []string
	lastProg      float64
	series        seriesRecorder
}

func newEngine(cfg *Config, w *Workload, opts Options) (*engine, error) {
	pcfg, err := cfg.PolicyConfig(opts.Policy)
	if err != nil {
		return nil, err
	}
	pol, err := policy.New(pcfg)
	if err != nil {
		return nil, err
	}
	start := Origin
	if w.Preexisting > 0 {
		start = Origin.Add(-(cfg.Cloud.Boot.Max + cfg.Cloud.Configure.Max + 2*cfg.Pool.ReconcileEvery() + time.Minute))
	}
	clk := clock.NewFake(start)
	cloud, err := cloudsim.New(cfg.cloudConfig(), clk, rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x7469646573696d)))
	if err != nil {
		return nil, err
	}
	e := &engine{cfg: cfg, w: w, opts: opts, pcfg: pcfg, pol: pol, clk: clk, cloud: cloud, pool: cfg.Pool.Name,
		offs: map[string]capacity.Offering{}, byMachine: map[string]*node{}, tracking: map[string]seenState{}, now: start, start: start,
		every: cfg.Pool.EvaluateEvery()}
	for _, o := range cfg.Pool.Offerings {
		e.offs[o.Name()] = o
	}
	e.countsInstances = opts.perInstance
	rc := reconcile.Config{Nodes: pcfg.Nodes, ProtectFirstNode: pcfg.ProtectFirstNode}
	if pcfg.Policy == policy.Utilization {
		rc.ScaleDownDelay = pcfg.ScaleDownDelay // seed 001 scales down through deletion marks
		e.marks = true
	}
	e.ctl, err = controller.New(controller.Config{
		Pool: cfg.Pool.Name, Reconcile: rc, Offerings: cfg.Pool.Offerings, Bootstrap: []byte("tide simulate"),
		ControllerID: "simulate", ReconcileInterval: cfg.Pool.ReconcileEvery(),
		LaunchTimeout: time.Duration(cfg.Cloud.LaunchTimeout),
	}, controller.Deps{Provider: &observed{Cloud: cloud, e: e}, Journal: controller.NewMemJournal(), Workload: e, Clock: clk})
	if err != nil {
		return nil, err
	}
	e.desired = pcfg.Nodes.Initial()
	if e.cons, err = newConsolidation(cfg, w, &pcfg); err != nil {
		return nil, err
	}
	if cfg.Cloud.APIErrorRate == 0 && !opts.lookAll {
		cloud.WatchChanges()
		e.watched = true
	}

	// Shapes and instances.
	index := map[string]int32{}
	e.shapeOf = make([]int32, len(w.Jobs))
	for i := range w.Jobs {
		r := w.Jobs[i].Requests
		k := r.String()
		s, ok := index[k]
		if !ok {
			s = int32(len(e.shapes))
			index[k] = s
			e.shapes = append(e.shapes, r.Clone())
		}
		e.shapeOf[i] = s
	}
	e.queues = make([]shapeQueue, len(e.shapes))
	e.index = scheduler.NewIndex()
	e.src.e = e
	e.res = Result{Policy: pcfg.Policy, Seed: opts.Seed, Instances: w.Instances}
	e.gangs = map[int32]*gangState{}
	if opts.Buckets > 0 {
		span := max(w.Horizon, time.Second)
		e.series = seriesRecorder{width: max(span/time.Duration(opts.Buckets), time.Second)}
	}
	return e, nil
}

func (e *engine) run(ctx context.Context) (*Result, error) {
	if len(e.w.Jobs) > 0 {
		e.q.push(event{at: e.arrival(0), kind: evArrival})
	}
	if err := e.ctl.Tick(ctx); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	e.afterController()
	var lastArrival time.Duration
	if n := len(e.w.Jobs); n > 0 {
		lastArrival = e.w.Jobs[n-1].Submit
	}
	stopAt := Origin.Add(max(lastArrival, e.w.Horizon) + Tail)
	steps := 0
	for {
		if e.done() {
			break
		}
		limit := stopAt
		if e.nextJob == len(e.w.Jobs) && e.queued == 0 && e.running == 0 {
			// All work is done: the pool gets a settle time to scale down.
			if e.doneAt.IsZero() {
				e.doneAt = e.now
			}
			limit = minTime(limit, e.doneAt.Add(SettleTime))
		}
		t, ok := e.next()
		if !ok || t.After(limit) {
			stopAt = limit
			// Work is left that nothing will move (or the tail ran
			// out): the run ends at the tail, billed to then.
			if stopAt.After(e.now) {
				e.clk.Advance(stopAt.Sub(e.now))
				e.now = stopAt
			}
			break
		}
		if steps++; steps%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := e.step(ctx, t); err != nil {
			return nil, err
		}
	}
	return e.finish()
}

// next returns when the next thing happens: an engine event or a cloud event.
func (e *engine) next() (time.Time, bool) {
	t, ok := e.q.peek()
	if ct, cok := e.cloud.NextEvent(); cok && (!ok || ct.Before(t)) {
		t, ok = ct, true
	}
	return t, ok
}

// done reports whether the run is over: every job arrived and completed,
// and the pool is back at its floor with nothing in flight.
func (e *engine) done() bool {
	return e.nextJob == len(e.w.Jobs) && e.queued == 0 && e.running == 0 && e.settled && !e.ctlDirty &&
		e.billed <= e.pcfg.Nodes.Min && e.desired <= e.pcfg.Nodes.Min
}

// step processes everything that happens at time t.
func (e *engine) step(ctx context.Context, t time.Time) error {
	cloudDue := false
	if ct, ok := e.cloud.NextEvent(); ok && !ct.After(t) {
		cloudDue = true
	}
	if t.After(e.now) {
		if from := maxTime(e.now, Origin); t.After(from) {
			h := t.Sub(from).Hours()
			e.idleHours += h * float64(len(e.idle))
			e.clusterHours += h * float64(len(e.byMachine))
		}
		e.clk.Advance(t.Sub(e.now))
		e.now = t
	}
	e.res.Steps++
	tick, wake := false, false
	for {
		at, ok := e.q.peek()
		if !ok || at.After(t) {
			break
		}
		ev := e.q.pop()
		switch ev.kind {
		case evArrival:
			e.arrive()
		case evCompletion:
			e.complete(ev.grp, ev.gen)
		case evTick:
			if ev.gen == e.tickGen {
				tick, e.tickAt = true, time.Time{}
			}
		case evWake:
			if ev.gen == e.wakeGen {
				wake, e.wakeAt = true, time.Time{}
			}
		}
	}
	if cloudDue {
		e.ctlDirty = true // the controller sees it on its next tick
	}
	if cloudDue || e.resync {
		e.syncMachines()
	}
	if tick {
		if err := e.ctl.Tick(ctx); err != nil {
			return fmt.Errorf("controller tick at %s: %w", e.rel(), err)
		}
		e.ctlDirty = false
		e.afterController()
		e.syncTracked()
	}
	if e.consolidationDue() {
		e.consolidate()
	}
	if e.placeable && e.queued > 0 {
		e.place()
	}
	e.placeable = false
	sync := e.reportBusy()
	if e.changed || wake {
		sync = e.evaluate() || sync
	}
	if sync {
		if err := e.ctl.Sync(ctx); err != nil {
			return fmt.Errorf("controller sync at %s: %w", e.rel(), err)
		}
		e.afterController()
		e.syncTracked()
		// A Sync may drain, unbind or delete nodes; what it freed is
		// seen by the next evaluation.
		if e.placeable && e.queued > 0 {
			e.place()
			e.placeable = false
			if e.reportBusy() {
				if err := e.ctl.Sync(ctx); err != nil {
					return fmt.Errorf("controller sync at %s: %w", e.rel(), err)
				}
				e.afterController()
			}
		}
	}
	if err := e.check(); err != nil {
		return err
	}
	e.armTick()
	e.armWake()
	e.record()
	return nil
}

// rel formats the virtual time as an offset from the trace origin.
func (e *engine) rel() string { return e.now.Sub(Origin).String() }

// waited says whether an instance of job starting (or still queued) now
// counts in the wait figures: every instance submitted in the trace, and
// an instance of the initial load that was not running by the origin (the
// pool left it waiting at the start of the replay).
func (e *engine) waited(job *trace.Job) bool {
	return !job.Preexisting || e.now.After(Origin)
}

// waitFrom is when job's wait starts counting: its submit time, or the
// origin for the initial load (the warm-up before it is the pool's to
// boot in).
func (e *engine) waitFrom(job *trace.Job) time.Time {
	if job.Preexisting {
		return Origin
	}
	return Origin.Add(job.Submit)
}

// arrival returns when job j arrives: its submit time, or the warm-up's
// start for the initial load.
func (e *engine) arrival(j int) time.Time {
	if e.w.Jobs[j].Preexisting {
		return e.start
	}
	return Origin.Add(e.w.Jobs[j].Submit)
}

// syncMachines looks at the machines in flight after the cloud changed: a
// machine that reached Configured joins the scheduler (its agent
// registered); a machine that is gone stops being billed, and when it was
// a node (a spot reclaim or a loss) the node leaves the scheduler and its
// instances are interrupted and queued again. Only machines in flight are
// watched (launched, leaving, or spot nodes that may be reclaimed), so a
// look costs nothing for the steady nodes.
func (e *engine) syncMachines() {
	if len(e.tracking) == 0 {
		e.resync = false
		e.lookAgain = e.lookAgain[:0]
		if e.watched {
			e.cloud.ResetChanges()
		}
		return
	}
	if !e.watched || e.resync {
		e.syncAll()
		return
	}
	// Without injected API errors a Get draws no randomness, and a machine
	// the cloud noted no change of reads as it did the last time: only the
	// machines that changed, and those newly watched or whose node left,
	// are looked at, in the order a look at every one would take them.
	e.noted = e.cloud.TakeChanges(e.noted)
	cand := e.cand[:0]
	for _, ids := range [][]string{e.noted, e.lookAgain} {
		for _, id := range ids {
			if st, ok := e.tracking[id]; ok {
				cand = append(cand, trackEntry{id: id, seq: st.seq})
			}
		}
	}
	clear(e.lookAgain)
	e.lookAgain = e.lookAgain[:0]
	slices.SortFunc(cand, func(a, b trackEntry) int { return cmp.Compare(a.seq, b.seq) })
	for i, c := range cand {
		if i > 0 && cand[i-1].seq == c.seq {
			continue
		}
		if st, ok := e.tracking[c.id]; ok && st.seq == c.seq {
			e.look(c.id)
		}
	}
	clear(cand)
	e.cand = cand[:0]
	if stale := len(e.tracked) - len(e.tracking); stale > 64 && stale > len(e.tracking) {
		e.tracked = slices.DeleteFunc(e.tracked, func(t trackEntry) bool { return !e.live(t) })
	}
}

// syncAll looks at every machine in flight, in the order first seen (the
// way with injected API errors, where every call draws randomness).
func (e *engine) syncAll() {
	e.resync = false
	keep := e.tracked[:0]
	for _, t := range e.tracked {
		if e.live(t) && e.look(t.id) {
			keep = append(keep, t)
		}
	}
	clear(e.tracked[len(keep):])
	e.tracked = keep
}

// live reports whether a tracked entry still stands for a watched machine.
func (e *engine) live(t trackEntry) bool {
	st, ok := e.tracking[t.id]
	return ok && st.seq == t.seq
}

// look gets one watched machine and acts on what it sees; it reports
// whether the machine stays watched.
func (e *engine) look(id string) bool {
	m, err := e.cloud.GetShared(context.Background(), id)
	switch {
	case provider.IsNotFound(err):
		delete(e.tracking, id)
		e.billed--
		e.ctlDirty = true
		if n := e.byMachine[id]; n != nil {
			e.leave(n, true)
		}
		return false
	case err != nil:
		// The simulated cloud injects errors on reads too: look
		// again on the next step.
		e.resync = true
		return true
	}
	if st := e.tracking[id]; st.state != m.State || st.reclaim != m.ReclaimAt {
		// Transitions may happen inside any call to the cloud (an
		// instant one is applied by the next call): whatever changed,
		// the controller sees on its next tick.
		st.state, st.reclaim = m.State, m.ReclaimAt
		e.tracking[id] = st
		e.ctlDirty = true
	}
	switch {
	case m.State == provider.Configured && e.byMachine[id] == nil:
		e.join(&m)
		if e.offs[m.Offering].InterruptionProbability == 0 {
			delete(e.tracking, id)
			return false
		}
	}
	return true
}

// syncTracked looks at the machines in flight after the controller acted:
// an instant transition it started is applied by the next call.
func (e *engine) syncTracked() {
	if len(e.tracking) > 0 {
		e.syncMachines()
	}
}

// track watches a machine until it joins or is gone.
func (e *engine) track(id string) {
	if _, ok := e.tracking[id]; !ok {
		e.trackSeq++
		e.tracking[id] = seenState{seq: e.trackSeq}
		e.tracked = append(e.tracked, trackEntry{id: id, seq: e.trackSeq})
		e.lookAgain = append(e.lookAgain, id)
	}
}

// seenState is what the engine last saw of a tracked machine, and its
// place in the order of tracked.
type seenState struct {
	state   provider.State
	reclaim time.Time
	seq     uint64
}

// trackEntry is a machine in the order first watched; it stands for the
// machine while seq is the one of its seenState (a machine no longer
// watched, or watched again since, leaves a stale entry).
type trackEntry struct {
	id  string
	seq uint64
}

func (e *engine) node(ord int) *node {
	if ord < 0 || ord >= len(e.nodes) {
		return nil
	}
	return e.nodes[ord]
}

// ordinalOf parses the ordinal out of a controller machine id
// "<pool>-<ordinal>-<serial>".
func ordinalOf(id, pool string) (int, bool) {
	rest, ok := strings.CutPrefix(id, pool+"-")
	if !ok {
		return 0, false
	}
	ord, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(ord)
	return n, err == nil && n >= 0
}

// reportBusy tells the controller about nodes whose busy state changed;
// it reports whether there is something to sync.
func (e *engine) reportBusy() bool {
	if len(e.busyDirty) == 0 {
		return false
	}
	// Only nodes whose busy state or join changed can need a report; they
	// are reported in ordinal order, as a pass over every node would.
	slices.SortFunc(e.busyDirty, func(a, b *node) int { return cmp.Compare(a.ordinal, b.ordinal) })
	any := false
	for i, n := range e.busyDirty {
		if i > 0 && e.busyDirty[i-1] == n {
			continue
		}
		if e.node(n.ordinal) != n || !n.ctlJoined || n.told == n.busy() {
			continue
		}
		n.told = n.busy()
		e.ctl.ReportBusy(reconcile.NodeID(n.ordinal), n.told)
		any = true
	}
	clear(e.busyDirty)
	e.busyDirty = e.busyDirty[:0]
	return any
}

// evaluate runs the policy on the current pressure; it reports whether the
// desired count changed (and was handed to the controller).
//
// The live loop (autoscale) evaluates the policy on every report and, in
// between, on a tick of EvaluateEvery that replays the last report; the
// engine evaluates only when the pressure changes or the policy's state
// calls for it (armWake), and between two evaluations the pressure is the
// same. The one state a replayed report changes is the time the pool was
// last seen busy (skyward's LastBusy, its idle timeout's start): when the
// previous evaluation saw work, the ticks in between saw it too, so
// LastBusy is moved to the last of them before now. Without that, a pool
// that emptied long after its last change looked idle since that change,
// and skyward released it up to a whole idle timeout early.
func (e *engine) evaluate() bool {
	e.changed = false
	pressure := e.pressure()
	if lb := e.state.LastBusy; e.evalBusy && lb.Equal(e.lastEval) {
		if k := (e.now.Sub(lb) - 1) / e.every; k > 0 {
			e.state.LastBusy = lb.Add(k * e.every)
		}
	}
	d := e.pol.Decide(policy.Input{Now: e.now, Desired: e.desired, Pressure: pressure, State: e.state,
		Unavailable: e.ctl.Unavailable(e.now), Booting: e.ctl.Booting()})
	e.lastEval = e.now
	e.evalBusy = !d.State.LastBusy.IsZero() && (pressure.Queued() > 0 || pressure.Inflight() > 0)
	e.state = d.State
	e.recheck = d.Recheck
	if d.Desired == e.desired {
		return false
	}
	e.desired = d.Desired
	e.res.ScaleEvents++
	e.ctl.SetDesired(d)
	return true
}

// afterController reads the controller's status: which nodes its
// reconciler knows as joined, and whether the pool is settled.
func (e *engine) afterController() {
	st := e.ctl.Summary()
	// Settled: a tick would change nothing. Nothing launches, drains or
	// is being deleted, and the pool has its desired size, or more when
	// every excess node runs work: in the immediate scale-down mode the
	// reconciler drains a node the moment it is reported idle (a Sync), so
	// only deletion marks (ScaleDownDelay) need ticks to come due.
	idle := st.Pending == 0 && st.Draining == 0 && len(st.Deleting) == 0
	e.settled = idle && (st.Desired == st.Current || st.Desired < st.Current && !e.marks)
	if e.unjoined == 0 {
		// Every node the scheduler has is joined to the reconciler.
		clear(e.joining)
		e.joining = e.joining[:0]
		return
	}
	// Only the nodes not yet joined to the reconciler are looked up.
	keep := e.joining[:0]
	for _, n := range e.joining {
		if e.byMachine[n.machine] != n || n.ctlJoined {
			continue // gone, or joined
		}
		if ns, ok := e.ctl.Node(reconcile.NodeID(n.ordinal)); ok && ns.Joined && ns.MachineID == n.machine {
			n.ctlJoined = true
			n.told = false // the reconciler takes a new node as idle
			e.unjoined--
			e.busyDirty = append(e.busyDirty, n)
			continue
		}
		keep = append(keep, n)
	}
	clear(e.joining[len(keep):])
	e.joining = keep
}

// armTick schedules the controller's next reconcile tick, on the grid of
// the reconcile interval, while anything is in flight or the cloud changed
// since the last tick. A settled pool's ticks would change nothing.
func (e *engine) armTick() {
	if e.settled && !e.ctlDirty {
		return
	}
	every := e.cfg.Pool.ReconcileEvery()
	k := e.now.Sub(Origin)/every + 1
	at := Origin.Add(k * every)
	if !e.tickAt.IsZero() && !at.Before(e.tickAt) {
		return
	}
	e.tickGen++
	e.tickAt = at
	e.q.push(event{at: at, kind: evTick, gen: e.tickGen})
}

// armWake schedules the next evaluation the policy's state and the nodes'
// idle times call for: the end of a batch window, a cooldown, an idle
// timeout or a metric period. Evaluations in between see no change of
// pressure and are not needed.
func (e *engine) armWake() {
	c := &e.pcfg
	st := &e.state
	var best time.Time
	add := func(t time.Time) {
		if t.After(e.now) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !st.PendingSince.IsZero() {
		add(st.PendingSince.Add(c.BatchWindow))
	}
	if !st.LastScale.IsZero() {
		add(st.LastScale.Add(c.Cooldown))
	}
	if !st.LastBusy.IsZero() {
		add(st.LastBusy.Add(c.IdleTimeout + time.Nanosecond))
	}
	if !st.LastDatapoint.IsZero() {
		add(st.LastDatapoint.Add(c.MetricPeriod))
	}
	if !e.recheck.IsZero() {
		add(e.recheck)
	}
	add(e.nextConsolidation())
	for _, n := range e.idle {
		add(n.idleSince.Add(c.IdleTimeout))
	}
	if best.IsZero() || best.Equal(e.wakeAt) {
		return
	}
	e.wakeGen++
	e.wakeAt = best
	e.q.push(event{at: best, kind: evWake, gen: e.wakeGen})
}

// Busy reports whether a node runs work (controller.Workload).
func (e *engine) Busy(_ context.Context, n controller.Node) (bool, error) {
	nd := e.byMachine[n.MachineID]
	return nd != nil && nd.busy(), nil
}

var _ controller.Workload = (*engine)(nil)

// observed is the simulated cloud as the controller sees it, with the
// engine watching the calls that take nodes out of the cluster.
type observed struct {
	*cloudsim.Cloud
	e     *engine
	bufs  [2][]provider.Machine // the last two lists
	cur   int                   // which of them the controller holds
	token uint64                // the cloud's token for bufs[cur]
}

var _ provider.Provider = (*observed)(nil)

// AnswersInline tells the controller that the simulated cloud answers on
// the caller's goroutine without blocking: its calls need no call timeout.
func (o *observed) AnswersInline() bool { return true }

// List lists without copying labels and bootstrap data: the controller
// only reads them (the same calls and injected errors as Cloud.List). The
// list the controller holds is updated in place when only machines' states
// changed since (Cloud.ListSharedUpdate: a pool of thousands of machines
// is listed every tick, and few change between two ticks); otherwise the
// other of the two latest lists' slices is reused: the controller reads a
// list until it takes the next one, never after.
func (o *observed) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	next := 1 - o.cur
	list, token, inPlace, err := o.Cloud.ListSharedUpdate(ctx, f, o.bufs[o.cur], o.token, o.bufs[next])
	if err != nil {
		return nil, err
	}
	o.token = token
	if !inPlace {
		o.bufs[next], o.cur = list, next
	}
	return list, nil
}

// Create counts launches.
func (o *observed) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	ack, err := o.Cloud.Create(ctx, req)
	if err == nil && !ack.Replayed {
		o.e.res.Machines++
		o.e.billed++
		o.e.track(req.MachineID)
	}
	return ack, err
}

// Drain unbinds a machine: its node leaves the scheduler. The controller
// drains only nodes the workload reports empty; a node with work here is
// an invariant violation.
func (o *observed) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	ack, err := o.Cloud.Drain(ctx, req)
	if err == nil {
		o.e.track(req.MachineID)
		if n := o.e.byMachine[req.MachineID]; n != nil {
			o.e.leave(n, false)
		}
	}
	return ack, err
}

// Delete releases a machine: its node leaves the scheduler. Work on a
// machine with a spot interruption notice is interrupted; work on any
// other is disrupted by scale-down, an invariant violation.
func (o *observed) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	reclaimed := false
	if m, err := o.Cloud.GetShared(ctx, req.MachineID); err == nil && !m.ReclaimAt.IsZero() {
		reclaimed = true
	}
	ack, err := o.Cloud.Delete(ctx, req)
	if err == nil {
		o.e.track(req.MachineID)
		if n := o.e.byMachine[req.MachineID]; n != nil {
			o.e.leave(n, reclaimed)
		}
	}
	return ack, err
}

// violation records a broken invariant; Run fails with ErrInvariant.
func (e *engine) violation(format string, args ...any) {
	if len(e.violations) < 20 {
		e.violations = append(e.violations, fmt.Sprintf("at %s: ", e.rel())+fmt.Sprintf(format, args...))
	}
}

// demandNodes expresses an amount of resources in nodes of the pool's
// largest shape: the largest share over the dimensions.
func (e *engine) demandNodes(r capacity.Resources) float64 {
	node := e.cfg.largestNode()
	share := 0.0
	for _, d := range [][2]int64{{r.MilliCPU, node.MilliCPU}, {r.Memory, node.Memory}, {r.GPUs, node.GPUs}} {
		if d[1] > 0 {
			share = max(share, float64(d[0])/float64(d[1]))
		}
	}
	return share
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
