package capacity

import (
	"time"

	"github.com/tide-project/tide/internal/validate"
)

// Instance is one running unit of work as the autoscaler sees it: what it
// requested and whether it is a daemon. Daemons run on every node and never
// hold a node up (ECS CAS): a node running only daemons counts as empty.
type Instance struct {
	Requests Resources `json:"requests"`
	Daemon   bool      `json:"daemon,omitempty"`
	// Count, when above 1, is the number of identical instances the entry
	// stands for, Requests being their sum (the simulator reports a group
	// of replicas on one node as one entry); 0 or 1 is one instance.
	Count int `json:"count,omitempty"`
}

// Instances returns the number of instances the entry stands for.
func (in *Instance) Instances() int { return max(in.Count, 1) }

// Each returns what one of the entry's instances requests: Requests
// divided by Count.
func (in *Instance) Each() Resources {
	n := int64(in.Instances())
	if n == 1 {
		return in.Requests
	}
	r := in.Requests
	out := Resources{MilliCPU: r.MilliCPU / n, Memory: r.Memory / n, GPUs: r.GPUs / n}
	if len(r.Extended) > 0 {
		out.Extended = make(map[string]int64, len(r.Extended))
		for k, v := range r.Extended {
			out.Extended[k] = v / n
		}
	}
	return out
}

// Node is one node of a pool as the autoscaler sees it.
type Node struct {
	// ID is the node's name, unique in its pool.
	ID string `json:"id"`
	// Ordinal is the node's rank in its pool (0 is the first node, the one a
	// pool may protect). Victims are chosen highest ordinal first.
	Ordinal int `json:"ordinal"`
	// Resources is the node's allocatable capacity.
	Resources Resources `json:"resources"`
	// Running lists the instances placed on the node.
	Running []Instance `json:"running,omitempty"`
	// MarkedAt is when the node was marked for deletion; zero when unmarked.
	MarkedAt time.Time `json:"marked_at,omitzero"`
	// IdleSince is when the node last became empty of non-daemon work; zero
	// when busy or unknown.
	IdleSince time.Time `json:"idle_since,omitzero"`
	// JoinedAt is when the node joined (its worker registered); zero when
	// unknown. Target-tracking's instance warm-up holds a node that joined
	// recently out of its metric.
	JoinedAt time.Time `json:"joined_at,omitzero"`

	// sums caches what Running adds up to (Summarize); zero: not cached.
	sums nodeSums
}

// nodeSums is what a node's Running adds up to, as Busy, Kinds,
// Allocated and Pressure.Inflight compute it.
type nodeSums struct {
	ok        bool
	busy      bool // a non-daemon instance runs
	daemons   bool // a daemon instance runs
	inflight  int  // non-daemon instances (saturated)
	allocated Resources
}

// Summarize computes once what Running adds up to (whether the node is
// busy, runs daemons, how many non-daemon instances and how much it
// allocates), so that Busy, Kinds, Allocated, Free and Pressure.Inflight
// answer without a pass over Running. A producer that builds a report
// entry calls it after setting Running and does not change Running
// afterwards (an entry whose Running changes must be built and summarized
// anew); an entry never summarized computes each answer from Running. A
// sum with extended resources is not cached (Allocated hands out a map
// its caller may keep).
func (n *Node) Summarize() {
	s := nodeSums{ok: true}
	var cpu, mem, gpus int64
	for i := range n.Running {
		in := &n.Running[i]
		if len(in.Requests.Extended) > 0 {
			n.sums = nodeSums{}
			return
		}
		if in.Daemon {
			s.daemons = true
		} else {
			s.busy = true
			s.inflight = validate.Add(s.inflight, in.Instances())
		}
		// Allocated's sum (Resources.Add) without extended resources.
		cpu, mem, gpus = cpu+in.Requests.MilliCPU, mem+in.Requests.Memory, gpus+in.Requests.GPUs
	}
	s.allocated = Resources{MilliCPU: cpu, Memory: mem, GPUs: gpus}
	n.sums = s
}

// SetSums records what Running adds up to as its producer keeps it, for
// a producer that tracks the sums as work comes and goes and need not add
// Running up again (Summarize's answers without its pass): what the
// instances allocate, whether a non-daemon instance runs (busy), whether a
// daemon does, and the number of non-daemon instances. The producer
// vouches for them; an allocation with extended resources is not cached.
func (n *Node) SetSums(allocated Resources, busy, daemons bool, inflight int) {
	if allocated.Extended != nil {
		n.sums = nodeSums{}
		return
	}
	n.sums = nodeSums{ok: true, busy: busy, daemons: daemons, inflight: inflight, allocated: allocated}
}

// Kinds reports whether the node runs non-daemon work (busy) and whether
// it runs daemons.
func (n *Node) Kinds() (busy, daemons bool) {
	if n.sums.ok {
		return n.sums.busy, n.sums.daemons
	}
	for i := range n.Running {
		if n.Running[i].Daemon {
			daemons = true
		} else {
			busy = true
		}
	}
	return busy, daemons
}

// Busy reports whether the node runs at least one non-daemon instance.
func (n *Node) Busy() bool {
	if n.sums.ok {
		return n.sums.busy
	}
	for i := range n.Running {
		if !n.Running[i].Daemon {
			return true
		}
	}
	return false
}

// Allocated returns the sum of the requests of every instance on the node.
func (n *Node) Allocated() Resources {
	if n.sums.ok {
		return n.sums.allocated
	}
	var sum Resources
	for i := range n.Running {
		sum = sum.Add(n.Running[i].Requests)
	}
	return sum
}

// Free returns the node's capacity minus what is allocated on it.
func (n *Node) Free() Resources { return n.Resources.Sub(n.Allocated()) }

// Pending is a group of identical instances waiting for capacity.
type Pending struct {
	Requests Resources `json:"requests"`
	Count    int       `json:"count"`
	// Priority is the priority of these instances (0 when omitted):
	// policies buy for higher priorities first, and a pool's
	// expendable_below keeps low ones from causing a scale-up.
	Priority int `json:"priority,omitempty"`
	// Gang names the gang these instances belong to ("" for none): a
	// gang's instances are bought for all at once or not at all.
	Gang string `json:"gang,omitempty"`
}

// Pressure is the scheduler's report for one pool: its nodes with what runs
// on them, and the instances waiting that the pool is meant to serve. The
// scheduler publishes one on every change; policies read nothing else.
type Pressure struct {
	Nodes   []Node    `json:"nodes"`
	Pending []Pending `json:"pending"`
	// Finished and FinishedRequests are counters: how many instances
	// finished on the pool's nodes since the reporter started, and the sum
	// of their requests (instances stopped to be requeued do not count). A
	// policy reads how fast running work frees capacity, and in what
	// pieces, from their growth between two reports; a value below the
	// last one's means the reporter restarted. Zero: not reported.
	Finished         int       `json:"finished,omitempty"`
	FinishedRequests Resources `json:"finished_requests,omitzero"`
}

// Queued returns the number of waiting instances, saturated at
// math.MaxInt (negative counts, which validation refuses, count as none).
func (p *Pressure) Queued() int {
	n := 0
	for i := range p.Pending {
		n = validate.Add(n, max(p.Pending[i].Count, 0))
	}
	return n
}

// Inflight returns the number of running non-daemon instances.
func (p *Pressure) Inflight() int {
	n := 0
	for i := range p.Nodes {
		if s := &p.Nodes[i].sums; s.ok {
			n = validate.Add(n, s.inflight)
			continue
		}
		for j := range p.Nodes[i].Running {
			if in := &p.Nodes[i].Running[j]; !in.Daemon {
				n = validate.Add(n, in.Instances())
			}
		}
	}
	return n
}

// BusyNodes returns the number of nodes running at least one non-daemon instance.
func (p *Pressure) BusyNodes() int {
	n := 0
	for i := range p.Nodes {
		if p.Nodes[i].Busy() {
			n++
		}
	}
	return n
}
