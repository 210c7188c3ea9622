package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Describe prints the shard deterministically, for transcripts and people:
// every machine (slot order), every allocation with a need or machines
// (priority order), and the shortfalls. It is O(machines): use it on small
// shards.
func (s *Shard) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cycle %d\n", s.cycle)
	for m := range s.st {
		if s.st[m] == 0 {
			continue
		}
		info, _ := s.Machine(MachineID(m))
		fmt.Fprintf(&b, "%s %s rp=%g %s", MachineID(m), s.cat.OfferingName(info.Offering), info.ReclamationPenalty,
			info.State)
		if info.Cluster != 0 {
			fmt.Fprintf(&b, " %s", info.Cluster)
		}
		switch {
		case info.Exporting:
			b.WriteString(" ->export")
		case info.For != 0:
			fmt.Fprintf(&b, " ->%s", info.For)
		}
		fmt.Fprintf(&b, " since=%s\n", info.Since.Sub(s.epoch))
	}
	as := make([]uint32, 0, len(s.allocs))
	for a := 1; a < len(s.allocs); a++ {
		if A := &s.allocs[a]; A.want > 0 || A.bound() > 0 || A.in.n > 0 {
			as = append(as, uint32(a))
		}
	}
	al := s.allocs
	slices.SortFunc(as, func(x, y uint32) int {
		return cmp.Or(cmp.Compare(al[y].priority, al[x].priority), cmp.Compare(al[x].cluster, al[y].cluster),
			cmp.Compare(al[x].profile, al[y].profile))
	})
	for _, a := range as {
		A := &s.allocs[a]
		fmt.Fprintf(&b, "need %s %s want=%d prio=%d bound=%d incoming=%d", A.cluster, s.cat.ProfileName(A.profile),
			A.want, A.priority, A.bound(), A.in.n)
		if !A.known {
			b.WriteString(" (unknown cluster)")
		}
		if A.topology != "" {
			fmt.Fprintf(&b, " topology=%s", A.topology)
		}
		b.WriteByte('\n')
	}
	for _, sf := range s.sfList {
		fmt.Fprintf(&b, "shortfall %s", sf.format(s.cat))
		if int(sf.Age) > s.cfg.EscalateAfter {
			b.WriteString(" escalated")
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}
