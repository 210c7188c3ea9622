package assembly

import (
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
)

// TestRouteCheapestHeaviestOverflow: among the pools whose selector and
// offerings fit, routing picks the heaviest, then the cheapest (effective
// cost of the cheapest fitting offering), then config order; a pool with
// a shortfall overflows to the next; the choice says why.
func TestRouteCheapestHeaviestOverflow(t *testing.T) {
	c4 := capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}
	g1 := capacity.Resources{MilliCPU: 8000, Memory: 64 << 30, GPUs: 1}
	od := config.Pool{Name: "od", Offerings: []capacity.Offering{{Type: "c4", Kind: capacity.OnDemand, Resources: c4, PricePerHour: 0.40}}}
	spot := config.Pool{Name: "spot", Offerings: []capacity.Offering{{Type: "c4", Kind: capacity.Spot, Resources: c4, PricePerHour: 0.12,
		InterruptionProbability: 0.05, InterruptionPenalty: 2}}} // $0.22/h effective
	gpu := config.Pool{Name: "gpu", Offerings: []capacity.Offering{{Type: "g1", Resources: g1, PricePerHour: 1.2}},
		Selector: config.Selector{Labels: map[string]string{"accel": "gpu"}}}
	heavyOD := od
	heavyOD.Weight = 10
	cpu1 := capacity.CPU(1000)
	short := func(names ...string) func(string, []string) string {
		return func(p string, _ []string) string {
			for _, n := range names {
				if n == p {
					return "at its max of 4 nodes with 3 queued"
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		name   string
		pools  []config.Pool
		short  func(string, []string) string
		labels map[string]string
		req    capacity.Resources
		want   string
		why    string
	}{
		{"cheaper second in the file", []config.Pool{od, spot}, nil, nil, cpu1, "spot",
			"spot (weight 0, $0.22/h) chosen over od (weight 0, $0.40/h)"},
		{"weight beats cost", []config.Pool{spot, heavyOD}, nil, nil, cpu1, "od", "od (weight 10, $0.40/h) chosen over spot"},
		{"tie: config order", []config.Pool{od, {Name: "od2", Offerings: od.Offerings}}, nil, nil, cpu1, "od", ""},
		{"the cheaper one at its max overflows", []config.Pool{od, spot}, short("spot"), nil, cpu1, "od",
			"od (weight 0, $0.40/h) chosen over spot (weight 0, $0.22/h, at its max of 4 nodes with 3 queued)"},
		{"every one short: the best anyway", []config.Pool{od, spot}, short("od", "spot"), nil, cpu1, "spot", ""},
		{"selector keeps the gpu pool out", []config.Pool{gpu, od}, nil, nil, cpu1, "od", ""},
		{"only the gpu pool fits", []config.Pool{od, spot, gpu}, nil, map[string]string{"accel": "gpu"}, g1, "gpu", ""},
		{"nothing fits", []config.Pool{od, spot}, nil, nil, g1, "", "no pool's selector and offerings fit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := route(c.pools, c.short, c.labels, c.req)
			if r.pool != c.want || !strings.Contains(r.String(), c.why) {
				t.Errorf("routed to %q (%s), want %q (%q)", r.pool, r, c.want, c.why)
			}
		})
	}
}
