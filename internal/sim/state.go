package sim

import (
	"container/heap"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// instance is one replica of a job, from its arrival to its completion.
type instance struct {
	id    string // decimal index, the scheduler's instance id
	job   int32
	shape int32
	// seq orders the queue (FIFO); it grows each time the instance is
	// queued, so a requeued instance goes to the back.
	seq    int64
	queued time.Time // when it (last) became pending
	state  instState
	// node is the node it runs on (nil unless running); pos its index in
	// node.running.
	node *node
	pos  int
	gpus []int // GPU indices it holds
	// run counts its starts; a completion event of an earlier run is stale.
	run     int32
	started time.Time // start of the current run
}

type instState uint8

const (
	instWaiting instState = iota // not yet arrived
	instQueued                   // pending
	instRunning                  // placed
	instDone                     // completed
)

// shapeQueue is the FIFO of the pending instances of one request shape.
// Entries are instance indexes; entries no longer queued are skipped.
type shapeQueue struct {
	items []int32
	head  int
	n     int // queued instances in items[head:]
}

func (q *shapeQueue) push(i int32) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, i)
	q.n++
}

// node is a machine that joined the cluster: a scheduler worker.
type node struct {
	machine  string
	ordinal  int
	offering string
	capacity capacity.Resources
	alloc    capacity.Resources // CPU, memory and GPU count of what runs
	gpuUsed  []bool
	running  []capacity.Instance // what runs, for the pressure report
	runIDs   []int32             // the instance of each entry of running
	// cordoned: the controller stopped dispatch (a drain).
	cordoned bool
	// idleSince is when the node last became empty (its join time when
	// it never ran anything).
	idleSince time.Time
	// ctlJoined: the controller reported the node joined to its
	// reconciler, so busy reports about it count; told is the busy state
	// last reported.
	ctlJoined, told bool
}

func (n *node) schedulable() bool { return !n.cordoned }

func (n *node) busy() bool { return len(n.running) > 0 }

// usedGPUs returns the indices of the GPUs in use.
func (n *node) usedGPUs() []int {
	var out []int
	for g, used := range n.gpuUsed {
		if used {
			out = append(out, g)
		}
	}
	return out
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
	inst int32 // evCompletion: the instance
	run  int32 // evCompletion: the run it ends
	gen  uint64
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
