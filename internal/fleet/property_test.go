package fleet

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// testCatalog returns a catalog of nProfiles profiles ("p0", "p1", ...), each
// sold as bare metal, reserved, on-demand and spot.
func testCatalog(t testing.TB, nProfiles int) *Catalog {
	t.Helper()
	var specs []OfferingSpec
	for p := range nProfiles {
		name := fmt.Sprintf("p%d", p)
		for i, kind := range []capacity.Kind{capacity.BareMetal, capacity.Reserved, capacity.OnDemand, capacity.Spot} {
			o := capacity.Offering{Type: name, Kind: kind, Resources: capacity.CPU(1000),
				PricePerHour: float64(i) * float64(p+1)}
			if kind == capacity.Spot {
				o.PricePerHour, o.InterruptionProbability, o.InterruptionPenalty = 0.5, 0.1, 10
			}
			specs = append(specs, OfferingSpec{Provider: "cloud", Profile: name, Offering: o})
		}
	}
	cat, err := NewCatalog(specs)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// fakeProvider plays the providers of one shard: it remembers the target of
// every transition the shard asked for and reports it done, failed or lost.
type fakeProvider struct {
	s       *Shard
	pending map[MachineID]Observation
}

func (f *fakeProvider) take(acts []Action) {
	for _, a := range acts {
		m := a.Machine
		switch a.Kind {
		case ActCreate:
			f.pending[m] = Observation{Machine: m, State: Idle, Host: true}
		case ActConfigure:
			f.pending[m] = Observation{Machine: m, State: Configured, Host: true, Cluster: a.Cluster}
		case ActDrain:
			f.pending[m] = Observation{Machine: m, State: Idle, Host: true}
		case ActRelease:
			f.pending[m] = Observation{Machine: m, State: Speculative}
		case ActExport:
			delete(f.pending, m)
		}
	}
}

// step completes, fails or loses a random share of machines.
func (f *fakeProvider) step(t *testing.T, r *rand.Rand, now time.Time) {
	t.Helper()
	var obs []Observation
	for m, o := range f.pending {
		info, ok := f.s.Machine(m)
		if !ok {
			delete(f.pending, m)
			continue
		}
		switch x := r.IntN(100); {
		case x < 50:
			obs = append(obs, o)
			delete(f.pending, m)
		case x < 53 && info.State == Creating: // refused
			obs = append(obs, Observation{Machine: m, State: Speculative})
			delete(f.pending, m)
		case x < 55: // timed out
			obs = append(obs, Observation{Machine: m, State: Failed, Host: info.Host, Cluster: info.Cluster})
			delete(f.pending, m)
		}
	}
	for range r.IntN(3) { // machines lost (spot reclaims, hardware)
		m := MachineID(r.IntN(f.s.Len()))
		if info, ok := f.s.Machine(m); ok && info.Host && info.State != Deleting {
			obs = append(obs, Observation{Machine: m, State: Speculative})
			delete(f.pending, m)
		}
	}
	// Map iteration order is random: sort for a reproducible run.
	sortObservations(obs)
	if err := f.s.Observe(now, obs...); err != nil {
		t.Fatal(err)
	}
}

func sortObservations(obs []Observation) {
	for i := 1; i < len(obs); i++ {
		for j := i; j > 0 && obs[j].Machine < obs[j-1].Machine; j-- {
			obs[j], obs[j-1] = obs[j-1], obs[j]
		}
	}
}

// checkActions holds the per-cycle rules: one action per machine, and each
// action applies to the state the machine was in before the cycle.
func checkActions(t *testing.T, before map[MachineID]MachineInfo, acts []Action) {
	t.Helper()
	seen := map[MachineID]bool{}
	for _, a := range acts {
		if a.Kind == ActShortfall {
			continue
		}
		if seen[a.Machine] {
			t.Fatalf("%s: two actions for one machine in one cycle", a)
		}
		seen[a.Machine] = true
		st := before[a.Machine].State
		ok := false
		switch a.Kind {
		case ActCreate:
			ok = st == Speculative
		case ActConfigure:
			ok = st == Idle
		case ActDrain:
			ok = st == Configured || st == Configuring
		case ActRelease:
			ok = st == Idle || st == Failed
		case ActExport:
			ok = st == Idle && before[a.Machine].Exporting
		}
		if !ok {
			t.Fatalf("%s: not applicable to a %s machine", a, st)
		}
	}
}

// checkAllocations holds what a finished cycle guarantees for every
// allocation of a cluster that has sent needs: nothing is provisioned beyond
// the need; no reserved machine is left Idle; and a need left short (and not
// due for the next cycle because it lost machines during this one) has no
// unreserved Idle, arriving or (unless backing off) Speculative machine of
// its profile it could use.
func checkAllocations(t *testing.T, s *Shard) {
	t.Helper()
	for a := 1; a < len(s.allocs); a++ {
		A := &s.allocs[a]
		if !A.known {
			continue
		}
		if have := A.bound() + int32(A.in.n); have > A.want {
			t.Fatalf("%s/p%d: %d bound or incoming, want %d", A.cluster, A.profile, have, A.want)
		}
		for id := A.in.head; id != 0; id = s.next[id-1] {
			if s.state(id-1) == Idle {
				t.Fatalf("%s/p%d: reserved %s left Idle", A.cluster, A.profile, MachineID(id-1))
			}
		}
		if A.deficit() == 0 || A.dirty {
			continue
		}
		for _, g := range s.profs[A.profile].idleOrder {
			G := &s.groups[g]
			if G.idle.n > 0 || G.arriving.n > 0 || G.spec.n > 0 && G.backoff <= s.now {
				t.Fatalf("%s/p%d short by %d while group %d has idle %d, arriving %d, speculative %d",
					A.cluster, A.profile, A.deficit(), g, G.idle.n, G.arriving.n, G.spec.n)
			}
		}
	}
}

// checkNoInversion holds after the shard has quiesced: no need is short
// while a lower priority holds a machine of its profile.
func checkNoInversion(t *testing.T, s *Shard) {
	t.Helper()
	for a := 1; a < len(s.allocs); a++ {
		A := &s.allocs[a]
		if !A.known || A.deficit() <= 0 {
			continue
		}
		for b := 1; b < len(s.allocs); b++ {
			if B := &s.allocs[b]; B.known && B.profile == A.profile && B.priority < A.priority && B.bound() > 0 {
				t.Fatalf("inversion: %s/p%d at %d short by %d while %s holds %d at %d", A.cluster, A.profile,
					A.priority, A.deficit(), B.cluster, B.bound(), B.priority)
			}
		}
	}
}

func snapshot(s *Shard) map[MachineID]MachineInfo {
	out := make(map[MachineID]MachineInfo, s.Len())
	for m := range s.Len() {
		if info, ok := s.Machine(MachineID(m)); ok {
			out[MachineID(m)] = info
		}
	}
	return out
}

// TestRandomizedInvariants drives two shards and the coordinator with random
// needs, provider outcomes (completions, refusals, failures, losses) and
// coordinator plans, and checks on every step the machine model's invariant
// host = nil ⇒ cluster = 0, that no machine is double-assigned (Check), the
// per-action rules, and that no allocation is provisioned beyond its need.
// At the end the shards quiesce and no priority inversion may remain.
func TestRandomizedInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runRandomized(t, seed, 400)
		})
	}
}

func runRandomized(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, seed*7919))
	t.Logf("seed %d", seed)
	cat := testCatalog(t, 3)
	now := base
	type shardUnderTest struct {
		s *Shard
		f *fakeProvider
	}
	var shards []*shardUnderTest
	for range 2 {
		s, err := NewShard(cat, Config{EscalateAfter: 2}, now)
		if err != nil {
			t.Fatal(err)
		}
		for o := range OfferingID(cat.Offerings()) {
			for _, rp := range []float64{0, 5, 50} {
				st := Speculative
				if r.IntN(2) == 0 {
					st = Idle
				}
				if _, err := s.Add(now, MachineSpec{Offering: o, ReclamationPenalty: rp, State: st, Host: st == Idle},
					r.IntN(4)); err != nil {
					t.Fatal(err)
				}
			}
		}
		shards = append(shards, &shardUnderTest{s: s, f: &fakeProvider{s: s, pending: map[MachineID]Observation{}}})
	}
	priorities := []int32{0, 100, 50_000, 300_000, 600_000, 950_000}
	randomNeeds := func(c ClusterID) ClusterCapacityNeeds {
		msg := ClusterCapacityNeeds{Cluster: c}
		for p := range ProfileID(cat.Profiles()) {
			if r.IntN(3) == 0 {
				continue
			}
			msg.Needs = append(msg.Needs, Need{Profile: p, Count: int32(r.IntN(6)),
				Priority: priorities[r.IntN(len(priorities))], InterruptionPenalty: float64(r.IntN(50)),
				DrainTime: time.Duration(r.IntN(600)) * time.Second})
		}
		return msg
	}
	decide := func(i int, needs []ClusterCapacityNeeds) {
		sh := shards[i]
		before := snapshot(sh.s)
		acts, err := sh.s.Decide(now, needs...)
		if err != nil {
			t.Fatal(err)
		}
		checkActions(t, before, acts)
		sh.f.take(acts)
		for _, a := range acts {
			if a.Kind == ActExport {
				other := shards[1-i]
				if _, err := other.s.Import(now, []Exported{a.Exported}); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkAllocations(t, sh.s)
	}
	check := func(step int, what string) {
		for i, sh := range shards {
			for m := range sh.s.Len() {
				if info, ok := sh.s.Machine(MachineID(m)); ok && !info.Host && info.Cluster != 0 {
					t.Fatalf("seed %d step %d (%s) shard %d: %s has no host but cluster %s", seed, step, what, i,
						MachineID(m), info.Cluster)
				}
			}
			if err := sh.s.Check(); err != nil {
				t.Fatalf("seed %d step %d (%s) shard %d: %v", seed, step, what, i, err)
			}
		}
	}
	for step := range steps {
		now = now.Add(time.Duration(1+r.IntN(20)) * time.Second)
		for i, sh := range shards {
			var needs []ClusterCapacityNeeds
			for range r.IntN(3) {
				// Clusters 1-12 live on shard 0, 13-24 on shard 1.
				needs = append(needs, randomNeeds(ClusterID(1+12*i+r.IntN(12))))
			}
			decide(i, needs)
			check(step, "decide")
			sh.f.step(t, r, now)
			check(step, "observe")
		}
		if step%10 == 9 {
			var sums []ShardSummary
			var escs []Escalation
			for i, sh := range shards {
				for _, sf := range sh.s.Escalated() {
					escs = append(escs, Escalation{Shard: ShardID(i), Shortfall: sf})
				}
			}
			var wanted []ProfileID
			for _, e := range escs {
				wanted = append(wanted, e.Shortfall.Profile)
			}
			for i, sh := range shards {
				sums = append(sums, sh.s.Summary(ShardID(i), wanted...))
			}
			plan, err := PlanShortfalls(CoordinatorConfig{Preemption: true, MinPreemptGap: 100_000}, sums, escs)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range plan.Directives {
				from, to := shards[d.From], shards[d.To]
				switch d.Kind {
				case ReassignIdle, ReassignQuota:
					st := Idle
					if d.Kind == ReassignQuota {
						st = Speculative
					}
					acts, err := from.s.Export(d.Profile, st, int(d.Count))
					if err != nil {
						t.Fatal(err)
					}
					from.f.take(acts)
					var ms []Exported
					for _, a := range acts {
						ms = append(ms, a.Exported)
					}
					if _, err := to.s.Import(now, ms); err != nil {
						t.Fatal(err)
					}
				case Preempt:
					before := snapshot(from.s)
					acts, err := from.s.Preempt(now, PreemptRequest{Profile: d.Profile, Priority: d.Priority,
						MinGap: 100_000, Count: int(d.Count)})
					if err != nil {
						t.Fatal(err)
					}
					checkActions(t, before, acts)
					from.f.take(acts)
				}
				check(step, "directive "+d.String())
			}
		}
	}
	// Quiesce: no new needs and no faults; every transition completes.
	for round := range 60 {
		now = now.Add(time.Minute)
		quiet := true
		for i, sh := range shards {
			before := snapshot(sh.s)
			acts, err := sh.s.Decide(now)
			if err != nil {
				t.Fatal(err)
			}
			checkActions(t, before, acts)
			sh.f.take(acts)
			for _, a := range acts {
				if a.Kind == ActExport {
					if _, err := shards[1-i].s.Import(now, []Exported{a.Exported}); err != nil {
						t.Fatal(err)
					}
				}
				if a.Kind != ActShortfall {
					quiet = false
				}
			}
			var obs []Observation
			for _, o := range sh.f.pending {
				obs = append(obs, o)
			}
			clear(sh.f.pending)
			sortObservations(obs)
			if len(obs) > 0 {
				quiet = false
			}
			if err := sh.s.Observe(now, obs...); err != nil {
				t.Fatal(err)
			}
			check(steps+round, "quiesce")
		}
		if quiet {
			for _, sh := range shards {
				checkNoInversion(t, sh.s)
				checkAllocations(t, sh.s)
			}
			return
		}
	}
	t.Fatalf("seed %d: the shards did not quiesce", seed)
}
