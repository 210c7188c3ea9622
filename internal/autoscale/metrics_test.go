package autoscale

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// gauge reads a pool's gauge from reg; ok=false when it has no series.
func gauge(t *testing.T, reg *prometheus.Registry, name, pool string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestTargetTrackingFiguresAreGauges: seed 002's Figure 2 (N = 3 busy
// nodes, provisioning tasks needing one more: M = 4, reservation 133) and
// Figure 3 (one of three nodes idle: M = 2, 66.7) show on the gauges of the
// pool; a skyward pool on the same registry exports none.
func TestTargetTrackingFiguresAreGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	figures, err := NewFigureMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewFigureMetrics(reg) // a second pool's loop shares the gauges
	if err != nil || again.m != figures.m {
		t.Fatalf("second registration: %v", err)
	}
	pol, err := policy.New(policy.Config{Policy: policy.TargetTracking, Nodes: capacity.Elastic(0, 10), TargetCapacity: 100,
		Offerings: []capacity.Offering{{Type: "c2", Resources: capacity.CPU(2000), PricePerHour: 0.1}},
		MinStep:   1, MaxStep: 10, ScaleInDatapoints: 1, MetricPeriod: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Pool: "ecs", Policy: pol, Desired: 3, Figures: figures,
		Ordinal: func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID("ecs", id) }},
		&fakeTarget{}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	sky, err := New(Config{Pool: "sky", Policy: skyward(t, capacity.Elastic(0, 6)), Figures: again}, &fakeTarget{}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	sky.Observe(pressure("sky", []int{1}, 3))
	sky.Evaluate(t0)
	for _, step := range []struct {
		name      string
		pr        capacity.Pressure
		m, n, cpr float64
		at        time.Duration
	}{
		{"figure 2", pressure("ecs", []int{2, 2, 2}, 2), 4, 3, 400.0 / 3, 0},
		{"figure 3", pressure("ecs", []int{1, 1, 0}, 0), 2, 3, 200.0 / 3, time.Minute},
	} {
		p.Observe(step.pr)
		if _, ok := p.Evaluate(t0.Add(step.at)); !ok {
			t.Fatalf("%s: not evaluated", step.name)
		}
		for name, want := range map[string]float64{MetricM: step.m, MetricN: step.n, MetricReservation: step.cpr} {
			if got, ok := gauge(t, reg, name, "ecs"); !ok || got < want-1e-9 || got > want+1e-9 {
				t.Errorf("%s: %s = %v (%t), want %v", step.name, name, got, ok, want)
			}
		}
	}
	if _, ok := gauge(t, reg, MetricM, "sky"); ok {
		t.Error("a skyward pool exports target-tracking figures")
	}
	figures.Forget("ecs")
	if _, ok := gauge(t, reg, MetricReservation, "ecs"); ok {
		t.Error("Forget left the pool's series")
	}
}
