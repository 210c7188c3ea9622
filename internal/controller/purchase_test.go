package controller_test

import (
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/sim"
)

// gpuCatalog is issue 15's pool of several node types: a cheap 2-GPU
// offering and an 8-GPU one, on-demand and spot.
func gpuCatalog() []sim.Offering {
	mk := func(typ string, kind capacity.Kind, gpus int64, price float64) sim.Offering {
		o := sim.Offering{Offering: capacity.Offering{Type: typ, Zone: "z1", Kind: kind,
			Resources: capacity.Resources{MilliCPU: gpus * 8000, Memory: gpus * 64 << 30, GPUs: gpus}, PricePerHour: price}}
		o.Boot = sim.Fixed(40 * time.Second)
		o.Configure = sim.Fixed(10 * time.Second)
		o.Drain = sim.Fixed(5 * time.Second)
		o.Delete = sim.Fixed(15 * time.Second)
		return o
	}
	return []sim.Offering{
		mk("g2", capacity.OnDemand, 2, 6),
		mk("g8", capacity.OnDemand, 8, 24.5),
		mk("g8", capacity.Spot, 8, 9.1),
	}
}

// TestLaunchesThePurchase: the tide policy's purchase for 8-GPU work on a
// pool of a 2-GPU and an 8-GPU offering is launched as it was chosen: only
// 8-GPU nodes, never the cheaper 2-GPU ones the work cannot run on. When
// the 8-GPU spot offering is out of capacity, the 8-GPU on-demand one (the
// next cheapest that fits) stands in, the spot offering is skipped for the
// ICE TTL, and the events say which offering was launched and why, and
// which was skipped.
func TestLaunchesThePurchase(t *testing.T) {
	e := newEnv(t, setup{
		sim: func(c *sim.Config) { c.Offerings = gpuCatalog() },
		cfg: func(c *controller.Config) { c.CapacityBackoff = 0 }, // the default: 3 minutes
	})
	cfg := policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 8), Offerings: e.cfg.Offerings}
	pol, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	work := capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}
	decide := func(queued int, desired int, unavailable []string) policy.Decision {
		in := policy.Input{Now: start.Add(time.Hour), Desired: desired, Unavailable: unavailable,
			Pressure: capacity.Pressure{Pending: []capacity.Pending{{Requests: work, Count: queued}}},
			State:    policy.State{PendingSince: start}}
		return pol.Decide(in)
	}
	d := decide(3, 0, nil)
	if d.Desired != 3 || len(d.Launch) != 1 || d.Launch[0].Offering != "g8/z1/spot" || d.Launch[0].Count != 3 {
		t.Fatalf("decision %+v launch %+v", d, d.Launch)
	}
	if got := d.Tide.Purchase(); got != "buys 3 x g8/z1/spot for $27.30/h, within 0.0 % of the bound ($27.30/h)" {
		t.Fatalf("purchase %q", got)
	}
	if err := e.cloud.Tune("g8/z1/spot", func(o *sim.Offering) { o.OutOfCapacity = true }); err != nil {
		t.Fatal(err)
	}
	e.ctl.SetDesired(d)
	e.tickUntil(3, 10)
	for _, n := range e.ctl.Status().Nodes {
		if n.Offering != "g8/z1/on-demand" {
			t.Errorf("node %d on %s, want g8/z1/on-demand", n.ID, n.Offering)
		}
	}
	if n := e.spy.creates("g2/z1/on-demand"); n != 0 {
		t.Fatalf("%d creates of the 2-GPU offering, which the work cannot run on", n)
	}
	if got := e.events.find(controller.ReasonInsufficientCapacity, "g8/z1/spot", "next-cheapest, g8/z1/on-demand"); len(got) != 1 {
		t.Fatalf("want one insufficient-capacity event:\n%s", e.events.tail(20))
	}
	if got := e.events.find(controller.ReasonLaunched, "g8/z1/on-demand", "fallback for g8/z1/spot", "skipped g8/z1/spot (out of capacity)"); len(got) != 2 {
		t.Fatalf("want two launches naming the fallback and the skip:\n%s", e.events.tail(20))
	}
	// The ICE cache: the spot offering is unavailable for 3 minutes, and a
	// purchase made meanwhile does not count on it.
	now := e.clk.Now()
	if u := e.ctl.Unavailable(now); len(u) != 1 || u[0] != "g8/z1/spot" {
		t.Fatalf("unavailable %v", u)
	}
	if u := e.ctl.Unavailable(now.Add(controller.DefaultCapacityBackoff)); len(u) != 0 {
		t.Fatalf("unavailable after the TTL: %v", u)
	}
	if d := decide(2, 0, e.ctl.Unavailable(now)); len(d.Launch) != 1 || d.Launch[0].Offering != "g8/z1/on-demand" {
		t.Fatalf("purchase while spot is out: %+v", d.Launch)
	}
}
