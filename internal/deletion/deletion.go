// Package deletion plans scale-down through deletion marks, the reconcile
// stage of seed 001 (the GPU NodeProvisioner): an empty node chosen for
// removal is marked with a timestamp, deleted only once the mark is older than
// the scale-down delay, and un-marked if the target size rises again. One
// action is taken per loop.
//
// The planner is pure; both the utilization policy (to show the marks it
// would set) and the reconciler (to carry them out) call Next.
package deletion

import (
	"cmp"
	"slices"
	"time"
)

// Node is a node as the planner sees it.
type Node struct {
	// ID names the node.
	ID string
	// Ordinal is the node's rank; marks go to the highest ordinals first.
	Ordinal int
	// Busy is true while the node runs non-daemon work: it is never marked
	// and never deleted, and a mark it carries is removed.
	Busy bool
	// Protected nodes (the pool's first node) are never marked nor deleted,
	// and a mark they carry is removed.
	Protected bool
	// MarkedAt is when the node was marked; zero when unmarked.
	MarkedAt time.Time
}

// Action is what one loop does.
type Action int

// The actions, at most one per loop.
const (
	None Action = iota
	Mark
	Unmark
	Delete
)

// String names the action.
func (a Action) String() string {
	return [...]string{"none", "mark", "unmark", "delete"}[a]
}

// Plan is the one action to take and the nodes it applies to.
type Plan struct {
	Action Action
	IDs    []string
}

// Next returns the one action that brings the marks of a pool of len(nodes)
// nodes toward target:
//
//  1. marks on busy or protected nodes, and marks beyond the excess
//     (len(nodes) - target), are removed (newest marks first);
//  2. otherwise marked nodes whose mark is at least delay old are deleted;
//  3. otherwise empty, unprotected, unmarked nodes are marked (highest
//     ordinal first) until the marked count equals the excess;
//  4. otherwise nothing.
//
// Growing the pool (len(nodes) < target) is the caller's business; Next then
// only removes marks.
func Next(nodes []Node, target int, now time.Time, delay time.Duration) Plan {
	excess := max(len(nodes)-target, 0)
	var marked, busyMarked []Node
	for _, n := range nodes {
		if n.MarkedAt.IsZero() {
			continue
		}
		if n.Busy || n.Protected {
			// Never delete a busy or protected node, whoever marked it.
			busyMarked = append(busyMarked, n)
		} else {
			marked = append(marked, n)
		}
	}
	if len(busyMarked) > 0 || len(marked) > excess {
		out := idsOf(busyMarked)
		if over := len(marked) - excess; over > 0 {
			// Newest marks first: they have waited least.
			slices.SortFunc(marked, func(a, b Node) int {
				if c := b.MarkedAt.Compare(a.MarkedAt); c != 0 {
					return c
				}
				return cmp.Compare(a.Ordinal, b.Ordinal)
			})
			out = append(out, idsOf(marked[:over])...)
		}
		return Plan{Action: Unmark, IDs: out}
	}
	var due []Node
	for _, n := range marked {
		if !now.Before(n.MarkedAt.Add(delay)) {
			due = append(due, n)
		}
	}
	if len(due) > 0 {
		sortByOrdinalDesc(due)
		return Plan{Action: Delete, IDs: idsOf(due)}
	}
	if want := excess - len(marked); want > 0 {
		var eligible []Node
		for _, n := range nodes {
			if n.MarkedAt.IsZero() && !n.Busy && !n.Protected {
				eligible = append(eligible, n)
			}
		}
		sortByOrdinalDesc(eligible)
		if len(eligible) > want {
			eligible = eligible[:want]
		}
		if len(eligible) > 0 {
			return Plan{Action: Mark, IDs: idsOf(eligible)}
		}
	}
	return Plan{}
}

func sortByOrdinalDesc(ns []Node) {
	slices.SortFunc(ns, func(a, b Node) int { return cmp.Compare(b.Ordinal, a.Ordinal) })
}

func idsOf(ns []Node) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}
