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

// maxPreemptTries bounds how many waiting instances one Place call plans
// preemptions for (the rest are looked at in later calls).
const maxPreemptTries = 256

// preempt plans preemptions for the unplaced instances of preemptible
// pools, highest priority first: on each candidate worker, the placed
// restartable instances of lower priority are stopped lowest priority
// first (then the most recently queued) until the instance fits; the
// worker needing the fewest victims wins. Instances already evicting count
// as gone. A gang is never the cause of a preemption (its members would
// have to preempt together; not done), nor is a held instance.
func preempt(nodes []node, byName map[string]int, byPool map[string][]int, placed, pending []Instance,
	unplaced []int, gangs map[string]*gang, cfg Config, now time.Time) []Preemption {
	onNode := map[int][]int{}
	for i := range placed {
		p := &placed[i]
		ni, ok := byName[p.Worker]
		if !ok || p.Daemon {
			continue
		}
		onNode[ni] = append(onNode[ni], i)
		if cfg.Evicting[p.ID] {
			nodes[ni].release(p, p.GPUIndices)
		}
	}
	if len(onNode) == 0 {
		return nil
	}
	order := slices.Clone(unplaced)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pending[b].Priority, pending[a].Priority) })
	chosen := map[int]bool{} // placed indexes chosen in this call
	var out []Preemption
	tries := 0
	for _, i := range order {
		p := &pending[i]
		if now.Before(p.NotBefore) || (p.Gang != "" && gangs[p.Gang] != nil && !gangs[p.Gang].started) ||
			!cfg.Preemptible(p.Pool) {
			continue
		}
		if tries++; tries > maxPreemptTries {
			break
		}
		cands, _ := candidates(p, nodes, byName, byPool)
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
			for _, pi := range onNode[ni] {
				v := &placed[pi]
				if v.Restartable && !cfg.Evicting[v.ID] && !chosen[pi] && v.Priority < p.Priority {
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
			continue
		}
		n := &nodes[best]
		pr := Preemption{For: p.ID, ForPriority: p.Priority, Worker: n.w.Name}
		for _, pi := range bestVictims {
			v := &placed[pi]
			chosen[pi] = true
			n.release(v, v.GPUIndices)
			pr.Victims = append(pr.Victims, Victim{ID: v.ID, Attempt: v.Attempt, Priority: v.Priority})
		}
		if len(bestVictims) == 0 {
			for _, pi := range onNode[best] {
				if v := &placed[pi]; cfg.Evicting[v.ID] && v.Priority < p.Priority {
					pr.Victims = append(pr.Victims, Victim{ID: v.ID, Attempt: v.Attempt, Priority: v.Priority, Evicting: true})
				}
			}
		}
		n.take(p, n.pickGPUs(p))
		if len(pr.Victims) > 0 {
			out = append(out, pr)
		}
	}
	return out
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
