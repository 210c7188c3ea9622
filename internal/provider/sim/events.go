package sim

import "time"

// eventKind is what happens when an event comes due.
type eventKind uint8

const (
	evDone    eventKind = iota // the machine's transition finishes
	evTimeout                  // the machine's transition times out: Failed
	evNotice                   // a spot interruption notice is given
	evReclaim                  // a spot machine is taken back
)

// event is one pending happening, applied when the clock reaches at.
type event struct {
	at   time.Time
	seq  uint64 // scheduling order: breaks ties between events due at once
	kind eventKind
	id   string
	// gen is the machine's gen when a done or timeout event was scheduled.
	gen uint64
	// reclaim is the reclaim time a notice announces.
	reclaim time.Time
}

// eventQueue is a min-heap of events by (at, seq), for container/heap.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }

func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}

func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *eventQueue) Push(x any) { *q = append(*q, x.(event)) }

func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	ev := old[n-1]
	*q = old[:n-1]
	return ev
}
