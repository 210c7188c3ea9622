package sim

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/consolidate"
	"github.com/tide-project/tide/internal/policy"
)

// consolidation is a run's consolidation: the jobs that may move
// (WorkloadOptions.Restartable), the pool's consolidate.Config, and the
// nodes it emptied. The engine evaluates consolidate.Decide every
// Config.Every while work runs, as a pool's controller does live, and
// carries out each move at once: the node is cordoned and its groups are
// queued again (counted as moved, with the work they lost, never as
// disrupted); the emptied node is then an idle node that the policy
// releases and the controller drains as any other. One that scale-down
// keeps (the floor, or another idle node went first) serves again after a
// grace of a few periods.
type consolidation struct {
	cfg         consolidate.Config
	restartable []bool // by job
	due         time.Time
	moved       map[*node]time.Time
	grace       time.Duration
	// windows: some budget opens and closes with the time of day.
	windows bool
	// quiet is the engine's signature at the last pass that moved
	// nothing, and quietOK whether it is set: while the signature stays
	// the same nothing was placed, stopped, joined or removed, so a pass
	// would find nothing either (the lost work only grows), and none is
	// due until it changes (unless a budget window may open).
	quiet   [6]int
	quietOK bool
	// Scratch.
	in  consolidate.Input
	buf []consolidate.Instance
}

// signature changes whenever a node's work or the node set changes.
func (e *engine) signature() [6]int {
	return [6]int{e.running, e.finished, e.queued, e.billed, e.res.Machines, e.res.Interrupted + e.res.Consolidated}
}

// quiet reports whether a pass would find what the last one found: nothing.
func (e *engine) quiet() bool {
	c := e.cons
	return c.quietOK && !c.windows && c.quiet == e.signature() && len(c.moved) == 0
}

// newConsolidation returns the run's consolidation, or nil when nothing
// can move: no restartable work, or a policy that does not consolidate
// (the seeds; the karpenter peer consolidates by its own rule).
func newConsolidation(cfg *Config, w *Workload, pcfg *policy.Config) (*consolidation, error) {
	if cfg.Workload.Restartable <= 0 {
		return nil, nil
	}
	cc, err := cfg.Pool.Consolidation()
	if err != nil {
		return nil, err
	}
	switch pcfg.Policy {
	case policy.Tide:
	case policy.Karpenter:
		cc = consolidate.Karpenter()
	default:
		return nil, nil
	}
	if !cc.Enabled {
		return nil, nil
	}
	c := &consolidation{cfg: cc, restartable: make([]bool, len(w.Jobs)), moved: map[*node]time.Time{},
		grace: 3*cc.Every + 2*pcfg.IdleTimeout + 2*cfg.Pool.ReconcileEvery()}
	for _, b := range cc.Budgets {
		c.windows = c.windows || len(b.Windows) > 0
	}
	any := false
	for i := range w.Jobs {
		c.restartable[i] = restartable(w.Jobs[i].ID, cfg.Workload.Restartable)
		any = any || c.restartable[i]
	}
	if !any {
		return nil, nil
	}
	return c, nil
}

// consolidate runs one consolidation pass at e.now.
func (e *engine) consolidate() {
	c := e.cons
	c.due = e.now.Add(c.cfg.Every)
	c.quietOK = false
	disrupting := 0
	for n, at := range c.moved {
		switch {
		case e.byMachine[n.machine] != n:
			delete(c.moved, n) // gone
		case !n.busy() && e.now.Sub(at) > c.grace:
			// Kept by scale-down (the pool's floor, or another idle node
			// went first): serve again.
			delete(c.moved, n)
			if n.cordoned {
				n.cordoned = false
				e.reindex(n)
				e.placeable = true
			}
		default:
			disrupting++ // emptied, on its way out
		}
	}
	if e.queued > 0 {
		return // the free space is the waiting work's (Decide says the same)
	}
	sig := e.signature()
	candidates := 0
	for _, n := range e.nodes {
		if n != nil && e.movable(n) {
			candidates++
		}
	}
	if candidates == 0 {
		c.quiet, c.quietOK = sig, true
		return
	}
	for _, ns := range e.ctl.Status().Nodes { // as the live consolidator counts them
		if ns.Draining {
			disrupting++
		}
	}
	in := &c.in
	*in = consolidate.Input{Now: e.now, Disrupting: disrupting, MinNodes: e.pcfg.Nodes.Min, Nodes: in.Nodes[:0]}
	// One backing array for every node's entries, reused between passes.
	buf := c.buf[:0]
	offering, price := "", 0.0 // the last node's, looked up once per run of one offering
	for _, n := range e.nodes {
		if n == nil {
			continue
		}
		if n.offering != offering {
			offering, price = n.offering, e.offs[n.offering].PricePerHour
		}
		cn := consolidate.Node{ID: n.machine, Ordinal: n.ordinal, Capacity: n.capacity,
			PricePerHour: price, Cordoned: n.cordoned,
			Protected: e.pcfg.ProtectFirstNode && n.ordinal == 0}
		from := len(buf)
		if e.movable(n) {
			for _, g := range n.groups {
				gr := &e.groups[g]
				buf = append(buf, consolidate.Instance{ID: strconv.Itoa(int(g)),
					Requests: e.shapes[gr.shape], Restartable: true, StartedAt: gr.started, Count: int(gr.count), Moved: gr.moved})
			}
		} else if n.busy() {
			// Only its free space matters: one entry for what it holds.
			buf = append(buf, consolidate.Instance{ID: "held", Requests: n.alloc})
		}
		if len(buf) > from {
			cn.Instances = buf[from:len(buf):len(buf)]
		}
		in.Nodes = append(in.Nodes, cn)
	}
	c.buf = buf
	d := consolidate.Decide(c.cfg, *in)
	if len(d.Moves) == 0 {
		c.quiet, c.quietOK = sig, true
		return
	}
	for _, m := range d.Moves {
		if n := e.byMachine[m.Node]; n != nil {
			e.moveOff(n, m)
		}
	}
}

// movable reports whether n is worth offering to Decide: schedulable,
// busy, and every group on it restartable.
func (e *engine) movable(n *node) bool {
	if n.cordoned || !n.busy() {
		return false
	}
	for _, g := range n.groups {
		if gr := &e.groups[g]; !e.cons.restartable[gr.job] || gr.moved {
			return false
		}
	}
	return true
}

// moveOff carries out a move: n is cordoned and its groups are stopped,
// counted as moved with the work they lose, and started again at once on
// the nodes Decide planned them on (m.Targets), as the head does live:
// placing them by the scheduler's score instead would spread them over
// part-used nodes, which then hold work that has moved once and may not
// move again. What no longer fits its target (it cannot happen within one
// step, but is checked) is queued for the scheduler. A group of work that
// may not move is an invariant violation (Decide never proposes one).
func (e *engine) moveOff(n *node, m consolidate.Move) {
	n.cordoned = true
	e.reindex(n)
	gs := slices.Clone(n.groups)
	slices.SortFunc(gs, func(a, b int32) int {
		ga, gb := &e.groups[a], &e.groups[b]
		return cmp.Or(ga.started.Compare(gb.started), cmp.Compare(ga.job, gb.job))
	})
	for _, g := range gs {
		gr := &e.groups[g]
		if !e.cons.restartable[gr.job] {
			e.violation("consolidation moved %d instances of job %d, which is not restartable, off node %d", gr.count, gr.job, n.ordinal)
			e.res.Disrupted += int(gr.count)
		}
		e.res.Moved += int(gr.count)
		e.res.LostWorkHours += max(e.now.Sub(gr.started), 0).Hours() * float64(gr.count)
		e.stop(g)
		gr.ran, gr.moved = true, true
		e.enqueue(g)
	}
	for _, t := range m.Targets {
		g64, err := strconv.ParseInt(t.Instance, 10, 32)
		if err != nil {
			continue
		}
		g := int32(g64)
		dst := e.byMachine[t.Node]
		gr := &e.groups[g]
		if dst == nil || !dst.schedulable() || gr.state != instQueued || t.Count <= 0 || int32(t.Count) > gr.count ||
			!e.shapes[gr.shape].Scale(int64(t.Count)).Fits(dst.capacity.Sub(dst.alloc)) {
			continue // left queued: the scheduler places it
		}
		e.begin(g, dst, int32(t.Count))
	}
	e.res.Consolidated++
	e.res.ExpectedSaving += m.Saving
	e.cons.moved[n] = e.now
}

// consolidationDue reports whether a pass is due at e.now.
func (e *engine) consolidationDue() bool {
	return e.cons != nil && e.running > 0 && !e.now.Before(e.cons.due) && !e.quiet()
}

// nextConsolidation is when the next pass is due (zero when none is
// needed: nothing runs).
func (e *engine) nextConsolidation() time.Time {
	if e.cons == nil || e.running == 0 || e.quiet() {
		return time.Time{}
	}
	return e.cons.due
}
