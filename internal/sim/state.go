package sim

import (
	"container/heap"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// group is Count instances of one job that share their fate: queued
// together (arrived together, or requeued together from one node), or
// running on one node since one instant. A group is split when its
// members' fates part: some placed on one node, the rest elsewhere or
// still waiting.
type group struct {
	job   int32
	shape int32
	count int32
	state instState
	// ran: its instances started before (a requeued group): their wait
	// is counted once, at their first start.
	ran bool
	// moved: consolidation moved its instances once; never again.
	moved bool
	// seq orders the queue (FIFO); it is drawn each time the group is
	// queued, so a requeued group goes to the back.
	seq    int64
	queued time.Time // when it (last) became pending
	// node is the node it runs on (nil unless running); pos its index in
	// node.groups.
	node    *node
	pos     int32
	run     uint64    // this run's number: a completion of another is stale
	started time.Time // start of the current run
}

type instState uint8

const (
	instFree    instState = iota // slot unused
	instQueued                   // pending
	instRunning                  // placed
)

// qentry is a group in a shape's queue, valid while the group is queued
// with that seq.
type qentry struct {
	g   int32
	seq int64
}

// shapeQueue is the FIFO of the pending groups of one request shape.
// Entries no longer queued are skipped.
type shapeQueue struct {
	items []qentry
	head  int
	n     int // queued instances
}

func (q *shapeQueue) push(g int32, seq int64) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, qentry{g: g, seq: seq})
}

// node is a machine that joined the cluster: a scheduler worker.
type node struct {
	machine  string
	ordinal  int
	offering string
	capacity capacity.Resources
	alloc    capacity.Resources // CPU, memory and GPU count of what runs
	groups   []int32            // the groups running on it
	ninst    int                // instances running on it
	// running lists what runs, one entry per instance, for the pressure
	// report; rebuilt from groups when stale.
	running []capacity.Instance
	stale   bool
	// repPos is the node's index in the pressure report's Nodes while the
	// report's list of nodes is current (engine.nodesMoved unset).
	repPos int
	// ixFree is the free space last recorded in the placement index
	// (meaningful while indexed).
	ixFree capacity.Resources
	// indexed: the node is in the placement index (joined, not cordoned).
	indexed bool
	// idlePos is the node's index in engine.idle, -1 when busy or gone.
	idlePos int
	// cordoned: the controller stopped dispatch (a drain).
	cordoned bool
	// idleSince is when the node last became empty (its join time when
	// it never ran anything).
	idleSince time.Time
	// joinedAt is when the node joined (capacity.Node.JoinedAt).
	joinedAt time.Time
	// ctlJoined: the controller reported the node joined to its
	// reconciler, so busy reports about it count; told is the busy state
	// last reported.
	ctlJoined, told bool
}

func (n *node) schedulable() bool { return !n.cordoned }

func (n *node) busy() bool { return n.ninst > 0 }

// waitCount is a wait shared by count instances.
type waitCount struct {
	sec   float64
	count int64
}

// evKind is what an engine event does.
type evKind uint8

const (
	evArrival    evKind = iota // the next job arrives
	evCompletion               // an instance's run ends
	evTick                     // the controller's reconcile tick
	evWake                     // a policy evaluation the policy's state asks for
)

// event is one entry of the engine's heap.
type event struct {
	at   time.Time
	seq  uint64 // order of scheduling: ties keep it
	kind evKind
	grp  int32  // evCompletion: the group
	gen  uint64 // evCompletion: the run it ends; evTick, evWake: generation
}

// eventHeap is a min-heap of events by (at, seq), for container/heap.
type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	ev := old[len(old)-1]
	*h = old[:len(old)-1]
	return ev
}

// queue holds the engine's event heap and its tie-breaker.
type queue struct {
	h   eventHeap
	seq uint64
}

func (q *queue) push(ev event) {
	q.seq++
	ev.seq = q.seq
	heap.Push(&q.h, ev)
}

func (q *queue) peek() (time.Time, bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].at, true
}

func (q *queue) pop() event { return heap.Pop(&q.h).(event) }
