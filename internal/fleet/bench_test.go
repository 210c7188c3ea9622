package fleet

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// fleetScale describes a synthetic shard for the benchmarks: clusters, each
// needing needsPer profiles; machines split between Configured (serving the
// needs exactly), Idle and Speculative.
type fleetScale struct {
	machines, clusters, profiles, needsPer int
	idle, speculative                      int
}

// bigShard is the scale: one shard of 500,000 machines and 2,500
// clusters.
var bigShard = fleetScale{machines: 500_000, clusters: 2_500, profiles: 20, needsPer: 2, idle: 50_000,
	speculative: 50_000}

// benchFleet is a shard with its driver state: the needs it serves and the
// provider transitions in flight.
type benchFleet struct {
	s       *Shard
	needs   []ClusterCapacityNeeds
	pending []Observation
	now     time.Time
	r       *rand.Rand
	grow    bool // needs only grow: the shard runs out of capacity
}

func buildFleet(tb testing.TB, sc fleetScale) *benchFleet {
	tb.Helper()
	cat := testCatalog(tb, sc.profiles)
	f := &benchFleet{now: base, r: rand.New(rand.NewPCG(1, 2))}
	s, err := NewShard(cat, Config{}, f.now)
	if err != nil {
		tb.Fatal(err)
	}
	f.s = s
	s.Reserve(sc.machines)
	priorities := []int32{100, 1_000, 50_000, 200_000, 600_000, 950_000}
	penalties := []float64{0, 5, 50}
	configured := sc.machines - sc.idle - sc.speculative
	perNeed := configured / (sc.clusters * sc.needsPer)
	offerings := cat.Offerings()
	for c := 1; c <= sc.clusters; c++ {
		msg := ClusterCapacityNeeds{Cluster: ClusterID(c)}
		first := f.r.IntN(sc.profiles)
		for k := range sc.needsPer {
			p := ProfileID((first + k) % sc.profiles)
			msg.Needs = append(msg.Needs, Need{Profile: p, Count: int32(perNeed), Priority: priorities[f.r.IntN(len(priorities))],
				InterruptionPenalty: float64(f.r.IntN(100)), DrainTime: time.Duration(30+f.r.IntN(600)) * time.Second})
			// Spread the need over the profile's four offerings.
			for i := range 4 {
				n := perNeed / 4
				if i == 3 {
					n = perNeed - 3*(perNeed/4)
				}
				o := OfferingID(int(p)*4 + i)
				if _, err := s.Add(f.now, MachineSpec{Offering: o, ReclamationPenalty: penalties[(c+i)%3], State: Configured,
					Host: true, Cluster: ClusterID(c)}, n); err != nil {
					tb.Fatal(err)
				}
			}
		}
		f.needs = append(f.needs, msg)
	}
	rest := sc.machines - s.Len()
	for i := range offerings {
		n := rest / (offerings - i)
		rest -= n
		st, host := Speculative, false
		if i%2 == 0 {
			st, host = Idle, true
		}
		if _, err := s.Add(f.now, MachineSpec{Offering: OfferingID(i), ReclamationPenalty: penalties[i%3], State: st,
			Host: host}, n); err != nil {
			tb.Fatal(err)
		}
	}
	acts, err := s.Decide(f.now, f.needs...)
	if err != nil {
		tb.Fatal(err)
	}
	if len(acts) != 0 {
		tb.Fatalf("the synthetic fleet is not at rest: %d actions, first %s", len(acts), acts[0])
	}
	return f
}

// changes returns the needs of k random clusters, each with one profile's
// count moved by -4..+4 (+0..+4 when the fleet grows), never below 0.
func (f *benchFleet) changes(k int) []ClusterCapacityNeeds {
	out := make([]ClusterCapacityNeeds, 0, k)
	for range k {
		c := f.r.IntN(len(f.needs))
		msg := &f.needs[c]
		i := f.r.IntN(len(msg.Needs))
		delta := int32(f.r.IntN(9)) - 4
		if f.grow {
			delta = int32(f.r.IntN(5))
		}
		n := msg.Needs[i].Count + delta
		msg.Needs[i].Count = max(0, n)
		out = append(out, ClusterCapacityNeeds{Cluster: msg.Cluster, Needs: append([]Need(nil), msg.Needs...)})
	}
	return out
}

// take records the provider transitions the actions start.
func (f *benchFleet) take(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCreate, ActDrain:
			f.pending = append(f.pending, Observation{Machine: a.Machine, State: Idle, Host: true})
		case ActConfigure:
			f.pending = append(f.pending, Observation{Machine: a.Machine, State: Configured, Host: true, Cluster: a.Cluster})
		case ActRelease:
			f.pending = append(f.pending, Observation{Machine: a.Machine, State: Speculative})
		}
	}
}

// cycle is one steady-state cycle as a driver runs it: the transitions
// started last cycle are reported done, then Decide runs with the needs
// that changed.
func (f *benchFleet) cycle(tb testing.TB, needs []ClusterCapacityNeeds) []Action {
	f.now = f.now.Add(time.Second)
	if err := f.s.Observe(f.now, f.pending...); err != nil {
		tb.Fatal(err)
	}
	f.pending = f.pending[:0]
	acts, err := f.s.Decide(f.now, needs...)
	if err != nil {
		tb.Fatal(err)
	}
	f.take(acts)
	return acts
}

// benchCycles pre-generates the needs changes (so the timed loop only runs
// the shard), warms the shard up, then times b.N cycles.
func benchCycles(b *testing.B, f *benchFleet, perCycle int) {
	const rounds = 512
	changes := make([][]ClusterCapacityNeeds, rounds)
	for i := range changes {
		changes[i] = f.changes(perCycle)
	}
	for i := range 100 { // warm up: idle pools start to be used and released
		f.cycle(b, changes[i%rounds])
	}
	actions := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		actions += len(f.cycle(b, changes[i%rounds]))
	}
	b.StopTimer()
	b.ReportMetric(float64(actions)/float64(b.N), "actions/cycle")
	if err := f.s.Check(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkShardCycle is the budget: one shard of 500,000 machines
// and 2,500 clusters, ≤ 10 ms per steady-state cycle on one core. Each cycle
// 1% of the clusters (25) change a need, and the transitions started by the
// previous cycle are reported done.
func BenchmarkShardCycle(b *testing.B) {
	benchCycles(b, buildFleet(b, bigShard), bigShard.clusters/100)
}

// BenchmarkShardCycleContended is the same cycle in a full shard (no
// Speculative quota, 1,000 Idle machines) whose needs only grow: growth is
// met by preemption, and short needs pile up (up to all 5,000) and are
// re-evaluated every cycle.
func BenchmarkShardCycleContended(b *testing.B) {
	sc := bigShard
	sc.idle, sc.speculative = 1_000, 0
	f := buildFleet(b, sc)
	f.grow = true
	benchCycles(b, f, sc.clusters/100)
	b.ReportMetric(float64(len(f.s.short)), "short-needs")
}

// BenchmarkShardCycleOneCluster times a cycle in which a single cluster's
// needs change: the cost of one cluster (budget ≤ 50 µs).
func BenchmarkShardCycleOneCluster(b *testing.B) {
	benchCycles(b, buildFleet(b, bigShard), 1)
}

// BenchmarkShardFullEvaluation re-evaluates every allocation (5,000) of the
// 500,000-machine shard: BigFleet's "full evaluation" (budget < 50 ms).
func BenchmarkShardFullEvaluation(b *testing.B) {
	f := buildFleet(b, bigShard)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.s.Reevaluate()
		f.cycle(b, nil)
	}
}

// TestShardMemoryPerMachine measures the inventory's heap footprint with
// runtime.MemStats (after a GC, all of the shard's allocations counted: the
// per-machine arrays, groups, allocations, maps and scratch) for the
// 500,000-machine shard after 100 steady-state cycles. Budget: ≤ 24 bytes
// per machine.
func TestShardMemoryPerMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 500,000-machine shard")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := buildFleet(t, bigShard)
	f.needs = nil // the driver's copy of the needs is not the shard's
	for range 100 {
		f.cycle(t, nil)
	}
	f.pending = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	perMachine := float64(after.HeapAlloc-before.HeapAlloc) / float64(f.s.Len())
	t.Logf("%d machines, %d clusters: %.2f bytes per machine (%.1f MB in the heap)", f.s.Len(), bigShard.clusters,
		perMachine, float64(after.HeapAlloc-before.HeapAlloc)/1e6)
	if perMachine > 24 {
		t.Errorf("%.2f bytes per machine, budget 24", perMachine)
	}
	runtime.KeepAlive(f.s)
}
