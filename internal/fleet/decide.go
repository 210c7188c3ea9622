package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Decide runs one decision cycle (BigFleet §8) and returns the actions for
// the driver, in order. needs are the ClusterCapacityNeeds received since the
// last cycle; each replaces its cluster's previous needs, and clusters not
// named keep theirs. Needs are diffed against what the shard has already
// provisioned, bound or set in motion, so the same needs twice produce no new
// action once the first cycle's actions are in flight.
//
// All needs are validated first; on an error nothing changes. The returned
// slice is reused by the next call: use it before calling Decide again.
//
// Only allocations whose needs or machines changed, and those left short by
// the previous cycle, are evaluated; Reevaluate marks all of them. A cycle:
//
//  0. Diff: allocations over their count give up reservations (machines on
//     their way), which become available to others.
//  1. Walk needs top-down by priority: bootstrap Idle machines (highest
//     reclamation penalty first), then claim unreserved machines about to
//     become Idle, then Create from Speculative (lowest effective cost
//     first, skipping offerings backing off).
//  2. Priority inversions: a need still short first takes over machines on
//     their way to lower priorities, then machines other clusters no longer
//     need, then drains victims of lower priority in order of score, with a
//     grace set by the priority gap; the drained machines are reserved for
//     it (Configured → Drain → Idle → Bootstrap). Machines reserved for a
//     need and now Idle are bootstrapped after this phase.
//  3. Reclaim: excess machines drain to Idle; Idle machines are released to
//     Speculative after their kind's delay; Failed machines are released.
//
// Then shortfalls are aggregated, aged and escalated (ActShortfall).
func (s *Shard) Decide(now time.Time, needs ...ClusterCapacityNeeds) ([]Action, error) {
	var errs []error
	for i := range needs {
		if err := needs[i].Validate(s.cat); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	s.setNow(now)
	s.cycle++
	s.acts = s.acts[:0]
	for i := range needs {
		s.applyNeeds(&needs[i])
	}
	s.exportHandoffs()
	s.buildWork()
	s.phase0()
	s.phase1()
	s.phase2()
	s.handOff()
	s.phase3()
	s.finishWork()
	s.updateShortfalls()
	s.clearFresh(s.acts)
	return s.acts, nil
}

// Reevaluate marks every allocation for evaluation by the next Decide (a
// full evaluation, e.g. after adopting an inventory or periodically).
func (s *Shard) Reevaluate() {
	for a := uint32(1); a < uint32(len(s.allocs)); a++ {
		s.touch(a)
	}
}

func (s *Shard) applyNeeds(n *ClusterCapacityNeeds) {
	cs := s.clusterFor(n.Cluster)
	if !cs.known {
		cs.known = true
		for _, a := range cs.allocs {
			s.allocs[a].known = true
			s.touch(a)
		}
	}
	for i := range n.Needs {
		need := &n.Needs[i]
		a := s.allocFor(n.Cluster, need.Profile)
		A := &s.allocs[a]
		A.known = true
		A.seen = s.cycle
		drain := need.DrainTime
		if drain == 0 {
			drain = s.cfg.DefaultDrainTime
		}
		d := drain.Seconds()
		if A.want != need.Count || A.priority != need.Priority || A.penalty != need.InterruptionPenalty ||
			A.drain != d || A.topology != need.Topology {
			A.want, A.priority, A.penalty, A.drain, A.topology = need.Count, need.Priority,
				need.InterruptionPenalty, d, need.Topology
			s.touch(a)
		}
	}
	for _, id := range n.Release {
		m := uint32(id)
		if int(m) >= len(s.st) || s.state(m) != Configured || ClusterID(s.cl[m]) != n.Cluster {
			continue
		}
		// Newest first is the reclaim order: the released go last in their list.
		if l := s.listOf(m, false); l != nil {
			s.unlink(l, m)
			s.pushBack(l, m)
		}
		s.st[m] |= releaseBit
		s.released = append(s.released, m)
	}
	for _, a := range cs.allocs {
		if A := &s.allocs[a]; A.seen != s.cycle && A.want != 0 {
			A.want = 0
			s.touch(a)
		}
	}
}

// exportHandoffs takes machines drained for the coordinator out of the
// shard once they are Idle.
func (s *Shard) exportHandoffs() {
	for _, m := range s.handoffs {
		if s.state(m) == Idle && s.st[m]&resBit != 0 && s.reserved[m] == exportSink {
			s.acts = append(s.acts, s.remove(m, ReasonCoordinator))
		}
	}
}

// handOff bootstraps the reserved machines that became Idle and were not
// taken by a higher priority in Phase 2, or frees them when their allocation
// no longer needs them.
func (s *Shard) handOff() {
	for _, m := range s.handoffs {
		if s.state(m) != Idle || s.st[m]&resBit == 0 {
			continue
		}
		if r := s.reserved[m]; s.allocs[r].deficit() >= 0 {
			s.configure(m, r)
		} else {
			s.move(m, Idle, true, 0, noAlloc)
		}
	}
	s.handoffs = s.handoffs[:0]
}

// clearFresh ends the cycle: the machines acted on may be acted on again.
func (s *Shard) clearFresh(acts []Action) {
	for i := range acts {
		if a := &acts[i]; a.Kind != ActShortfall {
			s.st[a.Machine] &^= freshBit
		}
	}
	for _, m := range s.released {
		s.st[m] &^= releaseBit
	}
	s.released = s.released[:0]
}

func (s *Shard) buildWork() {
	s.work = s.work[:0]
	for _, a := range s.dirty {
		A := &s.allocs[a]
		A.dirty = false
		if !A.inWork {
			A.inWork = true
			s.work = append(s.work, a)
		}
	}
	s.dirty = s.dirty[:0]
	for _, a := range s.short {
		if A := &s.allocs[a]; !A.inWork {
			A.inWork = true
			s.work = append(s.work, a)
		}
	}
	al := s.allocs
	slices.SortFunc(s.work, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(al[b].priority, al[a].priority), cmp.Compare(al[a].cluster, al[b].cluster),
			cmp.Compare(al[a].profile, al[b].profile))
	})
}

// phase0 drops the reservations an allocation no longer needs: Idle ones
// first, then Creating, then Draining.
func (s *Shard) phase0() {
	for _, a := range s.work {
		A := &s.allocs[a]
		excess := -A.deficit()
		if !A.known || excess <= 0 || A.in.n == 0 {
			continue
		}
		for _, st := range [...]State{Idle, Creating, Draining} {
			for id := A.in.head; id != 0 && excess > 0; {
				m := id - 1
				id = s.next[m]
				if s.state(m) == st {
					s.move(m, st, s.host(m), ClusterID(s.cl[m]), noAlloc)
					excess--
				}
			}
		}
	}
}

// phase1 serves needs from Idle, arriving and Speculative machines.
func (s *Shard) phase1() {
	for _, a := range s.work {
		A := &s.allocs[a]
		d := A.deficit()
		if !A.known || d <= 0 {
			continue
		}
		P := &s.profs[A.profile]
		for _, g := range P.idleOrder {
			for G := &s.groups[g]; d > 0 && G.idle.n > 0; d-- {
				s.configure(G.idle.tail-1, a)
			}
		}
		for _, g := range P.idleOrder {
			for G := &s.groups[g]; d > 0 && G.arriving.n > 0; d-- {
				m := G.arriving.head - 1
				s.move(m, s.state(m), s.host(m), ClusterID(s.cl[m]), a)
			}
		}
		for _, g := range P.specOrder {
			G := &s.groups[g]
			if G.backoff > s.now {
				continue
			}
			for ; d > 0 && G.spec.n > 0; d-- {
				m := G.spec.head - 1
				s.move(m, Creating, false, 0, a)
				s.st[m] |= freshBit
				s.acts = append(s.acts, Action{Kind: ActCreate, Reason: ReasonNeed, Machine: MachineID(m),
					Offering: G.offering, Cluster: A.cluster})
			}
		}
	}
}

func (s *Shard) configure(m, a uint32) {
	c := s.allocs[a].cluster
	s.move(m, Configuring, true, c, noAlloc)
	s.st[m] |= freshBit
	s.acts = append(s.acts, Action{Kind: ActConfigure, Reason: ReasonNeed, Machine: MachineID(m),
		Offering: s.groups[s.grp[m]].offering, Cluster: c})
}

// drain moves a bound machine of allocation from to Draining, reserved for
// allocation to (noAlloc: it returns to Idle), and emits the Drain.
func (s *Shard) drain(m, from, to uint32, grace time.Duration, gap int64, reason Reason) {
	c := ClusterID(s.cl[m])
	s.move(m, Draining, true, c, to)
	s.st[m] |= freshBit
	s.touch(from)
	act := Action{Kind: ActDrain, Reason: reason, Machine: MachineID(m), Offering: s.groups[s.grp[m]].offering,
		Cluster: c, Grace: grace, Gap: gap}
	if to != noAlloc {
		act.For = s.allocs[to].cluster
	}
	s.acts = append(s.acts, act)
}

// drainSurplus drains up to n machines of allocation b beyond its want, low
// reclamation penalty first, for allocation to (or back to Idle). It returns
// how many it drained.
func (s *Shard) drainSurplus(b, to uint32, n int32, grace time.Duration, gap int64, reason Reason) int32 {
	B := &s.allocs[b]
	n = min(n, B.bound()-B.want)
	done := int32(0)
	for _, g := range s.profs[B.profile].reclaimOrder {
		if l := s.findSub(B, g); l != nil {
			done += s.drainFrom(l, b, to, n-done, grace, gap, reason)
		}
	}
	return done
}

// drainFrom drains up to n machines of one of allocation b's lists, newest
// first, skipping machines already acted on in this cycle.
func (s *Shard) drainFrom(l *list, b, to uint32, n int32, grace time.Duration, gap int64, reason Reason) int32 {
	done := int32(0)
	for id := l.tail; id != 0 && done < n; {
		m := id - 1
		id = s.prev[m]
		if s.st[m]&freshBit == 0 {
			g := grace
			if s.st[m]&releaseBit != 0 {
				g = 0 // emptied by its cluster: nothing to wait for
			}
			s.drain(m, b, to, g, gap, reason)
			done++
		}
	}
	return done
}

func (s *Shard) findSub(a *alloc, g uint16) *list {
	for i := range a.lists {
		if a.lists[i].group == g {
			return &a.lists[i].l
		}
	}
	return nil
}

// floor returns the lowest priority holding bound or reserved machines of
// profile p, computed once per cycle. During Phase 2 holdings only move to
// higher priorities or leave, so the value stays a lower bound, and a need
// at or below it has nothing to preempt or take over.
func (s *Shard) floor(p ProfileID) int32 {
	P := &s.profs[p]
	if P.floorCycle != s.cycle {
		P.floor, P.floorCycle = math.MaxInt32, s.cycle
		for _, a := range P.allocs {
			if A := &s.allocs[a]; A.known && A.priority < P.floor && (A.in.n > 0 || A.bound() > 0) {
				P.floor = A.priority
			}
		}
	}
	return P.floor
}

type candidate struct {
	alloc    uint32
	group    uint16
	priority int32
	cluster  ClusterID
	score    float64
}

// victims lists the (allocation, group) pairs of profile p below priority
// (by at least minGap) whose machines may be preempted, unordered.
func (s *Shard) victims(p ProfileID, priority int32, minGap int64, except uint32) []candidate {
	s.cands = s.cands[:0]
	w := &s.cfg.Weights
	for _, b := range s.profs[p].allocs {
		B := &s.allocs[b]
		gap := int64(priority) - int64(B.priority)
		if b == except || !B.known || gap <= 0 || gap < minGap {
			continue
		}
		base := float64(gap)*w.Priority + w.Drain/max(B.drain, 1) + w.Interruption/max(B.penalty, s.cfg.MinPenalty)
		for i := range B.lists {
			sl := &B.lists[i]
			if sl.l.n == 0 {
				continue
			}
			score := base + w.Reclamation/max(s.groups[sl.group].reclaim, s.cfg.MinPenalty)
			s.cands = append(s.cands, candidate{alloc: b, group: sl.group, priority: B.priority, cluster: B.cluster,
				score: score})
		}
	}
	return s.cands
}

// better orders victims: highest score, then lowest priority, cluster, group.
func (x *candidate) better(y *candidate) bool {
	return cmp.Or(cmp.Compare(y.score, x.score), cmp.Compare(x.priority, y.priority),
		cmp.Compare(x.cluster, y.cluster), cmp.Compare(x.group, y.group)) < 0
}

// preempt drains up to n victims for allocation to (exportSink: for the
// coordinator), best score first, and returns how many it drained. A need
// takes few machines, so the best candidate is selected by a scan each time
// instead of sorting them all.
func (s *Shard) preempt(p ProfileID, priority int32, minGap int64, n int32, to, except uint32, reason Reason) int32 {
	cands := s.victims(p, priority, minGap, except)
	done := int32(0)
	for done < n && len(cands) > 0 {
		best := 0
		for i := 1; i < len(cands); i++ {
			if cands[i].better(&cands[best]) {
				best = i
			}
		}
		c := cands[best]
		cands[best] = cands[len(cands)-1]
		cands = cands[:len(cands)-1]
		gap := int64(priority) - int64(c.priority)
		done += s.drainFrom(s.findSub(&s.allocs[c.alloc], c.group), c.alloc, to, n-done, s.cfg.GraceFor(gap), gap,
			reason)
	}
	return done
}

// takeOver takes up to n machines reserved for allocations of lower
// priority (on their way there, nothing running on them yet), lowest
// priority first: Idle ones are bootstrapped for a at once, Creating and
// Draining ones are reserved for a instead. It returns how many it took.
func (s *Shard) takeOver(a uint32, n int32) int32 {
	A := &s.allocs[a]
	s.cands = s.cands[:0]
	for _, b := range s.profs[A.profile].allocs {
		if B := &s.allocs[b]; b != a && B.known && B.priority < A.priority && B.in.n > 0 {
			s.cands = append(s.cands, candidate{alloc: b, priority: B.priority, cluster: B.cluster})
		}
	}
	slices.SortFunc(s.cands, func(x, y candidate) int {
		return cmp.Or(cmp.Compare(x.priority, y.priority), cmp.Compare(x.cluster, y.cluster))
	})
	done := int32(0)
	for _, c := range s.cands {
		B := &s.allocs[c.alloc]
		for _, st := range [...]State{Idle, Draining, Creating} {
			for id := B.in.head; id != 0 && done < n; {
				m := id - 1
				id = s.next[m]
				if s.state(m) != st {
					continue
				}
				if st == Idle {
					s.configure(m, a)
				} else {
					s.move(m, st, s.host(m), ClusterID(s.cl[m]), a)
				}
				s.touch(c.alloc)
				done++
			}
		}
		if done == n {
			break
		}
	}
	return done
}

// phase2 resolves priority inversions.
func (s *Shard) phase2() {
	s.surplus = s.surplus[:0]
	for i := len(s.work) - 1; i >= 0; i-- { // lowest priority first
		if a := s.work[i]; s.allocs[a].known && s.allocs[a].bound() > s.allocs[a].want {
			s.surplus = append(s.surplus, a)
		}
	}
	for _, a := range s.work {
		A := &s.allocs[a]
		d := A.deficit()
		if !A.known || d <= 0 {
			continue
		}
		if A.priority > s.floor(A.profile) {
			d -= s.takeOver(a, d)
		}
		for _, b := range s.surplus {
			if d == 0 {
				break
			}
			B := &s.allocs[b]
			if b == a || B.profile != A.profile {
				continue
			}
			gap := int64(A.priority) - int64(B.priority)
			grace := s.cfg.ReclaimGrace
			if gap > 0 {
				grace = min(grace, s.cfg.GraceFor(gap))
			}
			d -= s.drainSurplus(b, a, d, grace, 0, ReasonSurplus)
		}
		if d > 0 && A.priority > s.floor(A.profile) {
			s.preempt(A.profile, A.priority, 1, d, a, a, ReasonPreempt)
		}
	}
}

// phase3 reclaims excess, releases Idle machines lazily and Failed ones.
func (s *Shard) phase3() {
	for _, a := range s.surplus {
		if A := &s.allocs[a]; A.bound() > A.want {
			s.drainSurplus(a, noAlloc, math.MaxInt32, s.cfg.ReclaimGrace, 0, ReasonReclaim)
		}
	}
	for g := range s.groups {
		G := &s.groups[g]
		if G.release < 0 {
			continue
		}
		for G.idle.n > 0 {
			m := G.idle.head - 1
			if int64(s.since[m])+G.release > int64(s.now) {
				break
			}
			s.release(m, ReasonIdle)
		}
	}
	for s.failed.n > 0 {
		s.release(s.failed.head-1, ReasonFailed)
	}
}

func (s *Shard) release(m uint32, reason Reason) {
	s.move(m, Deleting, s.host(m), ClusterID(s.cl[m]), noAlloc)
	s.st[m] |= freshBit
	s.acts = append(s.acts, Action{Kind: ActRelease, Reason: reason, Machine: MachineID(m),
		Offering: s.groups[s.grp[m]].offering})
}

// remove takes an Idle or Speculative machine out of the shard and returns
// its ActExport.
func (s *Shard) remove(m uint32, reason Reason) Action {
	G := &s.groups[s.grp[m]]
	act := Action{Kind: ActExport, Reason: reason, Machine: MachineID(m), Offering: G.offering,
		Exported: Exported{Offering: G.offering, ReclamationPenalty: G.reclaim, State: s.state(m)}}
	s.move(m, 0, false, 0, noAlloc)
	s.grp[m] = 0
	return act
}

func (s *Shard) finishWork() {
	s.short = s.short[:0]
	for _, a := range s.work {
		A := &s.allocs[a]
		A.inWork, A.short = false, false
		if A.known && A.deficit() > 0 {
			A.short = true
			s.short = append(s.short, a)
		}
	}
}
