package coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/coord"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
)

// The 100M-machine fleet of issue 7, modelled by sampling: a few real
// shards of 500,000 machines and 2,500 clusters each are built and run
// through the decision engine until their shortfalls escalate; their
// reports (fleet.Shard.Summary and Shortfalls, as a shard controller
// publishes them) are the samples. 200 shard reports are drawn from them
// with seeded perturbations (half the shards donors with spare capacity and
// no shortfalls, half recipients with up to 100 escalated shortfalls each),
// written to a real etcd, and a coordinator replica runs its planning cycle
// over them: the work of one coordinator cycle at 100M machines.
const (
	scaleShards   = 200
	scaleMachines = 500_000
	scaleClusters = 2_500
	scaleProfiles = 20
	scaleSamples  = 2
)

var scaleKinds = []capacity.Kind{capacity.OnDemand, capacity.Spot, capacity.Reserved, capacity.BareMetal}

func scaleOfferings() []etcdstate.OfferingRecord {
	var out []etcdstate.OfferingRecord
	for p := range scaleProfiles {
		for k, kind := range scaleKinds {
			out = append(out, etcdstate.OfferingRecord{Provider: "sim", Profile: fmt.Sprintf("p%02d", p),
				Offering: capacity.Offering{Type: fmt.Sprintf("t%02d", p), Kind: kind,
					PricePerHour: float64(10 + p - 2*k), Resources: capacity.Resources{MilliCPU: 8000}}})
		}
	}
	return out
}

// sampleShard builds one 500K-machine shard (seeded), makes 60% of its
// clusters outgrow it, and runs 7 cycles: its report is a sample.
func sampleShard(tb testing.TB, cat *fleet.Catalog, seed uint64) etcdstate.Report {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s, err := fleet.NewShard(cat, fleet.Config{}, now)
	if err != nil {
		tb.Fatal(err)
	}
	s.Reserve(scaleMachines)
	priorities := []int32{100, 1_000, 50_000, 200_000, 600_000, 950_000}
	configured := scaleMachines * 8 / 10
	perNeed := int32(configured / (scaleClusters * 2))
	var needs []fleet.ClusterCapacityNeeds
	for c := 1; c <= scaleClusters; c++ {
		msg := fleet.ClusterCapacityNeeds{Cluster: fleet.ClusterID(c)}
		first := r.IntN(scaleProfiles)
		for k := range 2 {
			p := fleet.ProfileID((first + k) % scaleProfiles)
			msg.Needs = append(msg.Needs, fleet.Need{Profile: p, Count: perNeed,
				Priority: priorities[r.IntN(len(priorities))], InterruptionPenalty: float64(r.IntN(100))})
			for i := range 4 {
				n := int(perNeed) / 4
				if i == 3 {
					n = int(perNeed) - 3*(int(perNeed)/4)
				}
				if _, err := s.Add(now, fleet.MachineSpec{Offering: fleet.OfferingID(int(p)*4 + i), State: fleet.Configured,
					Host: true, Cluster: fleet.ClusterID(c)}, n); err != nil {
					tb.Fatal(err)
				}
			}
		}
		needs = append(needs, msg)
	}
	rest := scaleMachines - s.Len()
	for o := range cat.Offerings() {
		n := rest / (cat.Offerings() - o)
		rest -= n
		st, host := fleet.Speculative, false
		if o%2 == 0 {
			st, host = fleet.Idle, true
		}
		if _, err := s.Add(now, fleet.MachineSpec{Offering: fleet.OfferingID(o), State: st, Host: host}, n); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range needs {
		if r.IntN(10) < 6 {
			needs[i].Needs[r.IntN(2)].Count += int32(100 + r.IntN(400))
		}
	}
	for cycle := range 7 {
		in := needs
		if cycle > 0 {
			in = nil
		}
		now = now.Add(time.Second)
		if _, err := s.Decide(now, in...); err != nil {
			tb.Fatal(err)
		}
	}
	// The summary covers the escalated profiles first, as the coordinator
	// asks shards to (etcdstate's coord/wanted).
	var wanted []fleet.ProfileID
	for _, sf := range s.Escalated() {
		wanted = append(wanted, sf.Profile)
	}
	return etcdstate.Report{Summary: s.Summary(0, wanted...), Shortfalls: s.Shortfalls(),
		EscalateAfter: s.Config().EscalateAfter, Clusters: scaleClusters}
}

// fleetReports draws the 200 shards' reports from the samples.
func fleetReports(tb testing.TB, cat *fleet.Catalog) map[uint16]etcdstate.Report {
	tb.Helper()
	var samples []etcdstate.Report
	for i := range scaleSamples {
		samples = append(samples, sampleShard(tb, cat, uint64(i+1)))
	}
	r := rand.New(rand.NewPCG(3, 4))
	scale := func(n uint32) uint32 { return uint32(float64(n) * (0.5 + r.Float64())) }
	out := make(map[uint16]etcdstate.Report, scaleShards)
	for i := range scaleShards {
		rep := samples[i%scaleSamples]
		rep.Shard = uint16(i + 1)
		rep.Epoch = int64(i + 1)
		rep.Summary.Shard = fleet.ShardID(i + 1)
		if i%2 == 0 { // a donor: spare capacity, nothing short
			rep.Shortfalls = nil
			for j := range rep.Summary.Spares() {
				sp := &rep.Summary.Spare[j]
				sp.Idle, sp.Speculative = scale(sp.Idle+1000), scale(sp.Speculative+1000)
			}
		} else { // a recipient
			sfs := append([]fleet.Shortfall(nil), rep.Shortfalls...)
			for j := range sfs {
				sfs[j].Count = int32(scale(uint32(sfs[j].Count))) + 1
			}
			rep.Shortfalls = sfs
			for j := range rep.Summary.Spares() {
				rep.Summary.Spare[j].Idle, rep.Summary.Spare[j].Speculative = 0, 0
			}
		}
		out[rep.Shard] = rep
	}
	return out
}

type scaleFleet struct {
	reports  map[uint16]etcdstate.Report
	cat      *fleet.Catalog
	c        *coord.Coordinator
	escalate int
}

func newScaleFleet(tb testing.TB) *scaleFleet {
	tb.Helper()
	offs := scaleOfferings()
	cat, err := etcdstate.BuildCatalog(offs)
	if err != nil {
		tb.Fatal(err)
	}
	f := &scaleFleet{reports: fleetReports(tb, cat), cat: cat}
	srv := etcdtest.Start(tb)
	cli := srv.Client()
	store := etcdstate.New(cli, "/scale", 30*time.Second)
	conf := etcdstate.Config{Offerings: offs, Providers: []etcdstate.ProviderSpec{{Name: "sim", Type: "sim"}}}
	for id := range f.reports {
		conf.Shards = append(conf.Shards, etcdstate.ShardSpec{ID: id})
	}
	ctx := context.Background()
	if err := store.InitFleet(ctx, conf); err != nil {
		tb.Fatal(err)
	}
	for id, rep := range f.reports {
		f.escalate += len(rep.Escalated())
		val, err := jsonOf(rep)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := cli.Put(ctx, store.ReportKey(id), val); err != nil {
			tb.Fatal(err)
		}
	}
	f.c, err = coord.New(coord.Config{ID: "scale", LeaseTTL: 10 * time.Second}, coord.Deps{Store: store})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.c.Close)
	if err := f.c.Campaign(ctx); err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestCoordinatorCycleAt100M runs the coordinator's planning cycle over the
// sampled 200-shard, 100M-machine fleet: the first cycle (every escalation
// answered, the directives written to etcd) and the next (all of them in
// flight: nothing new). Both stay within seconds.
func TestCoordinatorCycleAt100M(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two 500,000-machine shards; skipped with -short")
	}
	f := newScaleFleet(t)
	ctx := context.Background()
	first, err := f.c.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.c.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("100M machines (%d shards × %d): %d escalations; first cycle %s wrote %d directives "+
		"(%d unanswered); next cycle %s with %d in flight, %d new",
		scaleShards, scaleMachines, f.escalate, first.Took, len(first.Directives), len(first.Unanswered),
		second.Took, second.InFlight, len(second.Directives))
	if first.Shards != scaleShards || f.escalate < scaleShards/2*50 || len(first.Directives) == 0 {
		t.Fatalf("the sampled fleet is not what it should be: %d shards, %d escalations, %d directives",
			first.Shards, f.escalate, len(first.Directives))
	}
	if len(second.Directives) != 0 || second.InFlight != len(first.Directives) {
		t.Errorf("next cycle: %d new directives, %d in flight; want 0 and %d", len(second.Directives),
			second.InFlight, len(first.Directives))
	}
	for _, took := range []time.Duration{first.Took, second.Took} {
		if took > 10*time.Second {
			t.Errorf("a coordinator cycle took %s, want seconds at most", took)
		}
	}
}

// BenchmarkCoordinatorCycle100M is the steady-state planning cycle over the
// sampled 100M-machine fleet (reports and directives read from etcd, plan,
// nothing new to write).
func BenchmarkCoordinatorCycle100M(b *testing.B) {
	f := newScaleFleet(b)
	ctx := context.Background()
	if _, err := f.c.Cycle(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.c.Cycle(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCoordinatorPlan100M is the pure planning step alone (in-flight
// accounting and fleet.PlanShortfalls) over the 200 sampled reports, with
// every escalation to answer.
func BenchmarkCoordinatorPlan100M(b *testing.B) {
	offs := scaleOfferings()
	cat, err := etcdstate.BuildCatalog(offs)
	if err != nil {
		b.Fatal(err)
	}
	reports := fleetReports(b, cat)
	b.ResetTimer()
	for b.Loop() {
		if _, ds, _ := coord.Plan(fleet.CoordinatorConfig{}, cat, reports, nil); len(ds) == 0 {
			b.Fatal("nothing planned")
		}
	}
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
