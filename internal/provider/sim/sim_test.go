package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

const (
	onDemand = "m8/z1/on-demand"
	spot     = "m8/z1/spot"
)

// env is one cloud on a fake clock, with helpers that fail the test on error.
type env struct {
	t   *testing.T
	clk *clock.Fake
	c   *sim.Cloud
	ctx context.Context
	seq uint64
}

func newEnv(t *testing.T, cfg sim.Config, seed uint64) *env {
	t.Helper()
	if cfg.Offerings == nil {
		cfg.Offerings = catalog()
	}
	clk := clock.NewFake(epoch)
	c, err := sim.New(cfg, clk, rand.New(rand.NewPCG(seed, seed)))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clk: clk, c: c, ctx: t.Context()}
}

func (e *env) fence() provider.Fence {
	e.seq++
	return provider.Fence{Controller: "test", Epoch: 1, Seq: e.seq}
}

func (e *env) create(pool, id, offering string) (provider.Ack, error) {
	return e.c.Create(e.ctx, provider.CreateRequest{Fence: e.fence(), Pool: pool, MachineID: id, Offering: offering})
}

func (e *env) mustCreate(pool, id, offering string) {
	e.t.Helper()
	if _, err := e.create(pool, id, offering); err != nil {
		e.t.Fatalf("create %s: %v", id, err)
	}
}

func (e *env) delete(pool, id string) (provider.Ack, error) {
	return e.c.Delete(e.ctx, provider.DeleteRequest{Fence: e.fence(), Pool: pool, MachineID: id})
}

func (e *env) state(id string) provider.State {
	e.t.Helper()
	m, err := e.c.Get(e.ctx, id)
	if provider.IsNotFound(err) {
		return "gone"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Check(); err != nil {
		e.t.Fatal(err)
	}
	return m.State
}

func TestConfigValidate(t *testing.T) {
	good := catalog()[0]
	tests := []struct {
		name string
		cfg  sim.Config
		want string
	}{
		{"no offerings", sim.Config{}, "offerings: at least one"},
		{"duplicate", sim.Config{Offerings: []sim.Offering{good, good}}, `offerings[1]: offering "m8/z1/on-demand" listed twice`},
		{"bad latency", sim.Config{Offerings: []sim.Offering{func() sim.Offering {
			o := good
			o.Boot = sim.Latency{Min: time.Minute, Median: time.Second, Max: time.Hour}
			return o
		}()}}, `offerings[0]: offering "m8/z1/on-demand": boot: want 0 <= min <= median <= max`},
		{"bad offering", sim.Config{Offerings: []sim.Offering{{Offering: capacity.Offering{Type: "x"}}}}, "resources: a node must provide"},
		{"negative stock", sim.Config{Offerings: []sim.Offering{func() sim.Offering { o := good; o.Stock = -1; return o }()}}, "stock: must not be negative"},
		{"hang rate", sim.Config{Offerings: []sim.Offering{func() sim.Offering { o := good; o.HangRate = 2; return o }()}}, "hang_rate: must be within [0, 1]"},
		{"quota", sim.Config{Offerings: catalog(), Quota: -1}, "quota: must not be negative"},
		{"error rate", sim.Config{Offerings: catalog(), APIErrorRate: 1.5}, "api_error_rate"},
		{"after commit", sim.Config{Offerings: catalog(), APIErrorAfterCommit: -0.1}, "api_error_after_commit"},
		{"timeout", sim.Config{Offerings: catalog(), BootTimeout: -time.Second}, "boot_timeout: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sim.New(tt.cfg, clock.NewFake(epoch), rand.New(rand.NewPCG(1, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := sim.New(sim.Config{Offerings: catalog()}, nil, nil); err == nil {
		t.Fatal("New without clock and rand succeeded")
	}
}

func TestLatencySample(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	l := sim.Latency{Min: 20 * time.Second, Median: 45 * time.Second, Max: 3 * time.Minute}
	const n = 20000
	samples := make([]time.Duration, n)
	for i := range samples {
		samples[i] = l.Sample(r)
		if samples[i] < l.Min || samples[i] > l.Max {
			t.Fatalf("sample %s outside [%s, %s]", samples[i], l.Min, l.Max)
		}
	}
	slices.Sort(samples)
	if med := samples[n/2]; med < 43*time.Second || med > 47*time.Second {
		t.Errorf("median %s, want about %s", med, l.Median)
	}
	if p99 := samples[n*99/100]; p99 <= 90*time.Second {
		t.Errorf("p99 %s: the distribution has no tail", p99)
	}
	if got := sim.Fixed(time.Second).Sample(r); got != time.Second {
		t.Errorf("Fixed(1s).Sample = %s", got)
	}
	if got := (sim.Latency{}).Sample(r); got != 0 {
		t.Errorf("zero Latency sample = %s", got)
	}
}

func TestBootLatencyIsVirtualTime(t *testing.T) {
	offs := catalog()
	offs[0].Boot = sim.Fixed(40 * time.Second)
	e := newEnv(t, sim.Config{Offerings: offs}, 1)
	e.mustCreate("p", "m1", onDemand)
	e.clk.Advance(40*time.Second - time.Nanosecond)
	if s := e.state("m1"); s != provider.Creating {
		t.Fatalf("just before the boot latency: %s, want creating", s)
	}
	if next, ok := e.c.NextEvent(); !ok || !next.Equal(epoch.Add(40*time.Second)) {
		t.Fatalf("NextEvent = %v, %v; want the boot at +40s", next, ok)
	}
	e.clk.Advance(time.Nanosecond)
	m, _ := e.c.Get(e.ctx, "m1")
	if m.State != provider.Idle || m.Host == "" || !m.UpdatedAt.Equal(epoch.Add(40*time.Second)) {
		t.Fatalf("after the boot latency: %+v, want idle with a host since +40s", m)
	}
	if _, ok := e.c.NextEvent(); ok {
		t.Fatal("NextEvent reports an event after everything finished")
	}
}

func TestQuota(t *testing.T) {
	offs := catalog()
	offs[1].Quota = 2
	e := newEnv(t, sim.Config{Offerings: offs, Quota: 3}, 1)
	e.mustCreate("p", "s1", spot)
	e.mustCreate("p", "s2", spot)
	_, err := e.create("p", "s3", spot)
	var qe *provider.QuotaExceededError
	if !asQuota(err, &qe) || qe.Offering != spot || qe.Limit != 2 {
		t.Fatalf("third spot create = %v, want the spot offering's quota of 2", err)
	}
	e.mustCreate("p", "d1", onDemand)
	if _, err := e.create("p", "d2", onDemand); !asQuota(err, &qe) || qe.Offering != "" || qe.Limit != 3 {
		t.Fatalf("fourth create = %v, want the total quota of 3", err)
	}
	// Replays are not new machines and pass a full quota.
	if ack, err := e.create("p", "s1", spot); err != nil || !ack.Replayed {
		t.Fatalf("replay at full quota = %+v, %v", ack, err)
	}
	// A deleting machine still counts until it is gone.
	if _, err := e.delete("p", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.create("p", "d2", onDemand); !provider.IsQuotaExceeded(err) {
		t.Fatalf("create while a machine is deleting = %v, want quota exceeded", err)
	}
	e.clk.Advance(time.Hour)
	e.mustCreate("p", "d2", onDemand)
	if err := e.c.SetQuota(0); err != nil {
		t.Fatal(err)
	}
	e.mustCreate("p", "d3", onDemand)
}

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }

func asQuota(err error, target **provider.QuotaExceededError) bool {
	return err != nil && provider.IsQuotaExceeded(err) && errorsAs(err, target)
}

func TestPartialFulfilmentAndInsufficientCapacity(t *testing.T) {
	offs := catalog()
	offs[1].Stock = 2
	e := newEnv(t, sim.Config{Offerings: offs}, 1)
	var got []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		_, err := e.create("p", id, spot)
		switch {
		case err == nil:
			got = append(got, id)
		case provider.IsInsufficientCapacity(err):
			var ice *provider.InsufficientCapacityError
			if !errorsAs(err, &ice) || ice.Offering != spot {
				t.Fatalf("ICE names offering %q, want %s", ice.Offering, spot)
			}
		default:
			t.Fatalf("create %s: %v", id, err)
		}
	}
	if !slices.Equal(got, []string{"s0", "s1"}) {
		t.Fatalf("asked for 5 with a stock of 2, got %v", got)
	}
	if err := e.c.Tune(onDemand, func(o *sim.Offering) { o.OutOfCapacity = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.create("p", "d1", onDemand); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("create of an out-of-capacity offering = %v", err)
	}
	// The fault clears.
	if err := e.c.Tune(onDemand, func(o *sim.Offering) { o.OutOfCapacity = false }); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Tune(spot, func(o *sim.Offering) { o.Stock = 0 }); err != nil {
		t.Fatal(err)
	}
	e.mustCreate("p", "d1", onDemand)
	e.mustCreate("p", "s4", spot)
	if l := e.c.Ledger(); len(l.Machines) != 4 {
		t.Fatalf("ledger has %d machines, want 4: refused creates must bill nothing", len(l.Machines))
	}
}

func TestTune(t *testing.T) {
	e := newEnv(t, sim.Config{}, 1)
	if err := e.c.Tune("nope", func(*sim.Offering) {}); err == nil || !strings.Contains(err.Error(), "unknown offering") {
		t.Fatalf("Tune of an unknown offering = %v", err)
	}
	if err := e.c.Tune(spot, func(o *sim.Offering) { o.Kind = capacity.OnDemand }); err == nil || !strings.Contains(err.Error(), "renamed") {
		t.Fatalf("Tune renaming an offering = %v", err)
	}
	if err := e.c.Tune(spot, func(o *sim.Offering) { o.HangRate = -1 }); err == nil || !strings.Contains(err.Error(), "hang_rate") {
		t.Fatalf("Tune to an invalid offering = %v", err)
	}
	if err := e.c.Tune(spot, func(o *sim.Offering) { o.PricePerHour = 1 }); err != nil {
		t.Fatal(err)
	}
	offs, _ := e.c.Offerings(e.ctx)
	if offs[1].Name() != spot || offs[1].PricePerHour != 1 {
		t.Fatalf("Offerings after Tune = %+v", offs[1])
	}
}

func TestAPIErrors(t *testing.T) {
	t.Run("every call fails before acting", func(t *testing.T) {
		e := newEnv(t, sim.Config{APIErrorRate: 1}, 1)
		if _, err := e.create("p", "m1", onDemand); !provider.IsTransient(err) {
			t.Fatalf("create = %v, want transient", err)
		}
		if _, err := e.c.List(e.ctx, provider.Filter{}); !provider.IsTransient(err) {
			t.Fatalf("list = %v, want transient", err)
		}
		if _, err := e.c.Offerings(e.ctx); !provider.IsTransient(err) {
			t.Fatalf("offerings = %v, want transient", err)
		}
		if err := e.c.SetAPIErrorRate(0, 0); err != nil {
			t.Fatal(err)
		}
		if s := e.state("m1"); s != "gone" {
			t.Fatalf("a failed create left machine m1 %s", s)
		}
	})
	t.Run("after-commit errors", func(t *testing.T) {
		e := newEnv(t, sim.Config{}, 5)
		if err := e.c.SetAPIErrorRate(0.5, 0.5); err != nil {
			t.Fatal(err)
		}
		var committedWithError int
		for i := range 200 {
			id := fmt.Sprintf("m%d", i)
			for attempt := 0; ; attempt++ {
				_, err := e.create("p", id, onDemand)
				if err == nil {
					break
				}
				if !provider.IsTransient(err) {
					t.Fatalf("create %s: %v", id, err)
				}
				if attempt == 0 && e.c.Provisions(id) == 1 {
					committedWithError++
				}
			}
		}
		l := e.c.Ledger()
		if d := l.Duplicates(); len(d) != 0 {
			t.Fatalf("machines provisioned twice: %v", d)
		}
		if len(l.Machines) != 200 {
			t.Fatalf("ledger holds %d machines, want 200", len(l.Machines))
		}
		// Half of the calls fail, half of those after committing: about 50
		// of 200 first attempts committed and still reported an error.
		if committedWithError < 25 || committedWithError > 75 {
			t.Fatalf("%d first attempts committed despite an error, want about 50", committedWithError)
		}
		var retried int
		for _, r := range l.Machines {
			if r.Provisions != 1 {
				t.Fatalf("%s provisioned %d times", r.MachineID, r.Provisions)
			}
			if r.CreateCalls > 1 {
				retried++
			}
		}
		if retried == 0 {
			t.Fatal("no Create was ever replayed; the test does not exercise lost acknowledgements")
		}
	})
	t.Run("rate is honoured", func(t *testing.T) {
		e := newEnv(t, sim.Config{APIErrorRate: 0.3}, 9)
		var fails int
		const n = 2000
		for range n {
			if _, err := e.c.List(e.ctx, provider.Filter{}); err != nil {
				if !provider.IsTransient(err) {
					t.Fatal(err)
				}
				fails++
			}
		}
		if got := float64(fails) / n; math.Abs(got-0.3) > 0.04 {
			t.Fatalf("error rate %.3f, want 0.3", got)
		}
	})
	if err := newEnv(t, sim.Config{}, 1).c.SetAPIErrorRate(2, 0); err == nil {
		t.Fatal("SetAPIErrorRate(2) accepted")
	}
}

func TestTimeoutsFail(t *testing.T) {
	offs := catalog()
	offs[0].HangRate = 1
	offs[1].Configure = sim.Fixed(10 * time.Minute) // longer than the configure timeout
	e := newEnv(t, sim.Config{Offerings: offs, BootTimeout: 10 * time.Minute}, 1)
	e.mustCreate("p", "hung", onDemand)
	e.mustCreate("p", "slow", spot)
	e.clk.Advance(10*time.Minute - time.Second)
	if s := e.state("hung"); s != provider.Creating {
		t.Fatalf("hung boot before the timeout: %s", s)
	}
	e.clk.Advance(time.Second)
	m, _ := e.c.Get(e.ctx, "hung")
	if m.State != provider.Failed || m.Reason != "creating did not finish within 10m0s" || m.Host != "" {
		t.Fatalf("hung boot after the timeout: %+v", m)
	}
	if _, err := e.c.Configure(e.ctx, provider.ConfigureRequest{Fence: e.fence(), Pool: "p", MachineID: "slow", Cluster: "h", Bootstrap: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(sim.DefaultConfigureTimeout)
	m, _ = e.c.Get(e.ctx, "slow")
	if m.State != provider.Failed || m.Cluster != "h" || m.Host == "" || !strings.Contains(m.Reason, "configuring did not finish within 5m0s") {
		t.Fatalf("slow configure after the timeout: %+v", m)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Drain(e.ctx, provider.DrainRequest{Fence: e.fence(), Pool: "p", MachineID: "slow"}); !provider.IsConflict(err) {
		t.Fatalf("drain of a failed machine = %v, want Conflict", err)
	}
	// Failed machines cost money until deleted.
	e.clk.Advance(time.Hour)
	l := e.c.Ledger()
	if live := l.Live("p"); !slices.Equal(live, []string{"hung", "slow"}) {
		t.Fatalf("live = %v, want the failed machines still billed", live)
	}
	for _, id := range []string{"hung", "slow"} {
		if _, err := e.delete("p", id); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Advance(time.Hour)
	if l := e.c.Ledger(); len(l.Live("")) != 0 {
		t.Fatalf("live after delete = %v", l.Live(""))
	}
}

func TestSpotInterruptions(t *testing.T) {
	offs := catalog()
	offs[1].InterruptionProbability = 1 // once an hour on average
	e := newEnv(t, sim.Config{Offerings: offs}, 11)
	const n = 40
	for i := range n {
		e.mustCreate("p", fmt.Sprintf("s%02d", i), spot)
	}
	e.mustCreate("p", "d", onDemand)
	// Watch in 30 s steps: every reclaim is preceded by a visible notice.
	noticed := map[string]time.Time{}
	for step := 0; step < 2*60*4; step++ {
		e.clk.Advance(30 * time.Second)
		ms, err := e.c.List(e.ctx, provider.Filter{Pool: "p"})
		if err != nil {
			t.Fatal(err)
		}
		alive := map[string]bool{}
		for _, m := range ms {
			alive[m.ID] = true
			if !m.ReclaimAt.IsZero() {
				if m.ReclaimAt.Sub(e.clk.Now()) > sim.DefaultInterruptionNotice {
					t.Fatalf("%s: notice given %s before the reclaim, want at most %s", m.ID, m.ReclaimAt.Sub(e.clk.Now()), sim.DefaultInterruptionNotice)
				}
				noticed[m.ID] = m.ReclaimAt
			}
		}
		for id, at := range noticed {
			if !alive[id] && e.clk.Now().Before(at) {
				t.Fatalf("%s reclaimed before its notice time %s", id, at)
			}
		}
	}
	ins := e.c.Interruptions()
	if len(ins) < n/2 {
		t.Fatalf("%d interruptions of %d spot machines in 4h at 1/h, want most of them", len(ins), n)
	}
	l := e.c.Ledger()
	ended := map[string]string{}
	for _, r := range l.Machines {
		ended[r.MachineID] = r.Ended
	}
	for _, in := range ins {
		if d := in.ReclaimAt.Sub(in.NoticeAt); d < 0 || d > sim.DefaultInterruptionNotice {
			t.Errorf("%s: notice %s before the reclaim, want within [0, %s]", in.MachineID, d, sim.DefaultInterruptionNotice)
		}
		if !in.Reclaimed || ended[in.MachineID] != sim.EndInterrupted {
			t.Errorf("%+v: not reclaimed, or ledger says %q", in, ended[in.MachineID])
		}
		if _, err := e.create("p", in.MachineID, spot); !provider.IsConflict(err) {
			t.Errorf("re-create of reclaimed %s = %v, want Conflict", in.MachineID, err)
		}
	}
	if ended["d"] != "" {
		t.Errorf("on-demand machine ended %q, want still running", ended["d"])
	}
}

func TestForcedInterruptAndLoss(t *testing.T) {
	e := newEnv(t, sim.Config{}, 1)
	e.mustCreate("p", "m1", onDemand)
	e.mustCreate("p", "m2", onDemand)
	e.mustCreate("p", "m3", onDemand)
	if err := e.c.Interrupt("m1"); err == nil {
		t.Fatal("interrupting a machine without a host succeeded")
	}
	e.clk.Advance(time.Hour)
	if err := e.c.Interrupt("m1"); err != nil {
		t.Fatal(err)
	}
	m, _ := e.c.Get(e.ctx, "m1")
	if want := e.clk.Now().Add(sim.DefaultInterruptionNotice); !m.ReclaimAt.Equal(want) {
		t.Fatalf("ReclaimAt = %v, want %v", m.ReclaimAt, want)
	}
	if err := e.c.Interrupt("m1"); err != nil { // already noticed: no second notice
		t.Fatal(err)
	}
	// Deleting during the notice wins the race here; the reclaim then does nothing.
	if err := e.c.Interrupt("m2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.delete("p", "m2"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Lose("m3"); err != nil {
		t.Fatal(err)
	}
	if s := e.state("m3"); s != "gone" {
		t.Fatalf("lost machine is %s", s)
	}
	e.clk.Advance(sim.DefaultInterruptionNotice)
	if s := e.state("m1"); s != "gone" {
		t.Fatalf("interrupted machine is %s after the notice", s)
	}
	ins := e.c.Interruptions()
	if len(ins) != 2 || !ins[0].Reclaimed || ins[1].Reclaimed {
		t.Fatalf("interruptions = %+v; want m1 reclaimed and m2 deleted first", ins)
	}
	l := e.c.Ledger()
	want := map[string]string{"m1": sim.EndInterrupted, "m2": sim.EndDeleted, "m3": sim.EndLost}
	for _, r := range l.Machines {
		if r.Ended != want[r.MachineID] {
			t.Errorf("%s ended %q, want %q", r.MachineID, r.Ended, want[r.MachineID])
		}
	}
	if err := e.c.Lose("m3"); !provider.IsNotFound(err) {
		t.Fatalf("losing a gone machine = %v", err)
	}
}

func TestLedger(t *testing.T) {
	offs := catalog()
	offs[0].PricePerHour = 3.6 // one dollar per 1000 s
	offs[0].Delete = sim.Fixed(0)
	offs[1].PricePerHour = 0.36
	offs[1].InterruptionProbability = 0
	offs[1].Delete = sim.Fixed(0)
	e := newEnv(t, sim.Config{Offerings: offs}, 1)
	e.mustCreate("a", "d1", onDemand)
	e.mustCreate("b", "s1", spot)
	e.clk.Advance(1000 * time.Second)
	if _, err := e.delete("a", "d1"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(1000 * time.Second)
	l := e.c.Ledger()
	d := l.Offerings[onDemand]
	if d.Machines != 1 || d.Live != 0 || d.MachineSeconds != 1000 || math.Abs(d.Cost-1) > 1e-9 {
		t.Fatalf("on-demand usage = %+v, want 1 machine, 1000 s, $1", d)
	}
	s := l.Offerings[spot]
	if s.Machines != 1 || s.Live != 1 || s.MachineSeconds != 2000 || math.Abs(s.Cost-0.2) > 1e-9 {
		t.Fatalf("spot usage = %+v, want 1 live machine, 2000 s, $0.20", s)
	}
	tot := l.Total()
	if tot.Machines != 2 || tot.MachineSeconds != 3000 || math.Abs(tot.Cost-1.2) > 1e-9 {
		t.Fatalf("total = %+v", tot)
	}
	if !slices.Equal(l.Live(""), []string{"s1"}) || !slices.Equal(l.Live("a"), nil) || !l.At.Equal(e.clk.Now()) {
		t.Fatalf("live = %v / %v at %v", l.Live(""), l.Live("a"), l.At)
	}
	if r := l.Machines[0]; r.MachineID != "d1" || r.Pool != "a" || !r.End.Equal(epoch.Add(1000*time.Second)) || r.Ended != sim.EndDeleted {
		t.Fatalf("record d1 = %+v", r)
	}
}

// transcript drives a cloud with a seeded random workload and returns a
// description of everything observable, step by step.
func transcript(t *testing.T, seed uint64) string {
	offs := catalog()
	offs[1].InterruptionProbability = 0.5
	offs[1].Stock = 4
	offs[0].HangRate = 0.1
	e := newEnv(t, sim.Config{Offerings: offs, Quota: 30, APIErrorRate: 0.2, APIErrorAfterCommit: 0.5}, seed)
	driver := rand.New(rand.NewPCG(seed, 99))
	var b strings.Builder
	next := 0
	for step := range 300 {
		e.clk.Advance(time.Duration(driver.IntN(120)) * time.Second)
		pool := fmt.Sprintf("p%d", driver.IntN(3))
		var ack provider.Ack
		var err error
		switch op := driver.IntN(10); {
		case op < 4:
			next++
			off := onDemand
			if driver.IntN(2) == 0 {
				off = spot
			}
			ack, err = e.create(pool, fmt.Sprintf("m%d", next-driver.IntN(2)), off)
		case op < 6:
			ack, err = e.c.Configure(e.ctx, provider.ConfigureRequest{Fence: e.fence(), Pool: pool,
				MachineID: fmt.Sprintf("m%d", driver.IntN(next+1)), Cluster: "head", Bootstrap: []byte("b")})
		case op < 7:
			ack, err = e.c.Drain(e.ctx, provider.DrainRequest{Fence: e.fence(), Pool: pool, MachineID: fmt.Sprintf("m%d", driver.IntN(next+1))})
		default:
			ack, err = e.delete(pool, fmt.Sprintf("m%d", driver.IntN(next+1)))
		}
		fmt.Fprintf(&b, "%d %s %+v %v\n", step, e.clk.Now().Sub(epoch), ack, err)
		if ms, err := e.c.List(e.ctx, provider.Filter{}); err == nil {
			for _, m := range ms {
				if err := m.Check(); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "  %s %s %s %s %s %s\n", m.ID, m.Pool, m.State, m.Host, m.Cluster, m.ReclaimAt.Sub(epoch))
			}
		}
	}
	l := e.c.Ledger()
	if d := l.Duplicates(); len(d) != 0 {
		t.Fatalf("seed %d: duplicates %v", seed, d)
	}
	fmt.Fprintf(&b, "%+v\n%+v\n", l, e.c.Interruptions())
	return b.String()
}

func TestDeterministic(t *testing.T) {
	a, b := transcript(t, 42), transcript(t, 42)
	if a != b {
		t.Fatal("same seed, different results")
	}
	if transcript(t, 43) == a {
		t.Fatal("different seeds, same results: the seed is not used")
	}
	for _, want := range []string{"creating", "idle", "configured", "failed", "deleting", "transient", "insufficient capacity", "Reclaimed:true"} {
		if !strings.Contains(a, want) {
			t.Errorf("the random workload never produced %q; widen it", want)
		}
	}
}
