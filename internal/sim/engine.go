package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider"
	cloudsim "github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/scheduler"
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
}

// Run replays the workload on the pool under one policy: the same policy,
// reconciler, controller and scheduler code as the live system, on virtual
// time, against the simulated cloud. It returns the run's figures.
//
// Jobs flagged Preexisting (running before the trace's origin) are the
// initial load: they arrive a warm-up before the origin (long enough for
// the pool to boot: the longest boot and configure plus two reconcile
// ticks and a minute), run until their trace end, and count in no wait
// figure; billing and utilization count from the origin on.
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

	q        queue
	start    time.Time // the warm-up's start, or Origin
	doneAt   time.Time // when every instance had completed
	now      time.Time
	nextJob  int
	inst     []instance
	shapes   []capacity.Resources
	shapeOf  []int32 // job → shape
	queues   []shapeQueue
	queued   int
	running  int
	finished int
	seq      int64

	nodes     []*node // joined nodes by ordinal
	byMachine map[string]*node
	billed    int // machines the cloud bills now

	// Controller and policy.
	desired   int
	state     policy.State
	settled   bool
	ctlDirty  bool     // the cloud changed since the last tick
	resync    bool     // the last look at the cloud failed
	tracked   []string // machines in flight, in the order first seen
	tracking  map[string]seenState
	tickAt    time.Time // armed tick; zero when none
	tickGen   uint64
	wakeAt    time.Time // armed policy wake-up; zero when none
	wakeGen   uint64
	marks     bool // the reconciler scales down through deletion marks
	changed   bool // the pressure changed since the last evaluation
	placeable bool // placement may succeed since the last Place
	touched   []*node

	// recheck is the last decision's Recheck (the peer policies' loops).
	recheck time.Time

	// Scratch for Place and the pressure report.
	workers []scheduler.Worker
	placed  []scheduler.Instance
	pending []scheduler.Instance
	report  capacity.Pressure

	res        Result
	waits      []float64
	usedSec    [3]float64 // resource-seconds used: millicore-s, byte-s, GPU-s
	violations []string
	lastProg   float64
	series     seriesRecorder
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
		offs: map[string]capacity.Offering{}, byMachine: map[string]*node{}, tracking: map[string]seenState{}, now: start, start: start}
	for _, o := range cfg.Pool.Offerings {
		e.offs[o.Name()] = o
	}
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
	e.inst = make([]instance, 0, w.Instances)
	e.waits = make([]float64, 0, w.Instances)
	e.res = Result{Policy: pcfg.Policy, Seed: opts.Seed, Instances: w.Instances}
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
			e.complete(ev.inst, ev.run)
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

// arrive queues the replicas of the next job and schedules the one after.
func (e *engine) arrive() {
	j := e.nextJob
	e.nextJob++
	job := &e.w.Jobs[j]
	for range job.Replicas {
		i := int32(len(e.inst))
		e.inst = append(e.inst, instance{id: strconv.Itoa(int(i)), job: int32(j), shape: e.shapeOf[j]})
		e.enqueue(i)
	}
	if e.nextJob < len(e.w.Jobs) {
		e.q.push(event{at: e.arrival(e.nextJob), kind: evArrival})
	}
}

// arrival returns when job j arrives: its submit time, or the warm-up's
// start for the initial load.
func (e *engine) arrival(j int) time.Time {
	if e.w.Jobs[j].Preexisting {
		return e.start
	}
	return Origin.Add(e.w.Jobs[j].Submit)
}

func (e *engine) enqueue(i int32) {
	in := &e.inst[i]
	e.seq++
	in.seq, in.queued, in.state = e.seq, e.now, instQueued
	e.queues[in.shape].push(i)
	e.queued++
	e.changed, e.placeable = true, true
}

// complete ends a run of instance i.
func (e *engine) complete(i, run int32) {
	in := &e.inst[i]
	if in.state != instRunning || in.run != run {
		return // the run was cut short (interruption) and restarted
	}
	e.stop(in)
	in.state = instDone
	e.finished++
}

// stop takes a running instance off its node and accounts the time it ran.
func (e *engine) stop(in *instance) {
	n := in.node
	ran := e.ran(in)
	r := e.shapes[in.shape]
	e.usedSec[0] += ran * float64(r.MilliCPU)
	e.usedSec[1] += ran * float64(r.Memory)
	e.usedSec[2] += ran * float64(r.GPUs)
	last := len(n.running) - 1
	if in.pos != last {
		n.running[in.pos] = n.running[last]
		n.runIDs[in.pos] = n.runIDs[last]
		e.inst[n.runIDs[in.pos]].pos = in.pos
	}
	n.running = n.running[:last]
	n.runIDs = n.runIDs[:last]
	n.alloc = n.alloc.Sub(capacity.Resources{MilliCPU: r.MilliCPU, Memory: r.Memory, GPUs: int64(len(in.gpus))})
	for _, g := range in.gpus {
		n.gpuUsed[g] = false
	}
	if len(n.running) == 0 {
		n.idleSince = e.now
	}
	in.node, in.gpus = nil, nil
	e.running--
	e.changed, e.placeable = true, true
	e.touched = append(e.touched, n)
}

// ran returns how long a running instance has run since the origin.
func (e *engine) ran(in *instance) float64 {
	from := in.started
	if from.Before(Origin) {
		from = Origin
	}
	return max(e.now.Sub(from).Seconds(), 0)
}

// syncMachines looks at the machines in flight after the cloud changed: a
// machine that reached Configured joins the scheduler (its agent
// registered); a machine that is gone stops being billed, and when it was
// a node (a spot reclaim or a loss) the node leaves the scheduler and its
// instances are interrupted and queued again. Only machines in flight are
// watched (launched, leaving, or spot nodes that may be reclaimed), so a
// look costs nothing for the steady nodes.
func (e *engine) syncMachines() {
	e.resync = false
	keep := e.tracked[:0]
	for _, id := range e.tracked {
		m, err := e.cloud.Get(context.Background(), id)
		switch {
		case provider.IsNotFound(err):
			delete(e.tracking, id)
			e.billed--
			e.ctlDirty = true
			if n := e.byMachine[id]; n != nil {
				e.leave(n, true)
			}
			continue
		case err != nil:
			// The simulated cloud injects errors on reads too: look
			// again on the next step.
			e.resync = true
			keep = append(keep, id)
			continue
		}
		if seen := (seenState{m.State, m.ReclaimAt}); e.tracking[id] != seen {
			// Transitions may happen inside any call to the cloud (an
			// instant one is applied by the next call): whatever changed,
			// the controller sees on its next tick.
			e.tracking[id] = seen
			e.ctlDirty = true
		}
		switch {
		case m.State == provider.Configured && e.byMachine[id] == nil:
			e.join(&m)
			if e.offs[m.Offering].InterruptionProbability == 0 {
				delete(e.tracking, id)
				continue
			}
		}
		keep = append(keep, id)
	}
	clear(e.tracked[len(keep):])
	e.tracked = keep
}

// syncTracked looks at the machines in flight after the controller acted:
// an instant transition it started is applied by the next call.
func (e *engine) syncTracked() {
	if len(e.tracked) > 0 {
		e.syncMachines()
	}
}

// track watches a machine until it joins or is gone.
func (e *engine) track(id string) {
	if _, ok := e.tracking[id]; !ok {
		e.tracking[id] = seenState{}
		e.tracked = append(e.tracked, id)
	}
}

// seenState is what the engine last saw of a tracked machine.
type seenState struct {
	state   provider.State
	reclaim time.Time
}

// join adds a machine's node to the scheduler.
func (e *engine) join(m *provider.Machine) {
	ord, ok := ordinalOf(m.ID, e.pool)
	if !ok {
		e.violation("machine %s joined with an id that names no ordinal", m.ID)
		return
	}
	res := e.offs[m.Offering].Resources
	n := &node{machine: m.ID, ordinal: ord, offering: m.Offering, capacity: res.Clone(),
		gpuUsed: make([]bool, max(res.GPUs, 0)), idleSince: e.now}
	if old := e.node(ord); old != nil {
		e.leave(old, true)
	}
	for len(e.nodes) <= ord {
		e.nodes = append(e.nodes, nil)
	}
	e.nodes[ord] = n
	e.byMachine[m.ID] = n
	e.changed, e.placeable = true, true
}

func (e *engine) node(ord int) *node {
	if ord < 0 || ord >= len(e.nodes) {
		return nil
	}
	return e.nodes[ord]
}

// leave removes a node from the scheduler. Its instances are stopped and
// queued again: counted as interrupted when the machine was reclaimed
// (interrupted true), as disrupted — an invariant violation — otherwise.
func (e *engine) leave(n *node, interrupted bool) {
	if e.byMachine[n.machine] != n {
		return
	}
	if k := len(n.running); k > 0 {
		if interrupted {
			e.res.Interrupted += k
		} else {
			e.res.Disrupted += k
			e.violation("node %d (machine %s) left the cluster by scale-down while running %d instances", n.ordinal, n.machine, k)
		}
		for len(n.running) > 0 {
			i := n.runIDs[len(n.runIDs)-1]
			e.stop(&e.inst[i])
			e.enqueue(i)
		}
	}
	delete(e.byMachine, n.machine)
	if e.node(n.ordinal) == n {
		e.nodes[n.ordinal] = nil
	}
	e.changed = true
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

// place runs the scheduler over the pending instances and starts what it
// assigns.
func (e *engine) place() {
	// Only instances that can possibly be placed are handed to Place:
	// per shape, at most one more than the free capacity could hold. The
	// scheduler places a shape's instances in FIFO order and, once one of a
	// shape does not fit, none after it, so the rest would change nothing.
	var maxFree, totalFree capacity.Resources
	workers, placed := e.workers[:0], e.placed[:0]
	for _, n := range e.nodes {
		if n == nil {
			continue
		}
		workers = append(workers, scheduler.Worker{Name: n.machine, Pool: e.pool, Ordinal: n.ordinal,
			Capacity: n.capacity, Schedulable: n.schedulable()})
		if !n.alloc.IsZero() {
			// The node's instances as one exclusive instance: the same
			// free CPU, memory and GPU indices, at a cost that does not
			// grow with the number of instances.
			placed = append(placed, scheduler.Instance{ID: n.machine, Pool: e.pool, Requests: n.alloc,
				Exclusive: true, GPUIndices: n.usedGPUs(), Worker: n.machine})
		}
		if n.schedulable() {
			free := n.capacity.Sub(n.alloc)
			maxFree = capacity.Resources{MilliCPU: max(maxFree.MilliCPU, free.MilliCPU), Memory: max(maxFree.Memory, free.Memory),
				GPUs: max(maxFree.GPUs, free.GPUs)}
			totalFree = totalFree.Add(free)
		}
	}
	e.workers, e.placed = workers, placed
	limits := make([]int, len(e.shapes))
	any := false
	for s := range e.shapes {
		if e.queues[s].n == 0 || !e.shapes[s].Fits(maxFree) {
			continue
		}
		limits[s] = fitCount(e.shapes[s], totalFree) + 1
		any = true
	}
	if !any {
		return
	}
	pending := e.pendingList(limits)
	res := scheduler.Place(workers, placed, pending, scheduler.Config{ReserveAfter: e.cfg.Scheduler.reserveAfter()}, e.now)
	for _, a := range res.Assignments {
		i, err := strconv.Atoi(a.InstanceID)
		if err != nil || i < 0 || i >= len(e.inst) {
			e.violation("scheduler assigned unknown instance %q", a.InstanceID)
			continue
		}
		e.begin(int32(i), a)
	}
}

// fitCount bounds how many instances of r fit into the total free space.
func fitCount(r, free capacity.Resources) int {
	n := math.MaxInt32
	for _, d := range [][2]int64{{r.MilliCPU, free.MilliCPU}, {r.Memory, free.Memory}, {r.GPUs, free.GPUs}} {
		if d[0] > 0 {
			n = min(n, int(d[1]/d[0]))
		}
	}
	return n
}

// pendingList merges the shape queues in FIFO order, at most limits[s]
// instances of shape s.
func (e *engine) pendingList(limits []int) []scheduler.Instance {
	type cursor struct {
		s, pos, left int
	}
	var cur []cursor
	for s, l := range limits {
		if l > 0 {
			q := &e.queues[s]
			cur = append(cur, cursor{s: s, pos: q.head, left: l})
		}
	}
	out := e.pending[:0]
	advance := func(c *cursor) (int32, bool) {
		q := &e.queues[c.s]
		for c.pos < len(q.items) {
			i := q.items[c.pos]
			if e.inst[i].state == instQueued {
				return i, true
			}
			c.pos++
		}
		return 0, false
	}
	for {
		best, bestSeq := -1, int64(math.MaxInt64)
		for k := range cur {
			c := &cur[k]
			if c.left == 0 {
				continue
			}
			i, ok := advance(c)
			if !ok {
				c.left = 0
				continue
			}
			if s := e.inst[i].seq; s < bestSeq {
				best, bestSeq = k, s
			}
		}
		if best < 0 {
			break
		}
		c := &cur[best]
		i := e.queues[c.s].items[c.pos]
		c.pos++
		c.left--
		in := &e.inst[i]
		out = append(out, scheduler.Instance{ID: in.id, Pool: e.pool, Requests: e.shapes[in.shape],
			Exclusive: true, QueuedAt: in.queued})
	}
	e.pending = out
	return out
}

// begin runs instance i as the scheduler assigned it.
func (e *engine) begin(i int32, a scheduler.Assignment) {
	in := &e.inst[i]
	n := e.byMachine[a.Worker]
	switch {
	case in.state != instQueued:
		e.violation("instance %s assigned while not pending", in.id)
		return
	case n == nil:
		e.violation("instance %s assigned to unknown worker %s", in.id, a.Worker)
		return
	case !n.schedulable():
		e.violation("instance %s assigned to cordoned node %d", in.id, n.ordinal)
	}
	r := e.shapes[in.shape]
	for _, g := range a.GPUIndices {
		if g < 0 || g >= len(n.gpuUsed) || n.gpuUsed[g] {
			e.violation("instance %s assigned GPU %d of node %d, which is taken or does not exist", in.id, g, n.ordinal)
			continue
		}
		n.gpuUsed[g] = true
	}
	in.gpus = slices.Clone(a.GPUIndices)
	n.alloc = n.alloc.Add(capacity.Resources{MilliCPU: r.MilliCPU, Memory: r.Memory, GPUs: int64(len(in.gpus))})
	in.pos = len(n.running)
	n.running = append(n.running, capacity.Instance{Requests: r})
	n.runIDs = append(n.runIDs, i)
	in.node, in.state = n, instRunning
	in.run++
	in.started = e.now
	q := &e.queues[in.shape]
	q.n--
	for q.head < len(q.items) && e.inst[q.items[q.head]].state != instQueued {
		q.head++
	}
	e.queued--
	e.running++
	job := &e.w.Jobs[in.job]
	end := e.now.Add(job.Duration)
	if job.Preexisting && e.now.Before(Origin) {
		end = Origin.Add(job.Duration) // the initial load runs to its trace end
	}
	if in.run == 1 && !job.Preexisting {
		e.waits = append(e.waits, e.now.Sub(Origin.Add(job.Submit)).Seconds())
	}
	e.q.push(event{at: end, kind: evCompletion, inst: i, run: in.run})
	e.changed = true
	e.touched = append(e.touched, n)
}

// reportBusy tells the controller about nodes whose busy state changed;
// it reports whether there is something to sync.
func (e *engine) reportBusy() bool {
	any := false
	for _, n := range e.nodes {
		if n == nil || !n.ctlJoined || n.told == n.busy() {
			continue
		}
		n.told = n.busy()
		e.ctl.ReportBusy(reconcile.NodeID(n.ordinal), n.told)
		any = true
	}
	return any
}

// evaluate runs the policy on the current pressure; it reports whether the
// desired count changed (and was handed to the controller).
func (e *engine) evaluate() bool {
	e.changed = false
	d := e.pol.Decide(policy.Input{Now: e.now, Desired: e.desired, Pressure: e.pressure(), State: e.state,
		Unavailable: e.ctl.Unavailable(e.now)})
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

// pressure builds the scheduler's report for the pool: the joined nodes by
// ordinal with what runs on them, and the pending instances grouped by
// shape in the order their oldest instance arrived, as scheduler.Place
// reports it.
func (e *engine) pressure() capacity.Pressure {
	p := &e.report
	p.Nodes = p.Nodes[:0]
	for _, n := range e.nodes {
		if n == nil {
			continue
		}
		cn := capacity.Node{ID: n.machine, Ordinal: n.ordinal, Resources: n.capacity, Running: n.running}
		if !n.busy() {
			cn.IdleSince = n.idleSince
		}
		p.Nodes = append(p.Nodes, cn)
	}
	p.Pending = p.Pending[:0]
	type head struct {
		s   int
		seq int64
	}
	var heads []head
	for s := range e.queues {
		q := &e.queues[s]
		if q.n == 0 {
			continue
		}
		for q.head < len(q.items) && e.inst[q.items[q.head]].state != instQueued {
			q.head++
		}
		heads = append(heads, head{s: s, seq: e.inst[q.items[q.head]].seq})
	}
	slices.SortFunc(heads, func(a, b head) int { return cmp.Compare(a.seq, b.seq) })
	for _, h := range heads {
		p.Pending = append(p.Pending, capacity.Pending{Requests: e.shapes[h.s], Count: e.queues[h.s].n})
	}
	return *p
}

// afterController reads the controller's status: which nodes its
// reconciler knows as joined, and whether the pool is settled.
func (e *engine) afterController() {
	st := e.ctl.Status()
	// Settled: a tick would change nothing. Nothing launches, drains or
	// is being deleted, and the pool has its desired size, or more when
	// every excess node runs work: in the immediate scale-down mode the
	// reconciler drains a node the moment it is reported idle (a Sync), so
	// only deletion marks (ScaleDownDelay) need ticks to come due.
	idle := st.Pending == 0 && st.Draining == 0 && len(st.Deleting) == 0
	e.settled = idle && (st.Desired == st.Current || st.Desired < st.Current && !e.marks)
	for _, ns := range st.Nodes {
		if !ns.Joined {
			continue
		}
		if n := e.byMachine[ns.MachineID]; n != nil && !n.ctlJoined {
			n.ctlJoined = true
			n.told = false // the reconciler takes a new node as idle
		}
	}
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
	for _, n := range e.nodes {
		if n != nil && !n.busy() {
			add(n.idleSince.Add(c.IdleTimeout))
		}
	}
	if best.IsZero() || best.Equal(e.wakeAt) {
		return
	}
	e.wakeGen++
	e.wakeAt = best
	e.q.push(event{at: best, kind: evWake, gen: e.wakeGen})
}

// Cordon stops placement on a node (controller.Workload).
func (e *engine) Cordon(_ context.Context, n controller.Node) error {
	if nd := e.byMachine[n.MachineID]; nd != nil && !nd.cordoned {
		nd.cordoned = true
		e.changed = true
	}
	return nil
}

// Uncordon resumes placement on a node (controller.Workload).
func (e *engine) Uncordon(_ context.Context, n controller.Node) error {
	if nd := e.byMachine[n.MachineID]; nd != nil && nd.cordoned {
		nd.cordoned = false
		e.changed, e.placeable = true, true
	}
	return nil
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
	e *engine
}

var _ provider.Provider = (*observed)(nil)

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
	if m, err := o.Cloud.Get(ctx, req.MachineID); err == nil && !m.ReclaimAt.IsZero() {
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

// check verifies the invariants on what the step touched (every node and
// counter with Options.Check): no node holds more than its capacity, a
// node's allocation is the sum of what runs on it, and the instance
// counts add up.
func (e *engine) check() error {
	nodes := e.touched
	if e.opts.Check {
		nodes = nodes[:0]
		for _, n := range e.nodes {
			if n != nil {
				nodes = append(nodes, n)
			}
		}
	}
	for _, n := range nodes {
		if !n.alloc.Fits(n.capacity) {
			e.violation("node %d (machine %s) allocates %s, more than its capacity %s", n.ordinal, n.machine, n.alloc, n.capacity)
		}
		if e.opts.Check {
			var sum capacity.Resources
			gpus := 0
			for _, r := range n.running {
				sum = sum.Add(capacity.Resources{MilliCPU: r.Requests.MilliCPU, Memory: r.Requests.Memory})
			}
			for _, id := range n.runIDs {
				in := &e.inst[id]
				gpus += len(in.gpus)
				if in.node != n || in.state != instRunning {
					e.violation("instance %s listed on node %d but not running there", in.id, n.ordinal)
				}
			}
			sum.GPUs = int64(gpus)
			if !sum.Equal(n.alloc) {
				e.violation("node %d allocates %s but runs %s", n.ordinal, n.alloc, sum)
			}
		}
	}
	e.touched = e.touched[:0]
	if e.opts.Check {
		q, r := 0, 0
		for i := range e.inst {
			switch e.inst[i].state {
			case instQueued:
				q++
			case instRunning:
				r++
			}
		}
		if q != e.queued || r != e.running {
			e.violation("counted %d queued and %d running instances, tracked %d and %d", q, r, e.queued, e.running)
		}
	}
	if len(e.violations) > 0 && e.opts.Check {
		return fmt.Errorf("%w: %s", ErrInvariant, strings.Join(e.violations, "; "))
	}
	return nil
}

// record adds the step to the series and reports progress.
func (e *engine) record() {
	if e.opts.Progress != nil && e.w.Horizon > 0 && !e.now.Before(Origin) {
		f := min(e.now.Sub(Origin).Seconds()/e.w.Horizon.Seconds(), 1)
		if f-e.lastProg >= 0.005 {
			e.lastProg = f
			e.opts.Progress(f)
		}
	}
	if e.series.width == 0 || e.now.Before(Origin) {
		return
	}
	joined := 0
	var demand capacity.Resources
	for _, n := range e.nodes {
		if n != nil {
			joined++
			demand = demand.Add(n.alloc)
		}
	}
	for s := range e.queues {
		if k := e.queues[s].n; k > 0 {
			demand = demand.Add(e.shapes[s].Scale(int64(k)))
		}
	}
	e.series.add(e.now.Sub(Origin), e.demandNodes(demand), joined, e.billed)
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

// finish computes the figures as of the end of the run.
func (e *engine) finish() (*Result, error) {
	r := &e.res
	r.End = e.now.Sub(Origin)
	for i := range e.inst {
		if e.inst[i].state == instRunning {
			in := &e.inst[i]
			ran := e.ran(in)
			s := e.shapes[in.shape]
			e.usedSec[0] += ran * float64(s.MilliCPU)
			e.usedSec[1] += ran * float64(s.Memory)
			e.usedSec[2] += ran * float64(s.GPUs)
		}
	}
	r.Unfinished = r.Instances - e.finished
	// Instances that never started waited at least until the end.
	for i := range e.inst {
		if job := &e.w.Jobs[e.inst[i].job]; e.inst[i].run == 0 && !job.Preexisting {
			e.waits = append(e.waits, max(e.now.Sub(Origin.Add(job.Submit)).Seconds(), 0))
		}
	}
	for j := e.nextJob; j < len(e.w.Jobs); j++ {
		if e.w.Jobs[j].Preexisting {
			continue
		}
		for range e.w.Jobs[j].Replicas {
			e.waits = append(e.waits, max(e.now.Sub(Origin.Add(e.w.Jobs[j].Submit)).Seconds(), 0))
		}
	}
	slices.Sort(e.waits)
	r.WaitP50, r.WaitP95, r.WaitP99 = percentile(e.waits, 50), percentile(e.waits, 95), percentile(e.waits, 99)
	r.WaitCurve = waitCurve(e.waits)
	if len(e.waits) > 0 {
		sum := 0.0
		for _, w := range e.waits {
			sum += w
		}
		r.WaitMean = sum / float64(len(e.waits))
	}

	led := e.cloud.Ledger()
	var capSec [3]float64
	for _, m := range led.Machines {
		// Billing counts from the origin: the warm-up's boots are the
		// initial fleet's, there before the trace began.
		from, to := m.Start, m.End
		if to.IsZero() {
			to = led.At
		}
		if from.Before(Origin) {
			from = Origin
		}
		sec := max(to.Sub(from).Seconds(), 0)
		o := e.offs[m.Offering]
		r.NodeHours += sec / 3600
		r.Cost += sec / 3600 * o.PricePerHour
		capSec[0] += sec * float64(o.Resources.MilliCPU)
		capSec[1] += sec * float64(o.Resources.Memory)
		capSec[2] += sec * float64(o.Resources.GPUs)
	}
	for d := range capSec {
		if capSec[d] > 0 && e.usedSec[d] > 0 {
			r.Utilization = max(r.Utilization, e.usedSec[d]/capSec[d])
		}
	}
	if dup := led.Duplicates(); len(dup) > 0 {
		e.violation("machines provisioned twice: %v", dup)
	}
	if r.Disrupted > 0 {
		e.violation("%d instances disrupted by scale-down", r.Disrupted)
	}
	r.Series = e.series.points
	if len(e.violations) > 0 {
		return r, fmt.Errorf("%w: %s", ErrInvariant, strings.Join(e.violations, "; "))
	}
	return r, nil
}

// percentile returns the nearest-rank p-th percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
