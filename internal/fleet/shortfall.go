package fleet

import (
	"cmp"
	"slices"

	"github.com/tide-project/tide/internal/validate"
)

type sfKey struct {
	profile  ProfileID
	topology bool
	priority int32
}

type sfAgg struct {
	count   int32
	penalty float64
}

type sfRecord struct {
	Shortfall
	announced int32 // Count when last escalated; 0: never
}

// updateShortfalls aggregates the deficits left by this cycle by (profile,
// priority, topology), ages them, bounds them and escalates the old ones.
func (s *Shard) updateShortfalls() {
	clear(s.sfAgg)
	for _, a := range s.short {
		A := &s.allocs[a]
		k := sfKey{A.profile, A.topology != "", A.priority}
		agg := s.sfAgg[k]
		// Saturated: many clusters short of one profile must not wrap
		// into a negative (ignored) shortfall.
		agg.count = validate.Add32(agg.count, A.deficit())
		agg.penalty = max(agg.penalty, A.penalty)
		s.sfAgg[k] = agg
	}
	for k := range s.sf {
		if _, ok := s.sfAgg[k]; !ok {
			delete(s.sf, k)
		}
	}
	s.sfRecs = s.sfRecs[:0]
	for k, agg := range s.sfAgg {
		r := s.sf[k]
		if r == nil {
			r = &sfRecord{Shortfall: Shortfall{Profile: k.profile, Priority: k.priority, Topology: k.topology}}
			s.sf[k] = r
		}
		r.Age++
		r.Count, r.InterruptionPenalty = agg.count, agg.penalty
		s.sfRecs = append(s.sfRecs, r)
	}
	slices.SortFunc(s.sfRecs, func(x, y *sfRecord) int {
		return cmp.Or(cmp.Compare(y.Priority, x.Priority), cmp.Compare(y.Count, x.Count),
			cmp.Compare(x.Profile, y.Profile), cmpBool(x.Topology, y.Topology))
	})
	if len(s.sfRecs) > s.cfg.MaxShortfalls {
		s.sfRecs = s.sfRecs[:s.cfg.MaxShortfalls]
	}
	s.sfList = s.sfList[:0]
	for _, r := range s.sfRecs {
		s.sfList = append(s.sfList, r.Shortfall)
		if int(r.Age) > s.cfg.EscalateAfter && r.announced != r.Count {
			r.announced = r.Count
			s.acts = append(s.acts, Action{Kind: ActShortfall, Reason: ReasonEscalate, Shortfall: r.Shortfall})
		}
	}
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// Shortfalls returns the shortfalls left by the last cycle, at most
// Config.MaxShortfalls, highest priority first. The slice is the caller's.
func (s *Shard) Shortfalls() []Shortfall { return slices.Clone(s.sfList) }

// Escalated returns the shortfalls older than Config.EscalateAfter cycles:
// what the coordinator is asked to answer.
func (s *Shard) Escalated() []Shortfall {
	var out []Shortfall
	for _, sf := range s.sfList {
		if int(sf.Age) > s.cfg.EscalateAfter {
			out = append(out, sf)
		}
	}
	return out
}
