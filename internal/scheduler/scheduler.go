// Package scheduler is the pure placement core of the head: given the
// workers, what runs on them and the queue of pending instances, Place
// returns the assignments to make and a capacity.Pressure per pool.
//
// It has no I/O and reads no clock: now is an argument. Guarantees:
//   - Allocated CPU, memory and extended resources on a worker never exceed
//     its capacity; GPUs are accounted by index.
//   - An exclusive instance holds its GPUs alone against other exclusive
//     instances; a shared (non-exclusive) instance never lands on a GPU held
//     exclusively (PyLet puts it on GPUs 0..n-1 whoever holds them, A14.7).
//   - target_worker names the worker's stable name; gpu_indices pin GPUs.
//   - Nothing is placed on a worker that is not schedulable or is cordoned,
//     and no reservation is made there.
//   - FIFO with backfill: an instance that does not fit is skipped and later
//     ones may overtake it, but once the oldest waiting instance of a pool
//     has waited Config.ReserveAfter, a worker is reserved for it: nothing
//     else is placed there until it fits, so a large instance is never
//     starved. Reservations are recomputed each call from the same inputs,
//     so they need no state between calls. A starved gang reserves one
//     worker per member (one reservation of the pool's), so a stream of
//     small work cannot keep it waiting for ever (gang.go).
//   - Placement keeps GPU workers for GPU work, prefers a worker that runs
//     something to an empty one (empty nodes stay empty for the autoscaler
//     to reclaim), then one whose free CPU and memory point the way the
//     request does (so that memory-heavy work fills what CPU-heavy work
//     leaves, and the other way round), then best fit (the least free
//     room); see score.go.
package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Worker is a node as placement sees it.
type Worker struct {
	// Name is the worker's stable name (what target_worker refers to).
	Name    string
	Pool    string
	Ordinal int
	// Capacity is the allocatable total; Capacity.GPUs is the number of GPU
	// indices (0..GPUs-1).
	Capacity capacity.Resources
	// Schedulable is true for ONLINE workers; others get no new work.
	Schedulable bool
	// Cordoned workers get no new work either (a drain is under way); they
	// stay in the pressure report with what runs on them.
	Cordoned bool
	// Offline workers are left out of the pressure report.
	Offline bool
	// JoinedAt is when the worker registered (capacity.Node.JoinedAt).
	JoinedAt time.Time
}

// Instance is a pending or placed instance.
type Instance struct {
	ID      string
	Attempt int64
	Pool    string
	// Requests is CPU, memory, extended resources and the GPU count.
	Requests  capacity.Resources
	Exclusive bool
	Daemon    bool
	// TargetWorker pins the instance to one worker by name.
	TargetWorker string
	// PreferWorker names the worker a pending instance goes to when it
	// fits there (placeable, not reserved for another, in the instance's
	// pool), before the score is consulted: the destination consolidation
	// planned for work it moved (consolidate.Move.Targets). Unlike
	// TargetWorker it pins nothing: where the worker does not fit, the
	// score chooses as for any instance.
	PreferWorker string
	// GPUIndices are the requested indices of a pending instance, or the
	// allocated ones of a placed instance.
	GPUIndices []int
	// Worker is where a placed instance runs; empty for pending ones.
	Worker string
	// QueuedAt is when the instance (last) became pending.
	QueuedAt time.Time
	// NotBefore holds a pending instance out of placement until then (a
	// lost worker's fence may still be stopping its previous attempt);
	// Held is the reason shown while it waits ("held" when empty). A held
	// instance still counts as queued in the pressure report: it will need
	// room soon.
	NotBefore time.Time
	Held      string
	// Priority orders the queue: higher first, FIFO within a priority. A
	// placed instance's priority says what may preempt it (Preemptible).
	Priority int
	// Restartable placed instances may be preempted by pending work of
	// higher priority in a pool of Config.Preemptible.
	Restartable bool
	// Gang names the instance's gang ("" for none): the pending instances
	// of a gang none of whose instances is placed are placed all at once or
	// not at all (gang.go). GangSize is its number of instances; GangRank
	// orders them.
	Gang     string
	GangSize int
	GangRank int
}

// Config tunes placement.
type Config struct {
	// ReserveAfter is how long the first instance of a pool's queue that
	// does not fit may wait before a worker is reserved for it; zero
	// disables reservations.
	ReserveAfter time.Duration
	// MaxReservations bounds reservations per pool; 1 when zero.
	MaxReservations int
	// Preemptible says whether pending work in a pool may preempt placed
	// restartable work of lower priority (the pool can grow no further);
	// nil: never.
	Preemptible func(pool string) bool
	// Evicting are placed instances already chosen to be preempted (by
	// id): they are on their way out, so their room counts as free when
	// preemption is planned, and they are never chosen twice.
	Evicting map[string]bool
}

// Assignment places one instance on a worker.
type Assignment struct {
	InstanceID string
	// Attempt is the instance's attempt as given to Place.
	Attempt    int64
	Worker     string
	GPUIndices []int
	Exclusive  bool
}

// Result is what Place decided.
type Result struct {
	Assignments []Assignment
	// Pressure maps each pool (by name; "" is the default pool) to its
	// nodes (after the assignments) and its still-queued instances.
	Pressure map[string]capacity.Pressure
	// Reserved maps a worker to the instance it is held for.
	Reserved map[string]string
	// Waiting says why each unplaced instance waits.
	Waiting map[string]string
	// Preemptions are the placed instances to stop so that waiting work
	// of higher priority fits (preempt.go); empty unless Config.Preemptible
	// allows it.
	Preemptions []Preemption
}

type node struct {
	w         *Worker
	free      capacity.Resources // GPUs unused: GPUs are tracked by index
	excl      []bool
	shared    []int
	freeExcl  int // indices not exclusively held
	reserved  int // index into pending, or -1
	running   []capacity.Instance
	placeable bool
	empty     bool  // nothing holds any of its CPU, memory or GPUs
	dir       int8  // direction of free CPU and memory (score.go)
	room      int64 // room(free)
	ordinal   int
}

// Place decides placements for pending (in FIFO order) given the workers
// and the placed instances. It does not modify its arguments.
func Place(workers []Worker, placed, pending []Instance, cfg Config, now time.Time) Result {
	maxRes := cfg.MaxReservations
	if maxRes <= 0 {
		maxRes = 1
	}
	nodes := make([]node, len(workers))
	byName := make(map[string]int, len(workers))
	byPool := map[string][]int{}
	for i := range workers {
		w := &workers[i]
		n := &nodes[i]
		n.w = w
		n.free = w.Capacity.Clone()
		n.free.GPUs = 0
		g := max(int(w.Capacity.GPUs), 0)
		n.excl = make([]bool, g)
		n.shared = make([]int, g)
		n.freeExcl = g
		n.reserved = -1
		n.placeable = w.Schedulable && !w.Cordoned
		n.ordinal = w.Ordinal
		n.setScore()
		byName[w.Name] = i
		byPool[w.Pool] = append(byPool[w.Pool], i)
	}
	for i := range placed {
		p := &placed[i]
		ni, ok := byName[p.Worker]
		if !ok {
			continue
		}
		n := &nodes[ni]
		n.take(p, p.GPUIndices)
	}

	res := Result{Pressure: map[string]capacity.Pressure{}, Reserved: map[string]string{}, Waiting: map[string]string{}}
	failedShape := map[string]string{}
	reservations := map[string]int{}
	unplaced := make([]int, 0)
	gangs := gangsOf(placed, pending)
	for _, i := range queueOrder(pending) {
		p := &pending[i]
		if g := gangs[p.Gang]; g != nil && !g.started {
			if g.done {
				continue
			}
			g.done = true
			if placeGang(g, pending, nodes, byName, byPool, &res, now) {
				continue
			}
			unplaced = append(unplaced, g.members...)
			starved := cfg.ReserveAfter > 0 && !p.QueuedAt.IsZero() && now.Sub(p.QueuedAt) >= cfg.ReserveAfter
			if starved && reservations[p.Pool] < maxRes && reserveGang(g, pending, nodes, byName, byPool, &res) {
				reservations[p.Pool]++
			}
			continue
		}
		if restarting(gangs[p.Gang], p, &res) {
			continue // neither buys nor preempts: its gang restarts whole
		}
		if now.Before(p.NotBefore) {
			why := p.Held
			if why == "" {
				why = "held until " + p.NotBefore.UTC().Format(time.RFC3339)
			}
			res.Waiting[p.ID] = why
			unplaced = append(unplaced, i)
			continue
		}
		simple := p.TargetWorker == "" && len(p.GPUIndices) == 0
		var key string
		if simple {
			key = shapeKey(p)
			if why, ok := failedShape[key]; ok {
				res.Waiting[p.ID] = why
				unplaced = append(unplaced, i)
				continue
			}
		}
		cands, why := candidates(p, nodes, byName, byPool)
		ranks := directionRanks(p.Requests)
		best, bestScore := -1, score{}
		if p.PreferWorker != "" {
			if ni, ok := byName[p.PreferWorker]; ok && slices.Contains(cands, ni) {
				n := &nodes[ni]
				if ok, _ := n.fits(p); ok && n.placeable && (n.reserved < 0 || n.reserved == i) {
					best = ni
				}
			}
		}
		for _, ni := range cands {
			if best >= 0 && p.PreferWorker != "" {
				break // the planned destination fits
			}
			n := &nodes[ni]
			if !n.placeable || (n.reserved >= 0 && n.reserved != i) {
				continue
			}
			if ok, _ := n.fits(p); !ok {
				continue
			}
			sc := n.score(p, &ranks)
			if best < 0 || sc.less(bestScore) {
				best, bestScore = ni, sc
			}
		}
		if best >= 0 {
			n := &nodes[best]
			idx := n.pickGPUs(p)
			n.take(p, idx)
			res.Assignments = append(res.Assignments, Assignment{InstanceID: p.ID, Attempt: p.Attempt,
				Worker: n.w.Name, GPUIndices: idx, Exclusive: p.Exclusive})
			continue
		}
		if why == "" {
			why = waitReason(p, cands, nodes)
		}
		res.Waiting[p.ID] = why
		unplaced = append(unplaced, i)
		if simple {
			failedShape[key] = why
		}
		starved := cfg.ReserveAfter > 0 && !p.QueuedAt.IsZero() && now.Sub(p.QueuedAt) >= cfg.ReserveAfter
		if starved && reservations[p.Pool] < maxRes {
			if ni := reserveFor(p, cands, nodes); ni >= 0 {
				nodes[ni].reserved = i
				reservations[p.Pool]++
				res.Reserved[nodes[ni].w.Name] = p.ID
				res.Waiting[p.ID] = "waiting for reserved worker " + nodes[ni].w.Name
			}
		}
	}

	if cfg.Preemptible != nil {
		res.Preemptions = preempt(nodes, byName, byPool, placed, pending, unplaced, gangs, cfg, now)
	}
	for pool, idx := range byPool {
		pr := res.Pressure[pool]
		for _, ni := range idx {
			n := &nodes[ni]
			if n.w.Offline {
				continue
			}
			pr.Nodes = append(pr.Nodes, capacity.Node{ID: n.w.Name, Ordinal: n.w.Ordinal,
				Resources: n.w.Capacity.Clone(), Running: n.running, JoinedAt: n.w.JoinedAt})
		}
		res.Pressure[pool] = pr
	}
	shapes := map[string]map[string]int{} // pool -> shape key -> index in Pending
	slices.Sort(unplaced)                 // FIFO in the report, as before priorities
	for _, i := range unplaced {
		p := &pending[i]
		pr := res.Pressure[p.Pool]
		req := requestShape(p)
		k := req.String()
		gang := ""
		if g := gangs[p.Gang]; g != nil && !g.started {
			gang = p.Gang
		}
		if p.Priority != 0 || gang != "" {
			k = fmt.Sprintf("%s|%d|%s", k, p.Priority, gang)
		}
		m := shapes[p.Pool]
		if m == nil {
			m = map[string]int{}
			shapes[p.Pool] = m
		}
		if j, ok := m[k]; ok {
			pr.Pending[j].Count++
		} else {
			m[k] = len(pr.Pending)
			pr.Pending = append(pr.Pending, capacity.Pending{Requests: req, Count: 1, Priority: p.Priority, Gang: gang})
		}
		res.Pressure[p.Pool] = pr
	}
	return res
}

// requestShape is the instance's request with GPUs as the number it needs.
func requestShape(p *Instance) capacity.Resources {
	r := p.Requests.Clone()
	if len(p.GPUIndices) > 0 {
		r.GPUs = int64(len(p.GPUIndices))
	}
	return r
}

func shapeKey(p *Instance) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%d|%d|%t", p.Pool, p.Requests.MilliCPU, p.Requests.Memory, p.Requests.GPUs, p.Exclusive)
	for _, k := range p.Requests.ExtendedNames() {
		fmt.Fprintf(&b, "|%s=%d", k, p.Requests.Extended[k])
	}
	return b.String()
}

func candidates(p *Instance, nodes []node, byName map[string]int, byPool map[string][]int) ([]int, string) {
	if p.TargetWorker != "" {
		ni, ok := byName[p.TargetWorker]
		if !ok {
			return nil, "target worker " + p.TargetWorker + " is not registered"
		}
		if nodes[ni].w.Cordoned {
			return nil, "target worker " + p.TargetWorker + " is cordoned"
		}
		if !nodes[ni].placeable {
			return nil, "target worker " + p.TargetWorker + " is not online"
		}
		return []int{ni}, ""
	}
	c := byPool[p.Pool]
	if len(c) == 0 {
		return nil, fmt.Sprintf("no worker in pool %q", p.Pool)
	}
	return c, ""
}

func waitReason(p *Instance, cands []int, nodes []node) string {
	for _, ni := range cands {
		if ok, _ := nodes[ni].fitsEmpty(p); ok {
			return "insufficient free resources"
		}
	}
	if len(cands) == 1 {
		_, why := nodes[cands[0]].fitsEmpty(p)
		return why
	}
	return "fits on no worker of pool " + fmt.Sprintf("%q", p.Pool)
}

// reserveFor picks the candidate closest to fitting p: one that could hold
// it when empty, with the smallest shortfall now.
func reserveFor(p *Instance, cands []int, nodes []node) int {
	best, bestDef := -1, 0.0
	for _, ni := range cands {
		n := &nodes[ni]
		if !n.placeable || n.reserved >= 0 {
			continue
		}
		if ok, _ := n.fitsEmpty(p); !ok {
			continue
		}
		d := n.deficit(p)
		if best < 0 || d < bestDef {
			best, bestDef = ni, d
		}
	}
	return best
}

func (n *node) gpuNeed(p *Instance) int {
	if len(p.GPUIndices) > 0 {
		return len(p.GPUIndices)
	}
	return int(p.Requests.GPUs)
}

func cpuMem(r capacity.Resources) capacity.Resources {
	r.GPUs = 0
	return r
}

// fitsEmpty reports whether p would fit on n with nothing else running.
func (n *node) fitsEmpty(p *Instance) (bool, string) {
	if !cpuMem(p.Requests).Fits(cpuMem(n.w.Capacity)) {
		return false, fmt.Sprintf("needs %s, worker %s has %s", requestShape(p), n.w.Name, n.w.Capacity)
	}
	for _, g := range p.GPUIndices {
		if g < 0 || g >= len(n.excl) {
			return false, fmt.Sprintf("gpu index %d does not exist on worker %s (%d GPUs)", g, n.w.Name, len(n.excl))
		}
	}
	if n.gpuNeed(p) > len(n.excl) {
		return false, fmt.Sprintf("needs %d GPUs, worker %s has %d", n.gpuNeed(p), n.w.Name, len(n.excl))
	}
	return true, ""
}

func (n *node) fits(p *Instance) (bool, string) {
	if !cpuMem(p.Requests).Fits(n.free) {
		return false, "insufficient cpu, memory or extended resources"
	}
	if len(p.GPUIndices) > 0 {
		for _, g := range p.GPUIndices {
			if g < 0 || g >= len(n.excl) || n.excl[g] {
				return false, fmt.Sprintf("gpu %d unavailable", g)
			}
		}
		return true, ""
	}
	if need := int(p.Requests.GPUs); need > n.freeExcl {
		return false, "insufficient GPUs"
	}
	return true, ""
}

func (n *node) pickGPUs(p *Instance) []int {
	if len(p.GPUIndices) > 0 {
		out := slices.Clone(p.GPUIndices)
		slices.Sort(out)
		return out
	}
	need := int(p.Requests.GPUs)
	if need == 0 {
		return nil
	}
	out := make([]int, 0, need)
	// Prefer GPUs nobody uses; exclusive work may still share a GPU with
	// shared daemons (PyLet's model), shared work never takes an exclusive one.
	for pass := 0; pass < 2 && len(out) < need; pass++ {
		for g := range n.excl {
			if len(out) == need {
				break
			}
			if n.excl[g] || (pass == 0) != (n.shared[g] == 0) {
				continue
			}
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// take accounts p on n with the given GPU indices.
func (n *node) take(p *Instance, gpus []int) {
	n.free = n.free.Sub(cpuMem(p.Requests))
	req := cpuMem(p.Requests)
	for _, g := range gpus {
		if g < 0 || g >= len(n.excl) {
			continue
		}
		if p.Exclusive {
			if !n.excl[g] {
				n.excl[g] = true
				n.freeExcl--
			}
			req.GPUs++
		} else {
			n.shared[g]++
		}
	}
	n.running = append(n.running, capacity.Instance{Requests: req, Daemon: p.Daemon})
	n.setScore()
}

// setScore updates what score reads from n's free capacity.
func (n *node) setScore() {
	n.empty = n.free.MilliCPU == n.w.Capacity.MilliCPU && n.free.Memory == n.w.Capacity.Memory && n.freeExcl == len(n.excl)
	n.dir, n.room = direction(n.free.MilliCPU, n.free.Memory), room(n.free)
}

// score orders feasible workers: lower is better. GPUs first (GPU workers
// are kept for GPU work, and the fewest free GPUs left), then a worker that
// runs something before an empty one, then the direction of its free CPU
// and memory against the request's, then the least free room (score.go).
type score struct {
	gpuWaste int // free GPUs a GPU-less instance would sit beside
	freeGPU  int // exclusive-free GPUs left after placement
	empty    bool
	dirRank  int8  // rank of the free vector's direction for the request
	room     int64 // free CPU and memory, weighted (room)
	ordinal  int
}

func (a score) less(b score) bool {
	if a.gpuWaste != b.gpuWaste {
		return a.gpuWaste < b.gpuWaste
	}
	if a.freeGPU != b.freeGPU {
		return a.freeGPU < b.freeGPU
	}
	if a.empty != b.empty {
		return !a.empty
	}
	if a.dirRank != b.dirRank {
		return a.dirRank < b.dirRank
	}
	if a.room != b.room {
		return a.room < b.room
	}
	return a.ordinal < b.ordinal
}

// score is n's score for p; ranks are directionRanks of p's request.
func (n *node) score(p *Instance, ranks *[scoreDirections]int8) score {
	s := score{ordinal: n.ordinal}
	need := n.gpuNeed(p)
	if need == 0 {
		s.gpuWaste = n.freeExcl
	}
	s.freeGPU = n.freeExcl
	if p.Exclusive {
		s.freeGPU -= need
	}
	s.empty = n.empty
	s.dirRank = ranks[n.dir]
	s.room = n.room
	return s
}

// deficit is how far n is from fitting p now, as a sum of fractions of its
// capacity per dimension.
func (n *node) deficit(p *Instance) float64 {
	frac := func(need, free, total int64) float64 {
		if need <= free || total <= 0 {
			return 0
		}
		return float64(need-free) / float64(total)
	}
	d := frac(p.Requests.MilliCPU, n.free.MilliCPU, n.w.Capacity.MilliCPU) +
		frac(p.Requests.Memory, n.free.Memory, n.w.Capacity.Memory) +
		frac(int64(n.gpuNeed(p)), int64(n.freeExcl), n.w.Capacity.GPUs)
	for k, v := range p.Requests.Extended {
		d += frac(v, n.free.Extended[k], n.w.Capacity.Extended[k])
	}
	return d
}
