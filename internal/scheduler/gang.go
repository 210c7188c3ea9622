package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// gang is the pending instances of one gang as Place sees them.
type gang struct {
	// members are indexes into pending, by rank.
	members []int
	// started is set when an instance of the gang is placed: the gang
	// started. A pending member never placed before (attempt 0: the
	// gang's first placement was torn by a race in the store) is then
	// placed on its own; one placed before (a member that ended its
	// attempt and was requeued) waits until the gang's placed members
	// stopped too (the head restarts the gang whole, or fails it), and
	// then the gang is placed whole again.
	started bool
	// placed counts the gang's placed instances.
	placed int
	// done is set once Place has tried the gang in this call.
	done bool
}

// gangsOf groups the pending instances by gang.
func gangsOf(placed, pending []Instance) map[string]*gang {
	var gs map[string]*gang
	for i := range pending {
		if id := pending[i].Gang; id != "" {
			if gs == nil {
				gs = map[string]*gang{}
			}
			g := gs[id]
			if g == nil {
				g = &gang{}
				gs[id] = g
			}
			g.members = append(g.members, i)
		}
	}
	if gs == nil {
		return nil
	}
	for i := range placed {
		if g := gs[placed[i].Gang]; g != nil {
			g.started = true
			g.placed++
		}
	}
	for _, g := range gs {
		slices.SortStableFunc(g.members, func(a, b int) int { return cmp.Compare(pending[a].GangRank, pending[b].GangRank) })
	}
	return gs
}

// restarting reports whether pending instance p is a member of a started
// gang placed before: it waits for the rest of its gang to stop, and says
// so in res (see gang.started).
func restarting(g *gang, p *Instance, res *Result) bool {
	if g == nil || !g.started || p.Attempt == 0 {
		return false
	}
	res.Waiting[p.ID] = fmt.Sprintf("gang of %d restarting: rank %d waits for the %d placed members of its gang to stop, to start again with them",
		max(p.GangSize, len(g.members)+g.placed), p.GangRank, g.placed)
	return true
}

// queueOrder is the order Place considers pending instances in: higher
// priority first, FIFO (the given order) within one priority.
func queueOrder(pending []Instance) []int {
	order := make([]int, len(pending))
	mixed := false
	for i := range order {
		order[i] = i
		mixed = mixed || pending[i].Priority != pending[0].Priority
	}
	if mixed {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pending[b].Priority, pending[a].Priority) })
	}
	return order
}

type took struct {
	node int
	p    *Instance
	gpus []int
}

// placeGang places every member of g or none: each member in rank order
// goes where a lone instance would, and when one fits nowhere, what the
// earlier members took is given back. So no part of a gang ever holds
// resources while the rest waits, and two gangs can never each hold half
// of what both need. It reports whether the gang was placed; otherwise it
// says why each member waits.
func placeGang(g *gang, pending []Instance, nodes []node, byName map[string]int, byPool map[string][]int, res *Result, now time.Time) bool {
	first := &pending[g.members[0]]
	size := max(first.GangSize, len(g.members))
	wait := func(why string) bool {
		for _, i := range g.members {
			res.Waiting[pending[i].ID] = why
		}
		return false
	}
	for _, i := range g.members {
		if p := &pending[i]; now.Before(p.NotBefore) {
			return wait(fmt.Sprintf("gang of %d: rank %d is held (%s)", size, p.GangRank, p.Held))
		}
	}
	var done []took
	for _, i := range g.members {
		p := &pending[i]
		cands, why := candidates(p, nodes, byName, byPool)
		ranks := directionRanks(p.Requests)
		best, bestScore := -1, score{}
		for _, ni := range cands {
			n := &nodes[ni]
			if !n.placeable || (n.reserved >= 0 && !slices.Contains(g.members, n.reserved)) {
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
		if best < 0 {
			for k := len(done) - 1; k >= 0; k-- {
				nodes[done[k].node].untake(done[k].p, done[k].gpus)
			}
			if why == "" {
				why = waitReason(p, cands, nodes)
			}
			return wait(fmt.Sprintf("gang of %d: %d of %d placeable now, rank %d: %s", size, len(done), len(g.members), p.GangRank, why))
		}
		n := &nodes[best]
		idx := n.pickGPUs(p)
		n.take(p, idx)
		done = append(done, took{node: best, p: p, gpus: idx})
	}
	for _, t := range done {
		res.Assignments = append(res.Assignments, Assignment{InstanceID: t.p.ID, Attempt: t.p.Attempt,
			Worker: nodes[t.node].w.Name, GPUIndices: t.gpus, Exclusive: t.p.Exclusive})
	}
	return true
}

// untake gives back what take(p, gpus) accounted, the last take on n.
func (n *node) untake(p *Instance, gpus []int) {
	n.release(p, gpus)
	n.running = n.running[:len(n.running)-1]
	n.setScore()
}

// release gives back the CPU, memory and GPUs p holds with gpus.
func (n *node) release(p *Instance, gpus []int) {
	n.free = n.free.Add(cpuMem(p.Requests))
	for _, g := range gpus {
		if g < 0 || g >= len(n.excl) {
			continue
		}
		if p.Exclusive {
			if n.excl[g] {
				n.excl[g] = false
				n.freeExcl++
			}
		} else if n.shared[g] > 0 {
			n.shared[g]--
		}
	}
}

// reserveGang reserves, for a gang that waited too long, one worker per
// member (the one closest to fitting it, as for a lone instance), so that
// nothing placed after it in this call takes them: all of them or none.
// It reports whether it reserved.
func reserveGang(g *gang, pending []Instance, nodes []node, byName map[string]int, byPool map[string][]int, res *Result) bool {
	var taken []int
	for _, i := range g.members {
		p := &pending[i]
		cands, _ := candidates(p, nodes, byName, byPool)
		ni := reserveFor(p, cands, nodes)
		if ni < 0 {
			for _, t := range taken {
				nodes[t].reserved = -1
			}
			return false
		}
		nodes[ni].reserved = i
		taken = append(taken, ni)
	}
	var names []string
	for k, ni := range taken {
		res.Reserved[nodes[ni].w.Name] = pending[g.members[k]].ID
		names = append(names, nodes[ni].w.Name)
	}
	for _, i := range g.members {
		res.Waiting[pending[i].ID] += "; waiting for reserved workers " + strings.Join(names, ", ")
	}
	return true
}
