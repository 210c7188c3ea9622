package policy

import (
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// peerView is a pool's nodes as the peer policies (karpenter,
// cluster-autoscaler) count them: nodes marked for deletion are on their
// way out and count for nothing.
type peerView struct {
	unmarked int // nodes not marked for deletion
	busy     int // unmarked nodes running non-daemon work
	marked   int // nodes marked for deletion
	// nodes are the indexes (into Pressure.Nodes) of the unmarked nodes.
	nodes []int
	// free is the free space of each unmarked node, in report order; built
	// by freeSpace when a purchase needs it (most evaluations buy nothing).
	free []capacity.Resources
	// empty are the indexes (into Pressure.Nodes) of the unmarked nodes
	// running no non-daemon work, with the time each became empty (zero
	// when unknown).
	empty []int
	// daemons is the most daemons take on one node: a new node has that
	// much less room.
	daemons capacity.Resources
}

func newPeerView(in *Input) peerView {
	v := peerView{nodes: make([]int, 0, len(in.Pressure.Nodes))}
	for i := range in.Pressure.Nodes {
		n := &in.Pressure.Nodes[i]
		if !n.MarkedAt.IsZero() {
			v.marked++
			continue
		}
		v.unmarked++
		v.nodes = append(v.nodes, i)
		busy, daemons := n.Kinds()
		if daemons {
			v.daemons = tideMax(v.daemons, tideDaemons(n))
		}
		if busy {
			v.busy++
		} else {
			v.empty = append(v.empty, i)
		}
	}
	return v
}

// freeSpace returns the free space of each unmarked node, in report order,
// building it on the first call.
func (v *peerView) freeSpace(in *Input) []capacity.Resources {
	if v.free == nil {
		v.free = freeOf(in.Pressure.Nodes, v.nodes)
	}
	return v.free
}

// freeOf returns the free space of nodes[i] for each i of idx, in order.
func freeOf(nodes []capacity.Node, idx []int) []capacity.Resources {
	free := make([]capacity.Resources, len(idx))
	for j, i := range idx {
		free[j] = nodes[i].Free()
	}
	return free
}

// emptyFor returns how many empty nodes of v have been empty for at least
// d at now, and the earliest time a further one will be (zero: none).
func (v *peerView) emptyFor(in *Input, d time.Duration) (n int, next time.Time) {
	for _, i := range v.empty {
		since := in.Pressure.Nodes[i].IdleSince
		if since.IsZero() {
			continue // unknown: not known to be empty long enough
		}
		if due := since.Add(d); !in.Now.Before(due) {
			n++
		} else if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return n, next
}

// offerings returns the pool's offerings less the daemons' share.
func (v *peerView) offerings(cfg *Config) []capacity.Offering {
	if v.daemons.IsZero() {
		return cfg.Offerings
	}
	offs := make([]capacity.Offering, len(cfg.Offerings))
	for i, o := range cfg.Offerings {
		o.Resources = o.Resources.Sub(v.daemons)
		offs[i] = o
	}
	return offs
}

// peerClamp clamps d.Desired to the pool's bounds and says so in the reason.
func peerClamp(cfg *Config, d *Decision) {
	clamped := cfg.Nodes.Clamp(d.Desired)
	if clamped == d.Desired {
		return
	}
	if d.Desired > cfg.Nodes.Max {
		d.Reason = NewReason(CodeAtMax, "the pool needs %d nodes; held at max %d", int64(d.Desired), int64(cfg.Nodes.Max))
	} else {
		d.Reason = NewReason(CodeAtMin, "the pool needs %d nodes; held at min %d", int64(d.Desired), int64(cfg.Nodes.Min))
	}
	d.Desired = clamped
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// buyNew packs the backlog of in into the free space of v's nodes and buys
// the cheapest mix of new nodes for the rest (binpack.Buy over offs, the
// offerings out of capacity excluded).
func buyNew(cfg *Config, in *Input, v *peerView, offs []capacity.Offering, maxNew int) binpack.Purchase {
	return binpack.Buy(in.Pressure.Pending, offs, binpack.BuyOptions{Free: v.freeSpace(in), MaxNodes: maxNew,
		Limit: tideLimits(cfg.Offerings, in.Unavailable)})
}
