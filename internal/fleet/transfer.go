package fleet

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// SummaryProfiles is how many profiles a ShardSummary describes.
const SummaryProfiles = 10

// ProfileSpare is what a shard could give away of one profile.
type ProfileSpare struct {
	Profile ProfileID
	// Idle and Speculative count unreserved machines in those states.
	Idle, Speculative uint32
	// Configured counts bound machines of clusters that have sent needs.
	Configured uint32
	// Floor is the lowest priority among those; math.MaxInt32 when none.
	Floor int32
}

// ShardSummary is what the coordinator knows of a shard (BigFleet §9: about
// 240 bytes, so 200 shards fit in 48 KB).
type ShardSummary struct {
	Shard ShardID
	// Profiles is how many entries of Spare are used.
	Profiles uint16
	// Totals over the shard's inventory.
	Machines, Configured, Idle, Speculative uint32
	// Escalated counts the shard's escalated shortfalls.
	Escalated uint32
	Spare     [SummaryProfiles]ProfileSpare
}

// Spares returns the used entries of Spare.
func (s *ShardSummary) Spares() []ProfileSpare { return s.Spare[:s.Profiles] }

// Summary describes the shard for the coordinator. Its Spare entries cover
// the wanted profiles first (those the coordinator has escalations for),
// then the profiles with the most Idle and Speculative machines.
func (s *Shard) Summary(id ShardID, wanted ...ProfileID) ShardSummary {
	sum := ShardSummary{Shard: id}
	n := s.cat.Profiles()
	spares := make([]ProfileSpare, n)
	for p := range spares {
		spares[p] = ProfileSpare{Profile: ProfileID(p), Floor: math.MaxInt32}
	}
	for g := range s.groups {
		G := &s.groups[g]
		sp := &spares[G.profile]
		sp.Idle += G.idle.n
		sp.Speculative += G.spec.n
	}
	for a := 1; a < len(s.allocs); a++ {
		A := &s.allocs[a]
		b := A.bound()
		sum.Configured += uint32(b)
		if A.known && b > 0 {
			sp := &spares[A.profile]
			sp.Configured += uint32(b)
			sp.Floor = min(sp.Floor, A.priority)
		}
	}
	for _, sp := range spares {
		sum.Idle += sp.Idle
		sum.Speculative += sp.Speculative
	}
	sum.Machines = uint32(len(s.st)) - s.free.n
	sum.Escalated = uint32(len(s.Escalated()))
	used := make([]bool, n)
	add := func(p ProfileID) {
		if int(sum.Profiles) < SummaryProfiles && s.cat.validProfile(p) && !used[p] {
			used[p] = true
			sum.Spare[sum.Profiles] = spares[p]
			sum.Profiles++
		}
	}
	for _, p := range wanted {
		add(p)
	}
	slices.SortStableFunc(spares, func(x, y ProfileSpare) int {
		return cmp.Compare(y.Idle+y.Speculative, x.Idle+x.Speculative)
	})
	for _, sp := range spares {
		if sp.Idle+sp.Speculative > 0 {
			add(sp.Profile)
		}
	}
	return sum
}

// Export takes up to n unreserved machines of profile p in state (Idle or
// Speculative) out of the shard, for a coordinator reassignment, and returns
// one ActExport per machine. Idle machines go lowest reclamation penalty
// first, Speculative ones cheapest first.
func (s *Shard) Export(p ProfileID, state State, n int) ([]Action, error) {
	if !s.cat.validProfile(p) {
		return nil, fmt.Errorf("profile: unknown profile %d", p)
	}
	var order []uint16
	switch state {
	case Idle:
		order = s.profs[p].reclaimOrder
	case Speculative:
		order = s.profs[p].specOrder
	default:
		return nil, fmt.Errorf("state: only idle and speculative machines move between shards, not %s", state)
	}
	var out []Action
	for _, g := range order {
		l := &s.groups[g].idle
		if state == Speculative {
			l = &s.groups[g].spec
		}
		for len(out) < n && l.n > 0 {
			out = append(out, s.remove(l.head-1, ReasonCoordinator))
		}
	}
	return out, nil
}

// Import adds machines another shard exported and returns their new ids, in
// order. Free slots are reused first. On an error nothing is added.
func (s *Shard) Import(now time.Time, ms []Exported) ([]MachineID, error) {
	for i, e := range ms {
		if e.State != Idle && e.State != Speculative {
			return nil, fmt.Errorf("machines[%d].state: only idle and speculative machines move between shards, not %s",
				i, e.State)
		}
		spec := MachineSpec{Offering: e.Offering, ReclamationPenalty: e.ReclamationPenalty, State: e.State,
			Host: e.State == Idle}
		if err := s.checkSpec(&spec); err != nil {
			return nil, fmt.Errorf("machines[%d]: %w", i, err)
		}
	}
	if len(s.st)+len(ms) > maxMachines {
		return nil, fmt.Errorf("machines: %d more machines do not fit", len(ms))
	}
	s.setNow(now)
	ids := make([]MachineID, 0, len(ms))
	for _, e := range ms {
		g, err := s.groupFor(e.Offering, e.ReclamationPenalty)
		if err != nil {
			return ids, err
		}
		var m uint32
		if s.free.n > 0 {
			m = s.free.head - 1
			s.unlink(&s.free, m)
		} else {
			m = uint32(len(s.st))
			s.grow(1)
		}
		s.place(m, g, e.State, e.State == Idle, 0)
		ids = append(ids, MachineID(m))
	}
	return ids, nil
}

// PreemptRequest is a coordinator's cross-shard preemption (BigFleet §9,
// response 3): drain Count machines of Profile held at priorities at least
// MinGap below Priority, for another shard.
type PreemptRequest struct {
	Profile  ProfileID
	Priority int32
	MinGap   int64
	Count    int
}

// Preempt chooses victims as Phase 2 does and drains them, grace by priority
// gap. The drained machines are reserved for export: once the driver reports
// them Idle, the next Decide emits ActExport for each, and they leave the
// shard. It returns the Drain actions (fewer than Count when victims run
// out); the slice is the caller's.
func (s *Shard) Preempt(now time.Time, req PreemptRequest) ([]Action, error) {
	if !s.cat.validProfile(req.Profile) {
		return nil, fmt.Errorf("profile: unknown profile %d", req.Profile)
	}
	if req.Count < 0 || req.MinGap < 1 {
		return nil, fmt.Errorf("count, min_gap: count must be non-negative and min_gap positive, got %d and %d",
			req.Count, req.MinGap)
	}
	s.setNow(now)
	mark := len(s.acts)
	s.preempt(req.Profile, req.Priority, req.MinGap, int32(min(req.Count, math.MaxInt32)), exportSink, exportSink,
		ReasonCoordinator)
	out := slices.Clone(s.acts[mark:])
	s.acts = s.acts[:mark]
	s.clearFresh(out)
	return out, nil
}
