package controller_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
)

// BenchmarkBurst1000Pools measures the controller and the simulated cloud
// driving 1,000 pools through a burst: one op takes every pool from 0 to 10
// joined nodes (create, configure, join) and back to 0 (drain, unbind,
// delete until NotFound), 20,000 machine lifecycles' worth of provider calls
// on one cloud, on virtual time, from one goroutine. decisions/s counts the
// reconciler actions carried out (provision, drain, terminate, ...) per
// second of wall time.
func BenchmarkBurst1000Pools(b *testing.B) {
	const pools, burst = 1000, 10
	ctx := context.Background()
	clk := clock.NewFake(start)
	cloud, err := sim.New(sim.Config{Offerings: catalog()}, clk, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		b.Fatal(err)
	}
	ctls := make([]*controller.Controller, pools)
	for i := range ctls {
		ctls[i], err = controller.New(controller.Config{
			Pool:              fmt.Sprintf("pool-%04d", i),
			Reconcile:         reconcile.Config{Nodes: capacity.Elastic(0, burst)},
			Offerings:         offerings(catalog()),
			Bootstrap:         []byte("blob"),
			ControllerID:      "bench",
			ReconcileInterval: interval,
			LaunchTimeout:     timeout,
		}, controller.Deps{Provider: cloud, Journal: controller.NewMemJournal(), Workload: controller.IdleWorkload{}, Clock: clk})
		if err != nil {
			b.Fatal(err)
		}
	}
	tickAll := func() {
		clk.Advance(interval)
		for _, c := range ctls {
			if err := c.Tick(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	// settle ticks every pool until all hold want joined nodes and
	// nothing else; the checks run with the timer stopped.
	settle := func(want int) (ticks int) {
		for {
			b.StopTimer()
			done := true
			for _, c := range ctls {
				st := c.Status()
				done = done && st.Current == want && st.Pending == 0 && st.Draining == 0 && len(st.Deleting) == 0
			}
			b.StartTimer()
			if done {
				return ticks
			}
			if ticks++; ticks > 20 {
				b.Fatalf("pools not settled on %d nodes after 20 ticks", want)
			}
			tickAll()
		}
	}
	decisions := func() (n uint64) {
		for _, c := range ctls {
			n += c.Status().Decisions
		}
		return n
	}
	up := policy.Decision{Desired: burst, Reason: policy.NewReason(policy.CodeScaleUp, "burst")}
	down := policy.Decision{Desired: 0, Reason: policy.NewReason(policy.CodeIdle, "idle")}
	cycle := func() (ticks int) {
		for _, c := range ctls {
			c.SetDesired(up)
		}
		ticks = settle(burst)
		for _, c := range ctls {
			c.SetDesired(down)
		}
		return ticks + settle(0)
	}
	cycle() // takes every pool over
	before := decisions()
	ticks := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ticks += cycle()
	}
	b.StopTimer()
	n := decisions() - before
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(n)/float64(b.N), "decisions/op")
	b.ReportMetric(float64(ticks)/float64(b.N), "ticks/op")
	led := cloud.Ledger()
	if live := led.Live(""); len(live) != 0 {
		b.Fatalf("%d machines leaked", len(live))
	}
	if dup := led.Duplicates(); len(dup) != 0 {
		b.Fatalf("machines provisioned twice: %v", dup)
	}
	if want := pools * burst * (b.N + 1); len(led.Machines) != want {
		b.Fatalf("cloud provisioned %d machines, want %d", len(led.Machines), want)
	}
}
