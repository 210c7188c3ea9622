package scheduler

import (
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Index keeps a pool's schedulable workers ordered as Place ranks them for a
// simple instance (exclusive, no target worker, no GPU indices), so that
// the best worker for a request is found without looking at every worker.
// Place's score orders the workers that fit by free exclusive GPUs (a
// GPU-less request's "GPUs wasted" is the free GPU count itself), then
// busy before empty, then the rank of the direction of their free CPU and
// memory for the request, then free room, then ordinal (score.go). The
// index holds the workers by free GPUs, empty and direction, each such
// class in a tree ordered by free room and ordinal (ixForest); the best fit
// is found by visiting, from the request's GPUs on, each (empty,
// direction) class in the request's order for its first worker whose CPU,
// memory (and extended resources) fit, skipping the subtrees whose largest
// free CPU or largest free memory is too small.
//
// It is the caller's mirror of its workers: Set a worker when its free
// capacity changes or it becomes schedulable, Remove it when it is
// cordoned or leaves. PlaceGroups decides like Place would for the same
// workers and the same instances one by one, and keeps the index up to
// date with what it places. Pure: no I/O, time is an argument.
type Index struct {
	tree    ixForest
	entries map[int]*ixEntry
	// dense holds every worker's figures for reserveFor's pass, in no
	// order (ixEntry.pos); ext counts the workers with extended resources,
	// which take the pass over the tree.
	dense []ixDense
	ext   int
}

// ixDense is what reserveFor reads of a worker, without its maps.
type ixDense struct {
	cpu, mem, gpus          int64 // free
	capCPU, capMem, capGPUs int64
	ordinal, id             int
	held                    bool // out of the tree while PlaceGroups holds it
}

// ixKey is a worker's place in the order.
type ixKey struct {
	gpus    int64 // free exclusive GPUs
	empty   bool  // nothing runs on it
	dir     int8  // direction of its free CPU and memory
	room    int64 // weighted free CPU and memory
	ordinal int
	id      int
	cpu     int64 // free millicores (not part of the order)
	mem     int64 // free bytes (not part of the order)
}

type ixEntry struct {
	key      ixKey
	pos      int                // in Index.dense
	ext      bool               // capacity or free has extended resources
	capacity capacity.Resources // GPUs: the number of indices
	free     capacity.Resources // GPUs: not exclusively held
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{tree: newIxForest(), entries: map[int]*ixEntry{}}
}

// Len returns the number of workers in the index.
func (x *Index) Len() int { return len(x.entries) }

// Set records worker id (the caller's key) with its ordinal, capacity and
// free capacity (free.GPUs: the GPUs no exclusive instance holds) as
// schedulable.
func (x *Index) Set(id, ordinal int, capacity, free capacity.Resources) {
	e := x.entries[id]
	if e == nil {
		e = &ixEntry{pos: len(x.dense)}
		x.entries[id] = e
		x.dense = append(x.dense, ixDense{})
	} else {
		x.tree.Delete(e.key)
		if e.ext {
			x.ext--
		}
	}
	e.capacity, e.free = capacity, free
	e.key = keyOf(id, ordinal, capacity, free)
	e.ext = capacity.Extended != nil || free.Extended != nil
	if e.ext {
		x.ext++
	}
	x.dense[e.pos] = ixDense{cpu: free.MilliCPU, mem: free.Memory, gpus: free.GPUs,
		capCPU: capacity.MilliCPU, capMem: capacity.Memory, capGPUs: capacity.GPUs, ordinal: ordinal, id: id}
	x.tree.ReplaceOrInsert(e.key)
}

// keyOf is a worker's key in the order.
func keyOf(id, ordinal int, capacity, free capacity.Resources) ixKey {
	return ixKey{gpus: free.GPUs, cpu: free.MilliCPU, mem: free.Memory, ordinal: ordinal, id: id,
		empty: free.MilliCPU == capacity.MilliCPU && free.Memory == capacity.Memory && free.GPUs == max(capacity.GPUs, 0),
		dir:   direction(free.MilliCPU, free.Memory), room: room(free)}
}

// Remove takes worker id out of the index (cordoned, gone); no-op when absent.
func (x *Index) Remove(id int) {
	if e := x.entries[id]; e != nil {
		x.tree.Delete(e.key)
		delete(x.entries, id)
		if e.ext {
			x.ext--
		}
		last := len(x.dense) - 1
		if e.pos != last {
			x.dense[e.pos] = x.dense[last]
			x.entries[x.dense[e.pos].id].pos = e.pos
		}
		x.dense = x.dense[:last]
	}
}

// Free returns the free capacity recorded for worker id.
func (x *Index) Free(id int) (capacity.Resources, bool) {
	e := x.entries[id]
	if e == nil {
		return capacity.Resources{}, false
	}
	return e.free, true
}

// Best returns the worker Place would choose for one simple instance of
// req: among the feasible workers with the fewest free GPUs, a busy one
// before an empty one, the nearest direction, the least free room, the
// lowest ordinal. ok is false when no worker fits.
func (x *Index) Best(req capacity.Resources) (id int, ok bool) {
	order := directionOrder(direction(req.MilliCPU, req.Memory))
	var extOK func(*ixKey) bool
	if len(req.Extended) > 0 {
		cm := cpuMem(req)
		extOK = func(k *ixKey) bool { return cm.Fits(x.entries[k.id].free) }
	}
	// A worker whose CPU and memory fit has at least the request's free
	// room, so the first that fits in a class's order is the first of
	// those with enough room that fits, as Place ranks them.
	f := &x.tree
	i, _ := slices.BinarySearch(f.levels, max(req.GPUs, 0))
	for _, level := range f.levels[i:] {
		lv := f.byGPU[level]
		for e := range lv.root {
			for _, d := range order {
				if t := f.first(lv.root[e][d], req.MilliCPU, req.Memory, extOK); t != 0 {
					return f.nodes[t].key.id, true
				}
			}
		}
	}
	return 0, false
}

// fitCount returns how many instances of req fit in free (capacity.MaxInt
// when req asks for nothing).
func fitCount(req, free capacity.Resources) int64 {
	n := int64(1<<62 - 1)
	dim := func(need, have int64) {
		if need > 0 {
			n = min(n, have/need)
		}
	}
	dim(req.MilliCPU, free.MilliCPU)
	dim(req.Memory, free.Memory)
	dim(req.GPUs, free.GPUs)
	for k, v := range req.Extended {
		dim(v, free.Extended[k])
	}
	return max(n, 0)
}

// Group is Count identical simple instances (exclusive, no target worker,
// no GPU indices) of one pool, queued at the same time.
type Group struct {
	// ID is the caller's name for the group, returned in assignments.
	ID int
	// Shape identifies the request: groups with equal Requests have equal
	// Shape. Once an instance of a shape does not fit, Place places no
	// later instance of it in the same call.
	Shape    int
	Requests capacity.Resources
	Count    int
	// QueuedAt is when the group's instances became pending.
	QueuedAt time.Time
	// Gang: the group's instances are placed all at once or not at all
	// (a gang, as Place does with Instance.Gang); a gang that does not fit
	// gives back what it took, fails no shape and gets no reservation.
	Gang bool
}

// GroupSource yields pending groups in FIFO order (the order Place would
// be handed their instances).
type GroupSource interface {
	// Next returns the oldest group not yet returned, of a shape not
	// failed; false when there is none.
	Next() (Group, bool)
	// Failed tells the source that shape fits nowhere for the rest of the
	// call: it need not return groups of it any more (those it returns are
	// skipped).
	Failed(shape int)
}

// GroupAssignment places Count instances of group Group on worker Worker.
type GroupAssignment struct {
	Group, Worker, Count int
}

// GroupResult is what PlaceGroups decided.
type GroupResult struct {
	// Assignments in the order Place would make them, instance by
	// instance, with consecutive instances on one worker as one entry.
	Assignments []GroupAssignment
	// Reserved is the worker held for a starved instance (-1 when none);
	// ReservedFor its group.
	Reserved, ReservedFor int
}

// PlaceGroups decides, like Place given the index's workers and the
// groups' instances one by one, where the groups' instances go: FIFO with
// backfill, the score's best worker, and a worker reserved for the first
// instance that has waited cfg.ReserveAfter and does not fit (nothing
// else goes there in this call). Consecutive instances of a group that
// go to one worker are placed at once (runLength). The index is updated
// with what is placed; a reserved worker is back in it at the end. out is
// reused for the assignments.
func (x *Index) PlaceGroups(src GroupSource, cfg Config, now time.Time, out []GroupAssignment) GroupResult {
	maxRes := cfg.MaxReservations
	if maxRes <= 0 {
		maxRes = 1
	}
	res := GroupResult{Assignments: out[:0], Reserved: -1, ReservedFor: -1}
	failed := map[int]bool{}
	var held []*ixEntry
	reservations := 0
	for {
		g, ok := src.Next()
		if !ok {
			break
		}
		if failed[g.Shape] {
			continue
		}
		left := g.Count
		mark := len(res.Assignments)
		var undo []ixUndo
		for left > 0 {
			id, ok := x.Best(g.Requests)
			if !ok {
				break
			}
			e := x.entries[id]
			if g.Gang {
				undo = append(undo, ixUndo{id: id, free: e.free})
			}
			m := x.runLength(e, g.Requests, int(min(fitCount(g.Requests, e.free), int64(left))))
			free := e.free.Sub(cpuMem(g.Requests).Scale(int64(m)))
			free.GPUs = e.free.GPUs - max(g.Requests.GPUs, 0)*int64(m)
			x.Set(id, e.key.ordinal, e.capacity, free)
			if k := len(res.Assignments) - 1; k >= 0 && res.Assignments[k].Group == g.ID && res.Assignments[k].Worker == id {
				res.Assignments[k].Count += m // still the best after a change of direction
			} else {
				res.Assignments = append(res.Assignments, GroupAssignment{Group: g.ID, Worker: id, Count: m})
			}
			left -= m
		}
		if left == 0 {
			continue
		}
		if g.Gang {
			for k := len(undo) - 1; k >= 0; k-- {
				e := x.entries[undo[k].id]
				x.Set(undo[k].id, e.key.ordinal, e.capacity, undo[k].free)
			}
			res.Assignments = res.Assignments[:mark]
			continue
		}
		failed[g.Shape] = true
		src.Failed(g.Shape)
		starved := cfg.ReserveAfter > 0 && !g.QueuedAt.IsZero() && now.Sub(g.QueuedAt) >= cfg.ReserveAfter
		if starved && reservations < maxRes {
			if e := x.reserveFor(g.Requests); e != nil {
				reservations++
				if res.Reserved < 0 {
					res.Reserved, res.ReservedFor = e.key.id, g.ID
				}
				x.tree.Delete(e.key)
				x.dense[e.pos].held = true
				held = append(held, e)
			}
		}
	}
	for _, e := range held {
		x.dense[e.pos].held = false
		x.tree.ReplaceOrInsert(e.key)
	}
	return res
}

// runLength returns how many of up to fit more instances of req Place
// would put on e, the best worker for the first one, before another
// worker becomes the best: all of them when e was empty (no busy worker of
// its GPU level fitted, and none does later) or when req asks for GPUs
// (each placement takes e down to a GPU level where nothing else fitted);
// otherwise while the direction of e's free vector stays the same (its
// free room only shrinks, so it stays first of its class).
func (x *Index) runLength(e *ixEntry, req capacity.Resources, fit int) int {
	if fit <= 1 {
		return 1
	}
	if e.key.empty || req.GPUs > 0 {
		return fit
	}
	m := 1
	cpu, mem := e.free.MilliCPU, e.free.Memory
	for m < fit {
		cpu, mem = cpu-req.MilliCPU, mem-req.Memory
		if direction(cpu, mem) != e.key.dir {
			break
		}
		m++
	}
	return m
}

// reserveFor returns the worker Place's reserveFor picks for req: one that
// could hold it empty, with the smallest shortfall now, the lowest ordinal
// among equals (Place looks at workers in the order given, by ordinal in
// the simulator).
func (x *Index) reserveFor(req capacity.Resources) *ixEntry {
	if len(req.Extended) == 0 && x.ext == 0 {
		return x.reserveForDense(req)
	}
	return x.reserveForWalk(req)
}

// reserveForWalk is reserveFor by a walk over the tree in its order.
func (x *Index) reserveForWalk(req capacity.Resources) *ixEntry {
	var best *ixEntry
	bestDef := 0.0
	x.tree.Ascend(func(k ixKey) bool {
		e := x.entries[k.id]
		if !cpuMem(req).Fits(cpuMem(e.capacity)) || max(req.GPUs, 0) > e.capacity.GPUs {
			return true
		}
		d := deficitOf(req, e.free, e.capacity)
		if best == nil || d < bestDef || (d == bestDef && e.key.ordinal < best.key.ordinal) {
			best, bestDef = e, d
		}
		return true
	})
	return best
}

// reserveForDense is reserveFor's answer for a request and workers
// without extended resources, from one pass over dense, which holds the
// same figures without the tree walk and the map look-ups. Dense is in no
// order, so a tie of shortfall and ordinal goes to the worker first in the
// tree's order, as the walk in that order finds it.
func (x *Index) reserveForDense(req capacity.Resources) *ixEntry {
	frac := func(need, free, total int64) float64 {
		if need <= free || total <= 0 {
			return 0
		}
		return float64(need-free) / float64(total)
	}
	gpus := max(req.GPUs, 0)
	best := -1
	bestDef := 0.0
	for i := range x.dense {
		w := &x.dense[i]
		if w.held || req.MilliCPU > w.capCPU || req.Memory > w.capMem || gpus > w.capGPUs {
			continue
		}
		// deficitOf, in its order of additions.
		d := frac(req.MilliCPU, w.cpu, w.capCPU) + frac(req.Memory, w.mem, w.capMem) + frac(gpus, w.gpus, w.capGPUs)
		if best < 0 || d < bestDef {
			best, bestDef = i, d
			continue
		}
		if b := &x.dense[best]; d == bestDef && (w.ordinal < b.ordinal ||
			w.ordinal == b.ordinal && treeBefore(x.entries[w.id].key, x.entries[b.id].key)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	return x.entries[x.dense[best].id]
}

// treeBefore reports whether a comes before b in the index's order.
func treeBefore(a, b ixKey) bool {
	switch {
	case a.gpus != b.gpus:
		return a.gpus < b.gpus
	case a.empty != b.empty:
		return !a.empty
	case a.dir != b.dir:
		return a.dir < b.dir
	}
	return inClass(&a, &b)
}

// deficitOf is node.deficit for a simple instance: how far free is from
// fitting req, as a sum of fractions of capacity per dimension.
func deficitOf(req, free, total capacity.Resources) float64 {
	frac := func(need, free, total int64) float64 {
		if need <= free || total <= 0 {
			return 0
		}
		return float64(need-free) / float64(total)
	}
	d := frac(req.MilliCPU, free.MilliCPU, total.MilliCPU) +
		frac(req.Memory, free.Memory, total.Memory) +
		frac(max(req.GPUs, 0), free.GPUs, total.GPUs)
	for k, v := range req.Extended {
		d += frac(v, free.Extended[k], total.Extended[k])
	}
	return d
}

// ixUndo is a worker's free room before a gang's placement took from it.
type ixUndo struct {
	id   int
	free capacity.Resources
}
