package scheduler

import (
	"cmp"
	"slices"
	"time"
)

// Preemption is waiting work of higher priority and the placed instances
// to stop so that it fits: all on one worker, each restartable, not a
// daemon, and of lower priority than For.
type Preemption struct {
	// For is the waiting instance and ForPriority its priority.
	For         string
	ForPriority int
	Worker      string
	Victims     []Victim
}

// Victim is a placed instance a Preemption stops.
type Victim struct {
	ID       string
	Attempt  int64
	Priority int
	// Evicting is set when the victim was already in Config.Evicting.
	Evicting bool
}

// maxPreemptTries bounds how many waiting instances (or gangs) one Place
// call plans preemptions for (the rest are looked at in later calls).
const maxPreemptTries = 256

// preempter plans preemptions over the nodes of one Place call.
type preempter struct {
	nodes   []node
	byName  map[string]int
	byPool  map[string][]int
	placed  []Instance
	cfg     Config
	onNode  map[int][]int
	chosen  map[int]bool // placed indexes chosen in this call
	changed map[int]node // for a gang: nodes as they were before it (deep copies)
	// gangChosen are the victims chosen for the gang being planned.
	gangChosen []int
}

// preempt plans preemptions for the unplaced instances of preemptible
// pools, highest priority first: on each candidate worker, the placed
// restartable instances of lower priority are stopped lowest priority
// first (then the most recently queued) until the instance fits; the
// worker needing the fewest victims wins. Instances already evicting count
// as gone. A gang that has not started preempts for all its members or
// for none. A held instance preempts nothing.
func preempt(nodes []node, byName map[string]int, byPool map[string][]int, placed, pending []Instance,
	unplaced []int, gangs map[string]*gang, cfg Config, now time.Time) []Preemption {
	pe := &preempter{nodes: nodes, byName: byName, byPool: byPool, placed: placed, cfg: cfg,
		onNode: map[int][]int{}, chosen: map[int]bool{}}
	for i := range placed {
		p := &placed[i]
		ni, ok := byName[p.Worker]
		if !ok || p.Daemon {
			continue
		}
		pe.onNode[ni] = append(pe.onNode[ni], i)
		if cfg.Evicting[p.ID] {
			nodes[ni].release(p, p.GPUIndices)
		}
	}
	if len(pe.onNode) == 0 {
		return nil
	}
	order := slices.Clone(unplaced)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pending[b].Priority, pending[a].Priority) })
	var out []Preemption
	tries := 0
	tried := map[string]bool{}
	for _, i := range order {
		p := &pending[i]
		if now.Before(p.NotBefore) || !cfg.Preemptible(p.Pool) {
			continue
		}
		g := gangs[p.Gang]
		if g != nil && g.started {
			g = nil // completing a torn first placement: preempts alone
		}
		if g != nil && tried[p.Gang] {
			continue
		}
		if tries++; tries > maxPreemptTries {
			break
		}
		if g == nil {
			if pr, ok := pe.plan(p); ok && len(pr.Victims) > 0 {
				out = append(out, pr)
			}
			continue
		}
		tried[p.Gang] = true
		pe.changed = map[int]node{}
		var prs []Preemption
		ok := true
		for _, m := range g.members {
			if now.Before(pending[m].NotBefore) {
				ok = false
				break
			}
			pr, fits := pe.plan(&pending[m])
			if !fits {
				ok = false
				break
			}
			if len(pr.Victims) > 0 {
				prs = append(prs, pr)
			}
		}
		if !ok {
			for ni, n := range pe.changed { // give back what the gang's members took
				nodes[ni] = n
			}
			for _, pi := range pe.gangChosen {
				delete(pe.chosen, pi)
			}
			prs = nil
		}
		pe.changed, pe.gangChosen = nil, nil
		out = append(out, prs...)
	}
	return out
}

// plan finds where p fits once the fewest restartable instances of lower
// priority are stopped (or where evicting ones already made room),
// applies it to the nodes (victims released, p taken) and returns it;
// false when no worker can make room.
func (pe *preempter) plan(p *Instance) (Preemption, bool) {
	nodes, placed := pe.nodes, pe.placed
	cands, _ := candidates(p, nodes, pe.byName, pe.byPool)
	best, bestVictims := -1, []int(nil)
	for _, ni := range cands {
		n := &nodes[ni]
		if !n.placeable {
			continue
		}
		if ok, _ := n.fits(p); ok {
			// The room of evicting instances is enough: keep them going.
			best, bestVictims = ni, nil
			break
		}
		var vs []int
		for _, pi := range pe.onNode[ni] {
			v := &placed[pi]
			if v.Restartable && !pe.cfg.Evicting[v.ID] && !pe.chosen[pi] && v.Priority < p.Priority {
				vs = append(vs, pi)
			}
		}
		if len(vs) == 0 {
			continue
		}
		slices.SortStableFunc(vs, func(a, b int) int {
			if c := cmp.Compare(placed[a].Priority, placed[b].Priority); c != 0 {
				return c
			}
			return placed[b].QueuedAt.Compare(placed[a].QueuedAt)
		})
		trial := n.clone()
		k := 0
		for k < len(vs) {
			trial.release(&placed[vs[k]], placed[vs[k]].GPUIndices)
			k++
			if ok, _ := trial.fits(p); ok {
				break
			}
		}
		if ok, _ := trial.fits(p); !ok {
			continue
		}
		if best < 0 || k < len(bestVictims) {
			best, bestVictims = ni, vs[:k]
		}
	}
	if best < 0 {
		return Preemption{}, false
	}
	n := &nodes[best]
	if pe.changed != nil {
		if _, ok := pe.changed[best]; !ok {
			c := n.clone()
			c.running = slices.Clone(n.running)
			pe.changed[best] = c
		}
	}
	pr := Preemption{For: p.ID, ForPriority: p.Priority, Worker: n.w.Name}
	for _, pi := range bestVictims {
		v := &placed[pi]
		pe.chosen[pi] = true
		if pe.changed != nil {
			pe.gangChosen = append(pe.gangChosen, pi)
		}
		n.release(v, v.GPUIndices)
		pr.Victims = append(pr.Victims, Victim{ID: v.ID, Attempt: v.Attempt, Priority: v.Priority})
	}
	if len(bestVictims) == 0 {
		for _, pi := range pe.onNode[best] {
			if v := &placed[pi]; pe.cfg.Evicting[v.ID] && v.Priority < p.Priority {
				pr.Victims = append(pr.Victims, Victim{ID: v.ID, Attempt: v.Attempt, Priority: v.Priority, Evicting: true})
			}
		}
	}
	n.take(p, n.pickGPUs(p))
	return pr, true
}

// clone copies what fits and release read and write.
func (n *node) clone() node {
	c := *n
	c.free = n.free.Clone()
	c.excl = slices.Clone(n.excl)
	c.shared = slices.Clone(n.shared)
	c.running = nil
	return c
}
