// Package consolidate decides which under-used nodes of a pool to empty by
// moving their work elsewhere, within a disruption budget.
//
// Only work that says it may move is ever moved: an instance submitted with
// restartable set, not labelled do-not-disrupt (DoNotDisruptLabel). A node
// running any other non-daemon instance is never a candidate, so no
// non-restartable instance is ever disrupted by consolidation.
//
// Decide is pure: it reads its Input (the pool's nodes with what runs on
// them, the time as an argument) and returns the moves with the saving each
// expects and the reason, or why it moves nothing. A move is taken when
//
//   - the node is under-used: its allocation is at most MaxUtilization % of
//     its capacity in every dimension;
//   - every instance on it is restartable (daemons aside), none is marked
//     do-not-disrupt and none was moved before (an instance moves at most
//     once, so churn never starves it), and the node is neither protected
//     nor cordoned;
//   - its instances all fit the free space of the pool's other busy nodes
//     (binpack.Pack, first fit decreasing over the fullest nodes first, no
//     new node), after the moves already chosen in the same decision; the
//     move names where each instance goes (Move.Targets), so that whoever
//     carries it out places the work there and not where a placement
//     score would spread it;
//   - the saving, the node's price over Horizon, outweighs the work lost:
//     the time each moved instance has run in its current attempt × its
//     share of the node (its dominant share of the node's capacity) × the
//     node's price (Config.IgnoreLostWork skips this test, as Karpenter
//     does);
//   - the budget allows it: the most restrictive budget active at Now, less
//     the nodes already being disrupted (Karpenter's
//     allowed = roundup(total × pct) − deleting).
//
// Nothing moves while work waits for capacity (the free space is about to be
// used) or, for the same reason, onto empty nodes: they are the
// scale-down's to remove.
package consolidate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// DoNotDisruptLabel is the instance label that keeps consolidation away from
// the instance's node: an instance labelled DoNotDisruptLabel=true is never
// moved, restartable or not (Karpenter's karpenter.sh/do-not-disrupt).
const DoNotDisruptLabel = "tide.dev/do-not-disrupt"

// DoNotDisrupt reports whether labels carry the do-not-disrupt marker.
func DoNotDisrupt(labels map[string]string) bool { return labels[DoNotDisruptLabel] == "true" }

// Instance is one instance running on a node, as consolidation sees it.
type Instance struct {
	// ID names the instance.
	ID string
	// Requests is what it holds on the node.
	Requests capacity.Resources
	// Restartable: it may be stopped and started again elsewhere.
	Restartable bool
	// DoNotDisrupt: it is never moved (DoNotDisruptLabel).
	DoNotDisrupt bool
	// Daemon: it runs on every node and never holds a node up; it is not
	// moved (it ends with its node).
	Daemon bool
	// StartedAt is when its current attempt started (assignment): the work
	// a move loses runs from then. Zero counts as no work lost.
	StartedAt time.Time
	// Count is how many identical instances the entry stands for (started
	// together; the simulator's groups); 0 counts as 1.
	Count int
	// Moved: it was moved (or restarted) before. It is not moved again, so
	// that churn can never keep an instance from finishing.
	Moved bool
}

// count is the number of instances the entry stands for.
func (in *Instance) count() int { return max(in.Count, 1) }

// Node is one node of the pool.
type Node struct {
	// ID names the node (its worker or machine).
	ID string
	// Ordinal is its rank in the pool; ties go to the highest ordinal.
	Ordinal int
	// Capacity is its allocatable resources.
	Capacity capacity.Resources
	// PricePerHour is what it costs.
	PricePerHour float64
	// Instances are what runs on it.
	Instances []Instance
	// Cordoned: it takes no new work (draining, or being consolidated); it
	// is neither a candidate nor a destination.
	Cordoned bool
	// Protected: scale-down may not take it (the pool's protected first
	// node), so emptying it saves nothing.
	Protected bool
}

// allocated sums the requests of what runs on n.
func (n *Node) allocated() capacity.Resources {
	var sum capacity.Resources
	for i := range n.Instances {
		sum = sum.Add(n.Instances[i].Requests)
	}
	return sum
}

// busy reports whether n runs a non-daemon instance.
func (n *Node) busy() bool {
	for i := range n.Instances {
		if !n.Instances[i].Daemon {
			return true
		}
	}
	return false
}

// Input is everything Decide looks at.
type Input struct {
	// Now is the time of the decision.
	Now time.Time
	// Nodes are the pool's joined nodes.
	Nodes []Node
	// Pending is the number of instances waiting for the pool.
	Pending int
	// Disrupting is the number of the pool's nodes being disrupted now
	// (consolidated or draining): they count against the budget.
	Disrupting int
	// MinNodes is the pool's floor: no move takes the pool below it.
	MinNodes int
}

// Move is one node to empty.
type Move struct {
	// Node and Ordinal name the node.
	Node    string
	Ordinal int
	// Instances are the ids of the entries to move (restartable, not
	// daemons), in the order given; Count is the number of instances they
	// stand for.
	Instances []string
	Count     int
	// Saving is the node's price over the horizon, in currency units.
	Saving float64
	// LostWork is the cost of the work the move throws away, in the same
	// units; LostHours is that work in instance-hours.
	LostWork  float64
	LostHours float64
	// Utilization is the node's use in percent (its largest dimension).
	Utilization float64
	// Targets say where the moved instances go: the destinations Decide
	// packed them on, by destination. An entry standing for several
	// instances (Count) may be split over several targets.
	Targets []Target
}

// Target is where some of a move's instances go.
type Target struct {
	// Instance is the id of the moved entry (one of Move.Instances).
	Instance string
	// Node is the destination node's ID.
	Node string
	// Count is how many of the entry's instances go there.
	Count int
}

// String says what the move does and why, for events and logs.
func (m Move) String() string {
	return fmt.Sprintf("node %s (%.0f %% used): moving %d restartable instances elsewhere saves $%.2f over the horizon against $%.2f of lost work (%.2f instance-hours)",
		m.Node, m.Utilization, m.Count, m.Saving, m.LostWork, m.LostHours)
}

// Decision is Decide's answer.
type Decision struct {
	// Moves are the nodes to empty now, at most Allowed.
	Moves []Move
	// Allowed is what the budget allowed at Now (after Disrupting).
	Allowed int
	// Reason says why nothing (more) moved, or "" when every candidate moved.
	Reason string
}

// Decide chooses the nodes to empty now. Candidates are tried in order of
// least lost work, then least use, then highest ordinal.
func Decide(cfg Config, in Input) Decision {
	if !cfg.Enabled {
		return Decision{Reason: "consolidation is off"}
	}
	total := len(in.Nodes)
	allowed := cfg.allowed(in.Now, total) - in.Disrupting
	d := Decision{Allowed: max(allowed, 0)}
	switch {
	case allowed <= 0:
		d.Reason = fmt.Sprintf("disruption budget exhausted (%d nodes being disrupted; %s)", in.Disrupting, cfg.budgetText(in.Now, total))
		return d
	case in.Pending > 0:
		d.Reason = fmt.Sprintf("%d instances wait for capacity: free space is theirs", in.Pending)
		return d
	}
	type cand struct {
		i         int
		util      float64
		lost, hrs float64
	}
	var cands []cand
	blocked := map[string]int{}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if n.Cordoned || !n.busy() {
			continue
		}
		if why := movable(n); why != "" {
			blocked[why]++
			continue
		}
		if n.Protected {
			blocked["protected"]++
			continue
		}
		u := utilization(n.allocated(), n.Capacity)
		if u > float64(cfg.MaxUtilization) {
			blocked["above max_utilization"]++
			continue
		}
		lost, hrs := lostWork(n, in.Now)
		cands = append(cands, cand{i: i, util: u, lost: lost, hrs: hrs})
	}
	if len(cands) == 0 {
		d.Reason = "no under-used node runs only restartable work" + blockedText(blocked)
		return d
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.lost, b.lost), cmp.Compare(a.util, b.util),
			cmp.Compare(in.Nodes[b.i].Ordinal, in.Nodes[a.i].Ordinal))
	})
	// Destinations: the busy schedulable nodes, with their free space,
	// packed fullest first (best fit: the moved work joins the nodes that
	// are kept anyway and leaves the part-used ones free to go next). The
	// order is built when the first candidate gets that far.
	var free []capacity.Resources
	var dest []bool
	var order []int
	destinations := func() {
		free = make([]capacity.Resources, len(in.Nodes))
		dest = make([]bool, len(in.Nodes))
		fullness := make([]float64, len(in.Nodes))
		order = make([]int, 0, len(in.Nodes))
		for i := range in.Nodes {
			n := &in.Nodes[i]
			if !n.Cordoned && n.busy() {
				dest[i] = true
				a := n.allocated()
				free[i] = n.Capacity.Sub(a)
				fullness[i] = share(a, n.Capacity)
				order = append(order, i)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(fullness[b], fullness[a]) })
	}
	kept := total
	received := make([]bool, len(in.Nodes))
	// Why candidates did not move: the first reason, and how many more.
	var why string
	more := 0
	note := func(format string, args ...any) {
		if why == "" {
			why = fmt.Sprintf(format, args...)
		} else {
			more++
		}
	}
	for _, c := range cands {
		if len(d.Moves) == allowed {
			note("budget allows %d now (%s)", allowed, cfg.budgetText(in.Now, total))
			break
		}
		n := &in.Nodes[c.i]
		if received[c.i] {
			continue // it holds work moved here in this decision
		}
		if kept-1 < in.MinNodes {
			note("the pool is at its floor of %d nodes", in.MinNodes)
			break
		}
		saving := n.PricePerHour * cfg.Horizon.Hours()
		if !cfg.IgnoreLostWork && !(saving > c.lost) {
			note("node %s: saving $%.2f does not outweigh $%.2f of lost work", n.ID, saving, c.lost)
			continue
		}
		if order == nil {
			destinations()
		}
		dest[c.i] = false
		placed, targets, ok := fits(n, in.Nodes, order, free, dest, received)
		if !ok {
			dest[c.i] = n.busy() // still a destination for others
			note("node %s: its work fits no other node's free space", n.ID)
			continue
		}
		free = placed
		kept--
		m := Move{Node: n.ID, Ordinal: n.Ordinal, Saving: saving, LostWork: c.lost, LostHours: c.hrs, Utilization: c.util, Targets: targets}
		for j := range n.Instances {
			if !n.Instances[j].Daemon {
				m.Instances = append(m.Instances, n.Instances[j].ID)
				m.Count += n.Instances[j].count()
			}
		}
		d.Moves = append(d.Moves, m)
	}
	if why != "" {
		d.Reason = why
		if more > 0 {
			d.Reason += fmt.Sprintf(" (and %d more)", more)
		}
	}
	return d
}

// movable says why a node's work may not move ("" when it may).
func movable(n *Node) string {
	for i := range n.Instances {
		in := &n.Instances[i]
		switch {
		case in.Daemon:
		case in.DoNotDisrupt:
			return "do-not-disrupt"
		case !in.Restartable:
			return "non-restartable work"
		case in.Moved:
			return "work moved before"
		}
	}
	return ""
}

func blockedText(blocked map[string]int) string {
	if len(blocked) == 0 {
		return ""
	}
	var parts []string
	for _, k := range []string{"non-restartable work", "do-not-disrupt", "work moved before", "protected", "above max_utilization"} {
		if n := blocked[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return " (nodes skipped: " + strings.Join(parts, ", ") + ")"
}

// utilization is the largest share, in percent, of any dimension of c that
// a uses.
func utilization(a, c capacity.Resources) float64 {
	return 100 * share(a, c)
}

// share is the dominant share of r on a node of capacity c: the largest
// fraction of any dimension.
func share(r, c capacity.Resources) float64 {
	s := 0.0
	dim := func(x, y int64) {
		if y > 0 && x > 0 {
			s = max(s, float64(x)/float64(y))
		}
	}
	dim(r.MilliCPU, c.MilliCPU)
	dim(r.Memory, c.Memory)
	dim(r.GPUs, c.GPUs)
	for k, v := range r.Extended {
		dim(v, c.Extended[k])
	}
	return s
}

// lostWork is the cost and the instance-hours of the work a move of n's
// non-daemon instances throws away at now.
func lostWork(n *Node, now time.Time) (cost, hours float64) {
	for i := range n.Instances {
		in := &n.Instances[i]
		if in.Daemon || in.StartedAt.IsZero() || !now.After(in.StartedAt) {
			continue
		}
		h := now.Sub(in.StartedAt).Hours() * float64(in.count())
		hours += h
		cost += h * n.PricePerHour * min(share(in.Requests, n.Capacity), 1)
	}
	return cost, hours
}

// fits packs n's non-daemon instances into the free space of the
// destination nodes, visited in order (first fit decreasing, no new node),
// and returns the free space after the move and where each entry goes, or
// ok=false when some instance fits nowhere. The nodes that take some of it
// are marked received: they are no longer candidates in this decision.
func fits(n *Node, nodes []Node, order []int, free []capacity.Resources, dest, received []bool) ([]capacity.Resources, []Target, bool) {
	var groups []capacity.Pending
	var entry []int
	var least capacity.Resources // the smallest item in each of CPU, memory, GPUs
	for i := range n.Instances {
		if !n.Instances[i].Daemon {
			r := n.Instances[i].Requests
			if len(groups) == 0 {
				least = capacity.Resources{MilliCPU: r.MilliCPU, Memory: r.Memory, GPUs: r.GPUs}
			} else {
				least = capacity.Resources{MilliCPU: min(least.MilliCPU, r.MilliCPU), Memory: min(least.Memory, r.Memory), GPUs: min(least.GPUs, r.GPUs)}
			}
			groups = append(groups, capacity.Pending{Requests: r, Count: n.Instances[i].count()})
			entry = append(entry, i)
		}
	}
	// Only destinations with room for the smallest item can take any:
	// first fit skips the others, so they are left out, which keeps the
	// packing small on a large pool of mostly full nodes.
	var idx []int
	var space []capacity.Resources
	for _, i := range order {
		if dest[i] && least.Fits(free[i]) {
			idx = append(idx, i)
			space = append(space, free[i])
		}
	}
	switch {
	case len(groups) == 0:
		return slices.Clone(free), nil, true
	case len(space) == 0:
		return nil, nil, false
	}
	res := binpack.Pack(groups, nil, binpack.WithFree(space), binpack.WithMaxNew(0))
	if res.UnplacedTotal > 0 {
		return nil, nil, false
	}
	out := slices.Clone(free)
	var targets []Target
	for k, e := range res.Existing {
		out[idx[k]] = out[idx[k]].Sub(e.Used)
		if e.Items > 0 {
			received[idx[k]] = true
		}
		for _, p := range e.Placements {
			targets = append(targets, Target{Instance: n.Instances[entry[p.Group]].ID, Node: nodes[idx[k]].ID, Count: p.Count})
		}
	}
	return out, targets, true
}

// ceilPercent is roundup(total × pct / 100).
func ceilPercent(total, pct int) int {
	return int(math.Ceil(float64(total) * float64(pct) / 100))
}
