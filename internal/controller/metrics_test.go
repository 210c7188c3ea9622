package controller_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tide-project/tide/internal/controller"
)

// value returns the value of the metric family's sample whose labels
// include want, and whether there is one.
func value(fams []*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestMetrics: two pools share one registry; each has its gauges, its
// event counts, and the provider calls are timed.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	envs := map[string]*env{}
	for _, name := range []string{"gpu", "cpu"} {
		e := newEnv(t, setup{})
		e.cfg.Pool = name
		ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.cloud, Journal: e.journal, Workload: e.work,
			Clock: e.clk, Metrics: reg})
		if err != nil {
			t.Fatal(err)
		}
		e.ctl = ctl
		envs[name] = e
	}
	envs["gpu"].setDesired(3)
	envs["cpu"].setDesired(1)
	for range 3 {
		for _, e := range envs {
			e.mustTick()
		}
	}
	envs["gpu"].setDesired(2)
	if err := envs["gpu"].ctl.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{controller.MetricDesired, map[string]string{"pool": "gpu"}, 2},
		{controller.MetricCurrent, map[string]string{"pool": "gpu"}, 3},
		{controller.MetricDraining, map[string]string{"pool": "gpu"}, 1},
		{controller.MetricPending, map[string]string{"pool": "gpu"}, 0},
		{controller.MetricDesired, map[string]string{"pool": "cpu"}, 1},
		{controller.MetricCurrent, map[string]string{"pool": "cpu"}, 1},
		{controller.MetricEvents, map[string]string{"pool": "gpu", "type": "Normal", "reason": controller.ReasonJoined}, 3},
		{controller.MetricEvents, map[string]string{"pool": "cpu", "type": "Normal", "reason": controller.ReasonJoined}, 1},
		{"tide_provider_operation_duration_seconds", map[string]string{"operation": "create"}, 4},
	} {
		got, ok := value(fams, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}
