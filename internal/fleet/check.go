package fleet

import (
	"errors"
	"fmt"
)

// Check verifies the inventory's invariants and returns every violation,
// joined. It walks the whole shard (O(machines)): for tests, and for a
// driver's debug endpoint, not for every cycle.
//
//   - The machine model: host = nil ⇒ cluster = 0 on every machine, and
//     each stable state holds what it must.
//   - No machine is double-assigned: every machine except Deleting ones is
//     in exactly one list, the one its state, cluster and reservation name;
//     a bound machine is in its own cluster's allocation; a reserved machine
//     is reserved for exactly one allocation and on that allocation's list.
//   - List links and counts agree.
func (s *Shard) Check() error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	seen := make([]bool, len(s.st))
	walk := func(label func() string, l *list, each func(m uint32)) {
		var n, prev uint32
		for id := l.head; id != 0; id = s.next[id-1] {
			m := id - 1
			if s.prev[m] != prev {
				fail("%s: %s has a broken back link", label(), MachineID(m))
			}
			prev = id
			if seen[m] {
				fail("%s: %s is in two lists (double-assigned)", label(), MachineID(m))
				return
			}
			seen[m] = true
			if got := s.listOf(m, false); got != l {
				fail("%s: %s (%s) is not where its state puts it", label(), MachineID(m), s.state(m))
			}
			if each != nil {
				each(m)
			}
			n++
			if n > uint32(len(s.st)) {
				fail("%s: cycle in list", label())
				return
			}
		}
		if n != l.n || l.tail != prev {
			fail("%s: holds %d machines, counted %d", label(), n, l.n)
		}
	}
	walk(func() string { return "free" }, &s.free, nil)
	walk(func() string { return "failed" }, &s.failed, nil)
	for g := range s.groups {
		G := &s.groups[g]
		for _, x := range []struct {
			name string
			l    *list
		}{{"speculative", &G.spec}, {"idle", &G.idle}, {"arriving", &G.arriving}} {
			walk(func() string { return fmt.Sprintf("group %d %s", g, x.name) }, x.l, func(m uint32) {
				if s.grp[m] != uint16(g) {
					fail("group %d: %s belongs to group %d", g, MachineID(m), s.grp[m])
				}
			})
		}
	}
	for a := range s.allocs {
		A := &s.allocs[a]
		for i := range A.lists {
			sl := &A.lists[i]
			walk(func() string { return fmt.Sprintf("%s/p%d bound", A.cluster, A.profile) }, &sl.l, func(m uint32) {
				if ClusterID(s.cl[m]) != A.cluster || s.grp[m] != sl.group || s.profileOf(m) != A.profile {
					fail("%s/p%d: %s is bound to %s", A.cluster, A.profile, MachineID(m), ClusterID(s.cl[m]))
				}
			})
		}
		walk(func() string { return fmt.Sprintf("%s/p%d incoming", A.cluster, A.profile) }, &A.in, func(m uint32) {
			if r, ok := s.reserved[m]; !ok || r != uint32(a) {
				fail("%s/p%d: %s is on its incoming list but reserved for %d", A.cluster, A.profile, MachineID(m), r)
			}
			if a != exportSink && s.profileOf(m) != A.profile {
				fail("%s/p%d: %s of profile %d is reserved for it", A.cluster, A.profile, MachineID(m), s.profileOf(m))
			}
		})
	}
	for m := range s.st {
		b := s.st[m]
		st := State(b & stateMask)
		if b&freshBit != 0 {
			fail("%s: still marked as acted on in this cycle", MachineID(m))
		}
		if b == 0 {
			if !seen[m] {
				fail("%s: free slot not on the free list", MachineID(m))
			}
			continue
		}
		if err := checkBinding(st, b&hostBit != 0, ClusterID(s.cl[m])); err != nil {
			fail("%s: %w", MachineID(m), err)
		}
		if int(s.grp[m]) >= len(s.groups) {
			fail("%s: unknown group %d", MachineID(m), s.grp[m])
			continue
		}
		_, reserved := s.reserved[uint32(m)]
		if reserved != (b&resBit != 0) {
			fail("%s: reservation flag %t, reservation map %t", MachineID(m), b&resBit != 0, reserved)
		}
		if reserved && st != Creating && st != Idle && st != Draining {
			fail("%s: a %s machine is reserved", MachineID(m), st)
		}
		if st == Deleting {
			if seen[m] {
				fail("%s: deleting machine on a list", MachineID(m))
			}
		} else if !seen[m] {
			fail("%s: %s machine on no list", MachineID(m), st)
		}
	}
	for m := range s.reserved {
		if int(m) >= len(s.st) || s.st[m]&resBit == 0 {
			fail("%s: reserved without its flag", MachineID(m))
		}
	}
	return errors.Join(errs...)
}
