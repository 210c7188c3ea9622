package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/scheduler"
	"github.com/tide-project/tide/sdk/provider"
)

// This file keeps the work in counted groups: the instances of one job
// share shape, submit time and duration, so they are queued, placed,
// started, ended and billed together for as long as their fate is the
// same. A group splits when part of it is placed (each node's part runs
// as a group of its own); a node that leaves requeues its groups whole.

// newGroup returns a free group slot for count instances of job j.
func (e *engine) newGroup(j int32, count int32) int32 {
	var g int32
	if n := len(e.free); n > 0 {
		g = e.free[n-1]
		e.free = e.free[:n-1]
	} else {
		g = int32(len(e.groups))
		e.groups = append(e.groups, group{})
	}
	e.groups[g] = group{job: j, shape: e.shapeOf[j], count: count}
	return g
}

// release returns a finished group's slot.
func (e *engine) release(g int32) {
	e.groups[g] = group{}
	e.free = append(e.free, g)
}

// arrive queues the replicas of the next job and schedules the one after.
func (e *engine) arrive() {
	j := e.nextJob
	e.nextJob++
	job := &e.w.Jobs[j]
	if job.Parts > 1 {
		e.gangs[int32(j)] = &gangState{}
	}
	if e.opts.perInstance && !e.gangGroup(int32(j)) {
		for range job.Replicas {
			e.enqueue(e.newGroup(int32(j), 1))
		}
	} else {
		e.enqueue(e.newGroup(int32(j), int32(job.Replicas)))
	}
	if e.nextJob < len(e.w.Jobs) {
		e.q.push(event{at: e.arrival(e.nextJob), kind: evArrival})
	}
}

// enqueue puts group g at the back of its shape's queue.
func (e *engine) enqueue(g int32) {
	gr := &e.groups[g]
	gr.seq = e.seq + 1
	e.seq += int64(gr.count) // as many numbers as instances, as one by one
	gr.queued, gr.state, gr.node = e.now, instQueued, nil
	q := &e.queues[gr.shape]
	q.push(g, gr.seq)
	q.n += int(gr.count)
	e.queued += int(gr.count)
	e.changed, e.placeable = true, true
}

// valid reports whether a queue entry still stands for a queued group.
func (e *engine) valid(qe qentry) bool {
	g := &e.groups[qe.g]
	return g.state == instQueued && g.seq == qe.seq
}

// head returns the oldest valid entry of shape s's queue, dropping stale
// ones.
func (e *engine) head(s int) (qentry, bool) {
	q := &e.queues[s]
	for q.head < len(q.items) {
		if qe := q.items[q.head]; e.valid(qe) {
			return qe, true
		}
		q.head++
	}
	return qentry{}, false
}

// complete ends a run of group g.
func (e *engine) complete(g int32, run uint64) {
	gr := &e.groups[g]
	if gr.state != instRunning || gr.run != run {
		return // the run was cut short (interruption) and restarted
	}
	k := int(gr.count)
	e.stop(g)
	if st := e.gangs[gr.job]; st != nil {
		st.done += gr.count
	}
	e.finished += k
	e.finishedRes = e.finishedRes.Add(e.shapes[gr.shape].Scale(int64(k)))
	e.release(g)
}

// stop takes a running group off its node and accounts the time it ran.
func (e *engine) stop(g int32) {
	gr := &e.groups[g]
	e.gangRunning(gr.job, -gr.count)
	n := gr.node
	ran := e.ran(gr) * float64(gr.count)
	r := e.shapes[gr.shape]
	e.usedSec[0] += ran * float64(r.MilliCPU)
	e.usedSec[1] += ran * float64(r.Memory)
	e.usedSec[2] += ran * float64(r.GPUs)
	last := int32(len(n.groups) - 1)
	if gr.pos != last {
		moved := n.groups[last]
		n.groups[gr.pos] = moved
		e.groups[moved].pos = gr.pos
	}
	n.groups = n.groups[:last]
	n.alloc = n.alloc.Sub(r.Scale(int64(gr.count)))
	n.ninst -= int(gr.count)
	e.markStale(n)
	if n.ninst == 0 {
		n.idleSince = e.now
		e.setIdle(n, true)
	}
	e.reindex(n)
	gr.node = nil
	e.running -= int(gr.count)
	e.changed, e.placeable = true, true
	e.touched = append(e.touched, n)
}

// setIdle puts a node in the list of idle nodes, or takes it out, and
// marks its busy state for the next report.
func (e *engine) setIdle(n *node, idle bool) {
	e.busyDirty = append(e.busyDirty, n)
	switch {
	case idle && n.idlePos < 0 && e.node(n.ordinal) == n:
		n.idlePos = len(e.idle)
		e.idle = append(e.idle, n)
	case !idle && n.idlePos >= 0:
		last := len(e.idle) - 1
		moved := e.idle[last]
		e.idle[n.idlePos] = moved
		moved.idlePos = n.idlePos
		e.idle[last] = nil
		e.idle = e.idle[:last]
		n.idlePos = -1
	}
}

// ran returns how long a running group has run since the origin.
func (e *engine) ran(g *group) float64 {
	from := g.started
	if from.Before(Origin) {
		from = Origin
	}
	return max(e.now.Sub(from).Seconds(), 0)
}

// markStale notes that what runs on n changed: its entry of the pressure
// report is rebuilt at the next evaluation.
func (e *engine) markStale(n *node) {
	if !n.stale {
		n.stale = true
		e.repStale = append(e.repStale, n)
	}
}

// reindex brings the node's entry of the placement index up to date: in
// it with its free capacity while it takes work, out of it otherwise. It
// keeps maxFree: a node's free space that grows raises it at once; one
// that held a maximum and shrinks (or leaves the index) has it recomputed
// by the next place.
func (e *engine) reindex(n *node) {
	if e.node(n.ordinal) != n || !n.schedulable() {
		if n.indexed {
			e.index.Remove(n.ordinal)
			n.indexed = false
			e.shrinkMax(n.ixFree, capacity.Resources{})
		}
		return
	}
	free := n.capacity.Sub(n.alloc)
	if n.indexed {
		e.shrinkMax(n.ixFree, free)
	}
	e.index.Set(n.ordinal, n.ordinal, n.capacity, free)
	n.indexed, n.ixFree = true, free
	if !e.maxDirty {
		e.maxFree = maxFreeOf(e.maxFree, free)
	}
}

// shrinkMax marks maxFree for recomputing when a node's free space went
// from old to now below a maximum old held.
func (e *engine) shrinkMax(old, now capacity.Resources) {
	if old.MilliCPU == e.maxFree.MilliCPU && now.MilliCPU < old.MilliCPU ||
		old.Memory == e.maxFree.Memory && now.Memory < old.Memory ||
		old.GPUs == e.maxFree.GPUs && now.GPUs < old.GPUs {
		e.maxDirty = true
	}
}

// maxFreeOf returns the per-dimension maximum of a and b (CPU, memory and
// GPUs; extended resources are not compared, as place never did).
func maxFreeOf(a, b capacity.Resources) capacity.Resources {
	return capacity.Resources{MilliCPU: max(a.MilliCPU, b.MilliCPU), Memory: max(a.Memory, b.Memory), GPUs: max(a.GPUs, b.GPUs)}
}

// join adds a machine's node to the scheduler.
func (e *engine) join(m *provider.Machine) {
	ord, ok := ordinalOf(m.ID, e.pool)
	if !ok {
		e.violation("machine %s joined with an id that names no ordinal", m.ID)
		return
	}
	res := e.offs[m.Offering].Resources
	n := &node{machine: m.ID, ordinal: ord, offering: m.Offering, capacity: res.Clone(), idleSince: e.now, joinedAt: e.now, idlePos: -1}
	if old := e.node(ord); old != nil {
		e.leave(old, true)
	}
	for len(e.nodes) <= ord {
		e.nodes = append(e.nodes, nil)
	}
	e.nodes[ord] = n
	e.byMachine[m.ID] = n
	e.nodesMoved = true
	e.unjoined++
	e.joining = append(e.joining, n)
	e.setIdle(n, true)
	e.reindex(n)
	e.changed, e.placeable = true, true
}

// leave removes a node from the scheduler. Its groups are stopped and
// queued again: counted as interrupted when the machine was reclaimed
// (interrupted true), as disrupted — an invariant violation — otherwise.
// They are requeued in the order of their start, then of their job, so
// that the order does not depend on how the instances were grouped.
func (e *engine) leave(n *node, interrupted bool) {
	if e.byMachine[n.machine] != n {
		return
	}
	delete(e.byMachine, n.machine)
	if e.watched {
		e.lookAgain = append(e.lookAgain, n.machine) // looked at again as a look at every machine would
	}
	if !n.ctlJoined {
		e.unjoined--
	}
	if e.node(n.ordinal) == n {
		e.nodes[n.ordinal] = nil
		e.nodesMoved = true
	}
	e.reindex(n) // out of the index
	e.setIdle(n, false)
	if k := n.ninst; k > 0 {
		if interrupted {
			e.res.Interrupted += k
		} else {
			e.res.Disrupted += k
			e.violation("node %d (machine %s) left the cluster by scale-down while running %d instances", n.ordinal, n.machine, k)
		}
		gs := slices.Clone(n.groups)
		slices.SortFunc(gs, func(a, b int32) int {
			ga, gb := &e.groups[a], &e.groups[b]
			return cmp.Or(ga.started.Compare(gb.started), cmp.Compare(ga.job, gb.job))
		})
		for _, g := range gs {
			e.stop(g)
			e.groups[g].ran = true
			e.enqueue(g)
		}
	}
	e.changed = true
}

// groupSource hands the queued groups to the scheduler in FIFO order
// across shapes (by seq), from the shapes it may place this time.
type groupSource struct {
	e      *engine
	heads  []srcHead // a heap by seq
	failed []bool    // by shape
}

type srcHead struct {
	s   int32 // shape
	pos int   // index in the shape's queue
	seq int64
}

func (src *groupSource) reset(shapes []bool) {
	src.heads = src.heads[:0]
	if len(src.failed) < len(shapes) {
		src.failed = make([]bool, len(shapes))
	}
	clear(src.failed)
	for s, ok := range shapes {
		if !ok {
			continue
		}
		q := &src.e.queues[s]
		src.push(int32(s), q.head)
	}
}

// push adds shape s's first valid entry at or after pos to the heap.
func (src *groupSource) push(s int32, pos int) {
	q := &src.e.queues[s]
	for ; pos < len(q.items); pos++ {
		if qe := q.items[pos]; src.e.valid(qe) {
			src.heads = append(src.heads, srcHead{s: s, pos: pos, seq: qe.seq})
			src.up(len(src.heads) - 1)
			return
		}
	}
}

func (src *groupSource) up(i int) {
	h := src.heads
	for i > 0 {
		p := (i - 1) / 2
		if h[p].seq <= h[i].seq {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (src *groupSource) pop() srcHead {
	h := src.heads
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].seq < h[m].seq {
			m = l
		}
		if r < len(h) && h[r].seq < h[m].seq {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	src.heads = h
	return top
}

// Next returns the oldest queued group of a shape not failed.
func (src *groupSource) Next() (scheduler.Group, bool) {
	for len(src.heads) > 0 {
		h := src.pop()
		if src.failed[h.s] {
			continue
		}
		qe := src.e.queues[h.s].items[h.pos]
		src.push(h.s, h.pos+1)
		gr := &src.e.groups[qe.g]
		return scheduler.Group{ID: int(qe.g), Shape: int(h.s), Requests: src.e.shapes[h.s], Count: int(gr.count), QueuedAt: gr.queued,
			Gang: src.e.gangGroup(gr.job)}, true
	}
	return scheduler.Group{}, false
}

// Failed stops handing groups of shape s.
func (src *groupSource) Failed(s int) { src.failed[s] = true }

// place runs the scheduler over the pending groups and starts what it
// assigns. Only shapes that fit the largest free space of some dimension
// are handed over, as the engine always did: one that does not can be
// placed nowhere (and gets no reservation).
func (e *engine) place() {
	if e.index.Len() == 0 {
		return
	}
	if e.maxDirty {
		e.maxFree, e.maxDirty = capacity.Resources{}, false
		for _, n := range e.nodes {
			if n != nil && n.indexed {
				e.maxFree = maxFreeOf(e.maxFree, n.ixFree)
			}
		}
	}
	maxFree := e.maxFree
	eligible := make([]bool, len(e.shapes))
	any := false
	for s := range e.shapes {
		if e.queues[s].n > 0 && e.shapes[s].Fits(maxFree) {
			eligible[s], any = true, true
		}
	}
	if !any {
		return
	}
	e.src.reset(eligible)
	res := e.index.PlaceGroups(&e.src, scheduler.Config{ReserveAfter: e.cfg.Scheduler.reserveAfter()}, e.now, e.assign)
	e.assign = res.Assignments
	for _, a := range res.Assignments {
		e.begin(int32(a.Group), e.node(a.Worker), int32(a.Count))
	}
}

// begin runs k instances of queued group g on node n, as the scheduler
// assigned them.
func (e *engine) begin(g int32, n *node, k int32) {
	gr := &e.groups[g]
	switch {
	case gr.state != instQueued || k <= 0 || k > gr.count:
		e.violation("%d instances of job %d assigned while %d are pending", k, gr.job, gr.count)
		return
	case n == nil:
		e.violation("job %d assigned to an unknown node", gr.job)
		return
	case !n.schedulable():
		e.violation("job %d assigned to cordoned node %d", gr.job, n.ordinal)
	}
	run := g
	if k < gr.count {
		// Part of the group: the rest stays queued where it is.
		run = e.newGroup(gr.job, k)
		gr = &e.groups[g] // newGroup may have moved the slice
		gr.count -= k
		e.groups[run].ran = gr.ran
		e.groups[run].moved = gr.moved
	}
	q := &e.queues[gr.shape]
	q.n -= int(k)
	e.queued -= int(k)
	e.running += int(k)

	rg := &e.groups[run]
	job := &e.w.Jobs[rg.job]
	e.gangRunning(rg.job, k)
	if st := e.gangs[rg.job]; st != nil && !rg.ran {
		st.started += k
		if st.started == int32(job.Replicas) && e.waited(job) {
			st.whole = true
			e.gangWaits = append(e.gangWaits, waitCount{sec: e.now.Sub(e.waitFrom(job)).Seconds(), count: 1})
		}
	}
	if !rg.ran && e.waited(job) {
		// The parts of one group placed in one step wait alike: one entry
		// for them all, so that the waits kept follow the groups placed,
		// not the nodes they spread over.
		sec := e.now.Sub(e.waitFrom(job)).Seconds()
		if n := len(e.waits); n > 0 && e.waits[n-1].sec == sec {
			e.waits[n-1].count += int64(k)
		} else {
			e.waits = append(e.waits, waitCount{sec: sec, count: int64(k)})
		}
	}
	r := e.shapes[rg.shape]
	if n.ninst == 0 {
		e.setIdle(n, false)
	}
	n.alloc = n.alloc.Add(r.Scale(int64(k)))
	n.ninst += int(k)
	e.markStale(n)
	rg.pos = int32(len(n.groups))
	n.groups = append(n.groups, run)
	e.runSeq++
	rg.node, rg.state, rg.ran, rg.run, rg.started = n, instRunning, true, e.runSeq, e.now
	end := e.now.Add(job.Duration)
	if job.Preexisting && e.now.Before(Origin) {
		end = Origin.Add(job.Duration) // the initial load runs to its trace end
	}
	e.q.push(event{at: end, kind: evCompletion, grp: run, gen: rg.run})
	e.reindex(n)
	e.changed = true
	e.touched = append(e.touched, n)
}

// pressure builds the scheduler's report for the pool: the joined nodes by
// ordinal with what runs on them, and the pending instances grouped by
// shape in the order their oldest instance arrived, as scheduler.Place
// reports it. What runs is one entry per instance for a policy that counts
// them (skyward's instances in flight); for the others, which read only
// sums of requests and whether a node is busy, one entry per group with
// the group's total: the same decisions (the golden test holds every
// policy to the per-instance engine's figures) at a cost that does not
// grow with the instances.
func (e *engine) pressure() capacity.Pressure {
	p := &e.report
	if e.nodesMoved {
		// A node joined or left: the list by ordinal is rebuilt.
		p.Nodes = p.Nodes[:0]
		for _, n := range e.nodes {
			if n == nil {
				continue
			}
			n.repPos = len(p.Nodes)
			p.Nodes = append(p.Nodes, e.reportNode(n))
		}
		e.nodesMoved = false
	} else {
		// Only the entries of the nodes whose work changed.
		for _, n := range e.repStale {
			if e.node(n.ordinal) == n {
				p.Nodes[n.repPos] = e.reportNode(n)
			}
		}
	}
	clear(e.repStale)
	e.repStale = e.repStale[:0]
	if e.opts.Check {
		e.checkReport()
	}
	p.Pending = p.Pending[:0]
	type head struct {
		s   int
		seq int64
	}
	var heads []head
	for s := range e.queues {
		if e.queues[s].n == 0 {
			continue
		}
		if qe, ok := e.head(s); ok {
			heads = append(heads, head{s: s, seq: qe.seq})
		}
	}
	slices.SortFunc(heads, func(a, b head) int { return cmp.Compare(a.seq, b.seq) })
	for _, h := range heads {
		p.Pending = append(p.Pending, capacity.Pending{Requests: e.shapes[h.s], Count: e.queues[h.s].n})
	}
	p.Finished, p.FinishedRequests = e.finished, e.finishedRes
	return *p
}

// checkReport verifies the kept report's nodes against a list built anew
// from every node (Options.Check).
func (e *engine) checkReport() {
	i := 0
	for _, n := range e.nodes {
		if n == nil {
			continue
		}
		if i >= len(e.report.Nodes) {
			e.violation("the pressure report lists %d nodes, fewer than joined", len(e.report.Nodes))
			return
		}
		want, got := e.reportNode(n), e.report.Nodes[i]
		sum := got
		sum.Summarize()
		gb, gd := got.Kinds()
		sb, sd := sum.Kinds()
		gi := (&capacity.Pressure{Nodes: []capacity.Node{got}}).Inflight()
		si := (&capacity.Pressure{Nodes: []capacity.Node{sum}}).Inflight()
		if gb != sb || gd != sd || got.Busy() != sum.Busy() || !got.Allocated().Equal(sum.Allocated()) || gi != si {
			e.violation("the pressure report's entry %d carries sums (busy %t, daemons %t, %s, %d instances) that its instances do not add up to (%t, %t, %s, %d)",
				i, gb, gd, got.Allocated(), gi, sb, sd, sum.Allocated(), si)
		}
		if got.ID != want.ID || got.Ordinal != want.Ordinal || !got.Resources.Equal(want.Resources) ||
			!got.IdleSince.Equal(want.IdleSince) || !slices.EqualFunc(got.Running, want.Running, func(a, b capacity.Instance) bool {
			return a.Requests.Equal(b.Requests) && a.Daemon == b.Daemon && a.Count == b.Count
		}) {
			e.violation("the pressure report's entry %d is %+v, node %d is %+v", i, got, n.ordinal, want)
		}
		i++
	}
	if i != len(e.report.Nodes) {
		e.violation("the pressure report lists %d nodes, %d joined", len(e.report.Nodes), i)
	}
}

// reportNode returns n's entry of the pressure report, rebuilding its list
// of what runs when stale.
func (e *engine) reportNode(n *node) capacity.Node {
	if n.stale {
		n.running = n.running[:0]
		for _, g := range n.groups {
			gr := &e.groups[g]
			if !e.countsInstances {
				// One entry for the group: the same sums (busy,
				// allocated, free, GPUs used) and counts (Inflight,
				// each instance's shape) at the cost of one.
				n.running = append(n.running, capacity.Instance{Requests: e.shapes[gr.shape].Scale(int64(gr.count)), Count: int(gr.count)})
				continue
			}
			for range gr.count {
				n.running = append(n.running, capacity.Instance{Requests: e.shapes[gr.shape]})
			}
		}
		n.stale = false
	}
	cn := capacity.Node{ID: n.machine, Ordinal: n.ordinal, Resources: n.capacity, Running: n.running, JoinedAt: n.joinedAt}
	if !n.busy() {
		cn.IdleSince = n.idleSince
	}
	// The entry carries its sums, so that policies do not add up every
	// node's entries per evaluation: the node keeps them as work comes
	// and goes (what runs allocates alloc, ninst instances, no daemons;
	// check holds them to the entries).
	cn.SetSums(n.alloc, n.ninst > 0, false, n.ninst)
	return cn
}

// Cordon stops placement on a node (controller.Workload).
func (e *engine) Cordon(_ context.Context, n controller.Node) error {
	if nd := e.byMachine[n.MachineID]; nd != nil && !nd.cordoned {
		nd.cordoned = true
		e.reindex(nd)
		e.changed = true
	}
	return nil
}

// Uncordon resumes placement on a node (controller.Workload).
func (e *engine) Uncordon(_ context.Context, n controller.Node) error {
	if nd := e.byMachine[n.MachineID]; nd != nil && nd.cordoned {
		nd.cordoned = false
		e.reindex(nd)
		e.changed, e.placeable = true, true
	}
	return nil
}

// check verifies the invariants on what the step touched (every node and
// counter with Options.Check): no node holds more than its capacity, a
// node's allocation is the sum of what runs on it, the placement index
// agrees with the nodes, and the instance counts add up.
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
			k := 0
			for _, g := range n.groups {
				gr := &e.groups[g]
				sum = sum.Add(e.shapes[gr.shape].Scale(int64(gr.count)))
				k += int(gr.count)
				if gr.node != n || gr.state != instRunning {
					e.violation("group of job %d listed on node %d but not running there", gr.job, n.ordinal)
				}
			}
			if !sum.Equal(n.alloc) || k != n.ninst {
				e.violation("node %d allocates %s to %d instances but runs %s in %d", n.ordinal, n.alloc, n.ninst, sum, k)
			}
			free, in := e.index.Free(n.ordinal)
			if in != (n.schedulable() && e.node(n.ordinal) == n) || in && !free.Equal(n.capacity.Sub(n.alloc)) {
				e.violation("node %d: the placement index has free %s (indexed %t), the node %s", n.ordinal, free, in, n.capacity.Sub(n.alloc))
			}
		}
	}
	e.touched = e.touched[:0]
	if e.opts.Check && !e.maxDirty {
		var want capacity.Resources
		for _, n := range e.nodes {
			if n != nil && n.schedulable() {
				want = maxFreeOf(want, n.capacity.Sub(n.alloc))
			}
		}
		if !want.Equal(e.maxFree) {
			e.violation("largest free space kept as %s, the nodes have %s", e.maxFree, want)
		}
	}
	if e.opts.Check {
		idle := 0
		for _, n := range e.nodes {
			if n != nil && !n.busy() {
				idle++
				if n.idlePos < 0 || n.idlePos >= len(e.idle) || e.idle[n.idlePos] != n {
					e.violation("idle node %d is not in the idle list", n.ordinal)
				}
			}
		}
		if idle != len(e.idle) {
			e.violation("%d idle nodes, %d in the idle list", idle, len(e.idle))
		}
		q, r := 0, 0
		for i := range e.groups {
			switch e.groups[i].state {
			case instQueued:
				q += int(e.groups[i].count)
			case instRunning:
				r += int(e.groups[i].count)
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

// finish computes the figures as of the end of the run.
func (e *engine) finish() (*Result, error) {
	r := &e.res
	r.End = e.now.Sub(Origin)
	for i := range e.groups {
		gr := &e.groups[i]
		switch gr.state {
		case instRunning:
			ran := e.ran(gr) * float64(gr.count)
			s := e.shapes[gr.shape]
			e.usedSec[0] += ran * float64(s.MilliCPU)
			e.usedSec[1] += ran * float64(s.Memory)
			e.usedSec[2] += ran * float64(s.GPUs)
		case instQueued:
			// Instances that never started waited at least until the end.
			if job := &e.w.Jobs[gr.job]; !gr.ran && e.waited(job) {
				e.waits = append(e.waits, waitCount{sec: max(e.now.Sub(e.waitFrom(job)).Seconds(), 0), count: int64(gr.count)})
			}
		}
	}
	r.Unfinished = r.Instances - e.finished
	for j := e.nextJob; j < len(e.w.Jobs); j++ {
		if job := &e.w.Jobs[j]; !job.Preexisting {
			e.waits = append(e.waits, waitCount{sec: max(e.now.Sub(Origin.Add(job.Submit)).Seconds(), 0), count: int64(job.Replicas)})
		}
	}
	e.gangResults(r)
	slices.SortFunc(e.waits, func(a, b waitCount) int { return cmp.Compare(a.sec, b.sec) })
	r.WaitP50, r.WaitP95, r.WaitP99 = percentile(e.waits, 50), percentile(e.waits, 95), percentile(e.waits, 99)
	r.WaitCurve = waitCurve(e.waits)
	r.waits = e.waits
	var sum float64
	var total int64
	for _, w := range e.waits {
		sum += w.sec * float64(w.count)
		total += w.count
	}
	if total > 0 {
		r.WaitMean = sum / float64(total)
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
	r.IdleNodeHours, r.OutsideNodeHours = e.idleHours, max(r.NodeHours-e.clusterHours, 0)
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

// percentile returns the nearest-rank p-th percentile of waits sorted by
// value, each counted as often as its count says.
func percentile(sorted []waitCount, p float64) float64 {
	var total int64
	for _, w := range sorted {
		total += w.count
	}
	if total == 0 {
		return 0
	}
	k := min(max(int64(math.Ceil(p/100*float64(total)))-1, 0), total-1)
	for _, w := range sorted {
		if k < w.count {
			return w.sec
		}
		k -= w.count
	}
	return sorted[len(sorted)-1].sec
}

// gangState follows one multi-node job: its parts running now (and since
// when), how many started at least once and how many completed, and
// whether all of them started.
type gangState struct {
	running, started, done int32
	since                  time.Time
	whole                  bool
}

// gangGroup reports whether job j's groups are placed as gangs.
func (e *engine) gangGroup(j int32) bool {
	return e.cfg.Workload.Gangs && e.gangs[j] != nil
}

// gangRunning accounts k more (or, negative, fewer) running parts of job
// j, after charging the GPU time its parts held while part of it waited.
func (e *engine) gangRunning(j int32, k int32) {
	st := e.gangs[j]
	if st == nil {
		return
	}
	job := &e.w.Jobs[j]
	if st.running > 0 && st.running+st.done < int32(job.Replicas) { // some part waits
		e.partialGPUSec += e.now.Sub(st.since).Seconds() * float64(st.running) * float64(max(job.Requests.GPUs, 0))
	}
	st.running += k
	st.since = e.now
}

// gangResults fills r's gang figures at the end of the run: jobs never
// whole wait until the end, parts still running charge their time.
func (e *engine) gangResults(r *Result) {
	for j, st := range e.gangs {
		job := &e.w.Jobs[j]
		e.gangRunning(j, 0)
		if !st.whole && e.waited(job) {
			e.gangWaits = append(e.gangWaits, waitCount{sec: max(e.now.Sub(e.waitFrom(job)).Seconds(), 0), count: 1})
		}
	}
	for j := e.nextJob; j < len(e.w.Jobs); j++ {
		if job := &e.w.Jobs[j]; job.Parts > 1 && !job.Preexisting {
			e.gangWaits = append(e.gangWaits, waitCount{sec: max(e.now.Sub(Origin.Add(job.Submit)).Seconds(), 0), count: 1})
		}
	}
	slices.SortFunc(e.gangWaits, func(a, b waitCount) int { return cmp.Compare(a.sec, b.sec) })
	r.Gangs = len(e.gangWaits)
	r.GangWaitP50, r.GangWaitP95 = percentile(e.gangWaits, 50), percentile(e.gangWaits, 95)
	r.PartialGangGPUHours = e.partialGPUSec / 3600
}
