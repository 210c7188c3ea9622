package scheduler

import (
	"time"

	"github.com/google/btree"

	"github.com/tide-project/tide/internal/capacity"
)

// Index keeps a pool's schedulable workers ordered as Place ranks them for a
// simple instance (exclusive, no target worker, no GPU indices), so that
// the best worker for a request is found without looking at every worker:
// Place's score orders the workers that fit by free exclusive GPUs, then
// free CPU, then free memory, then ordinal, for any such request (a
// GPU-less request's "GPUs wasted" is the free GPU count itself). The index
// holds that order in a B-tree; the best fit is the first entry, from the
// request's GPUs and CPU on, whose memory (and extended resources) fit.
//
// It is the caller's mirror of its workers: Set a worker when its free
// capacity changes or it becomes schedulable, Remove it when it is
// cordoned or leaves. PlaceGroups decides like Place would for the same
// workers and the same instances one by one, and keeps the index up to
// date with what it places. Pure: no I/O, time is an argument.
type Index struct {
	tree    *btree.BTreeG[ixKey]
	entries map[int]*ixEntry
}

// ixKey is a worker's place in the order.
type ixKey struct {
	gpus, cpu, mem int64 // free exclusive GPUs, millicores, bytes
	ordinal        int
	id             int
}

func (a ixKey) less(b ixKey) bool {
	switch {
	case a.gpus != b.gpus:
		return a.gpus < b.gpus
	case a.cpu != b.cpu:
		return a.cpu < b.cpu
	case a.mem != b.mem:
		return a.mem < b.mem
	case a.ordinal != b.ordinal:
		return a.ordinal < b.ordinal
	}
	return a.id < b.id
}

type ixEntry struct {
	key      ixKey
	capacity capacity.Resources // GPUs: the number of indices
	free     capacity.Resources // GPUs: not exclusively held
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{tree: btree.NewG(16, ixKey.less), entries: map[int]*ixEntry{}}
}

// Len returns the number of workers in the index.
func (x *Index) Len() int { return len(x.entries) }

// Set records worker id (the caller's key) with its ordinal, capacity and
// free capacity (free.GPUs: the GPUs no exclusive instance holds) as
// schedulable.
func (x *Index) Set(id, ordinal int, capacity, free capacity.Resources) {
	e := x.entries[id]
	if e == nil {
		e = &ixEntry{}
		x.entries[id] = e
	} else {
		x.tree.Delete(e.key)
	}
	e.capacity, e.free = capacity, free
	e.key = ixKey{gpus: free.GPUs, cpu: free.MilliCPU, mem: free.Memory, ordinal: ordinal, id: id}
	x.tree.ReplaceOrInsert(e.key)
}

// Remove takes worker id out of the index (cordoned, gone); no-op when absent.
func (x *Index) Remove(id int) {
	if e := x.entries[id]; e != nil {
		x.tree.Delete(e.key)
		delete(x.entries, id)
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
// req: the feasible worker with the least free room, by free GPUs, CPU,
// memory, then ordinal. ok is false when no worker fits.
func (x *Index) Best(req capacity.Resources) (id int, ok bool) {
	need := max(req.GPUs, 0)
	pivot := ixKey{gpus: need, cpu: req.MilliCPU, mem: -1 << 63, ordinal: -1 << 62, id: -1 << 62}
	for {
		next := int64(-1)
		x.tree.AscendGreaterOrEqual(pivot, func(k ixKey) bool {
			if k.gpus != pivot.gpus {
				// The next GPU level: seek its first entry with enough CPU.
				next = k.gpus
				return false
			}
			if k.cpu < req.MilliCPU || k.mem < req.Memory {
				return true
			}
			if len(req.Extended) > 0 && !cpuMem(req).Fits(x.entries[k.id].free) {
				return true
			}
			id, ok = k.id, true
			return false
		})
		if ok || next < 0 {
			return id, ok
		}
		pivot.gpus = next
	}
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
// backfill, best fit, and a worker reserved for the first instance that
// has waited cfg.ReserveAfter and does not fit (nothing else goes there
// in this call). A group whose instances go to one worker is placed at
// once: the best worker stays the best while it still fits more of the
// same shape (placing lowers its free room and nothing else). The index
// is updated with what is placed; a reserved worker is back in it at the
// end. out is reused for the assignments.
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
		for left > 0 {
			id, ok := x.Best(g.Requests)
			if !ok {
				break
			}
			e := x.entries[id]
			m := int(min(fitCount(g.Requests, e.free), int64(left)))
			if m <= 0 { // cannot happen: Best checked that one fits
				m = 1
			}
			free := e.free.Sub(cpuMem(g.Requests).Scale(int64(m)))
			free.GPUs = e.free.GPUs - max(g.Requests.GPUs, 0)*int64(m)
			x.Set(id, e.key.ordinal, e.capacity, free)
			res.Assignments = append(res.Assignments, GroupAssignment{Group: g.ID, Worker: id, Count: m})
			left -= m
		}
		if left == 0 {
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
				held = append(held, e)
			}
		}
	}
	for _, e := range held {
		x.tree.ReplaceOrInsert(e.key)
	}
	return res
}

// reserveFor returns the worker Place's reserveFor picks for req: one that
// could hold it empty, with the smallest shortfall now, the lowest ordinal
// among equals (Place looks at workers in the order given, by ordinal in
// the simulator).
func (x *Index) reserveFor(req capacity.Resources) *ixEntry {
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
