package decide

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

var gangOffers = []capacity.Offering{
	{Type: "g8", PricePerHour: 24, Resources: capacity.Resources{MilliCPU: 96000, Memory: 768 << 30, GPUs: 8}},
	{Type: "g2", PricePerHour: 7, Resources: capacity.Resources{MilliCPU: 24000, Memory: 192 << 30, GPUs: 2}},
}

// gangSnapshot is n pending instances in gangs of size each, spread over
// levels priorities, on an empty pool, the backlog's batch window over.
func gangSnapshot(n, size, levels int) Snapshot {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Snapshot{Time: t0, State: policy.State{PendingSince: t0.Add(-time.Minute)}}
	for g := range n / size {
		s.Pending = append(s.Pending, capacity.Pending{Count: size, Gang: fmt.Sprintf("g%03d", g), Priority: g % levels,
			Requests: capacity.Resources{MilliCPU: 4000, Memory: 32 << 30, GPUs: []int64{1, 2, 4, 8}[g%4]}})
	}
	return s
}

// The plan of a decision shows, per gang, the atomic purchase: the gangs
// of the higher priorities that fit the pool's max are bought whole, the
// rest wait whole, and work below expendable_below never scales up.
func TestDecideShowsGangPurchase(t *testing.T) {
	cut := 0
	cfg := policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 5), Offerings: gangOffers, ExpendableBelow: &cut}
	s := gangSnapshot(12, 4, 3) // gangs of 4 instances, priorities 0, 1, 2, 0
	s.Pending[0].Priority = -1  // g000 is expendable
	res, err := Run("gpu", cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]GangPlan{}
	for _, g := range res.Gangs {
		got[g.Gang] = g
	}
	// g002 (4 x 4 GPUs, priority 2) needs 2 nodes, g001 (4 x 2 GPUs, priority 1) 1; then 2 are left.
	if !got["g002"].Bought || !got["g001"].Bought || got["g000"].Bought ||
		!strings.Contains(got["g000"].Why, "expendable_below") {
		t.Fatalf("gangs %+v", res.Gangs)
	}
	if res.Desired < 3 || res.Desired > 5 {
		t.Fatalf("desired %d", res.Desired)
	}
}

// Under the pool's limits too a gang is bought whole or waits whole, and
// the plan says why: one that crosses a limit even in an empty pool can
// never fit; one that fits alone waits for work of higher priority.
func TestDecideShowsGangsWithinLimits(t *testing.T) {
	gpus := int64(16)
	cfg := policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 10), Offerings: gangOffers[:1],
		Limits: policy.Limits{GPUs: &gpus}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := capacity.Resources{MilliCPU: 4000, Memory: 32 << 30, GPUs: 8}
	s := Snapshot{Time: t0, State: policy.State{PendingSince: t0.Add(-time.Minute)}, Pending: []capacity.Pending{
		{Requests: req, Count: 3, Gang: "huge", Priority: 5},
		{Requests: req, Count: 2, Gang: "a", Priority: 1},
		{Requests: req, Count: 2, Gang: "b"},
	}}
	res, err := Run("gpu", cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]GangPlan{}
	for _, g := range res.Gangs {
		got[g.Gang] = g
	}
	if res.Desired != 2 || !got["a"].Bought || got["huge"].Bought || got["b"].Bought {
		t.Fatalf("desired %d (%s), gangs %+v", res.Desired, res.Reason, res.Gangs)
	}
	if w := got["huge"].Why; !strings.Contains(w, "can never fit within the pool's limits, not even in an empty pool: limits.gpus 16") {
		t.Fatalf("huge: %q", w)
	}
	if w := got["b"].Why; w != "does not fit within the pool's limits after work of higher priority" {
		t.Fatalf("b: %q", w)
	}
	// Without limits, in a pool of at most 2 nodes: huge never fits.
	cfg.Limits, cfg.Nodes = policy.Limits{}, capacity.Elastic(0, 2)
	if res, err = Run("gpu", cfg, s); err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Gangs {
		if g.Gang == "huge" && g.Why != "can never fit: not even an empty pool of the pool's max (2 nodes) holds it" {
			t.Fatalf("huge: %q", g.Why)
		}
	}
}

// BenchmarkDecideGangs decides 10,000 pending instances in 100 gangs of 100
// at 10 priority levels on a pool whose max holds a tenth of them (so the
// run by priority that fits is searched), as tide decide does
// (docs/benchmarks.md: under 10 ms).
func BenchmarkDecideGangs(b *testing.B) {
	nodes := capacity.Elastic(0, 500)
	in := Input{Pool: "p", Policy: policy.Config{Policy: policy.Tide, Nodes: nodes, Offerings: gangOffers},
		Reconcile: reconcile.Config{Nodes: nodes}, Interval: 15 * time.Second}
	s := gangSnapshot(10_000, 100, 10)
	b.ReportAllocs()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		res, err := Decide(in, s)
		if err != nil || res.Desired == 0 || len(res.Gangs) != 100 {
			b.Fatal(res.Desired, len(res.Gangs), err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	// CPU time is the figure on a shared machine, where wall time counts
	// the other processes' turns too.
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
