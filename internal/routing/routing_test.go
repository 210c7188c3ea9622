package routing

import (
	"slices"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// TestRouteCheapestHeaviestOverflow: among the pools whose selector and
// offerings fit, routing picks the heaviest, then the cheapest (effective
// cost of the cheapest fitting offering), then config order; a pool with
// a shortfall overflows to the next; the choice says why.
func TestRouteCheapestHeaviestOverflow(t *testing.T) {
	c4 := capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}
	g1 := capacity.Resources{MilliCPU: 8000, Memory: 64 << 30, GPUs: 1}
	od := Pool{Name: "od", Offerings: []capacity.Offering{{Type: "c4", Kind: capacity.OnDemand, Resources: c4, PricePerHour: 0.40}}}
	spot := Pool{Name: "spot", Offerings: []capacity.Offering{{Type: "c4", Kind: capacity.Spot, Resources: c4, PricePerHour: 0.12,
		InterruptionProbability: 0.05, InterruptionPenalty: 2}}} // $0.22/h effective
	gpu := Pool{Name: "gpu", Offerings: []capacity.Offering{{Type: "g1", Resources: g1, PricePerHour: 1.2}},
		Selector: map[string]string{"accel": "gpu"}}
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
		pools  []Pool
		short  func(string, []string) string
		labels map[string]string
		req    capacity.Resources
		want   string
		why    string
	}{
		{"cheaper second in the file", []Pool{od, spot}, nil, nil, cpu1, "spot",
			"spot (weight 0, $0.22/h) chosen over od (weight 0, $0.40/h)"},
		{"weight beats cost", []Pool{spot, heavyOD}, nil, nil, cpu1, "od", "od (weight 10, $0.40/h) chosen over spot"},
		{"tie: config order", []Pool{od, {Name: "od2", Offerings: od.Offerings}}, nil, nil, cpu1, "od", ""},
		{"the cheaper one at its max overflows", []Pool{od, spot}, short("spot"), nil, cpu1, "od",
			"od (weight 0, $0.40/h) chosen over spot (weight 0, $0.22/h, at its max of 4 nodes with 3 queued)"},
		{"every one short: the best anyway", []Pool{od, spot}, short("od", "spot"), nil, cpu1, "spot", ""},
		{"selector keeps the gpu pool out", []Pool{gpu, od}, nil, nil, cpu1, "od", ""},
		{"only the gpu pool fits", []Pool{od, spot, gpu}, nil, map[string]string{"accel": "gpu"}, g1, "gpu", ""},
		{"nothing fits", []Pool{od, spot}, nil, nil, g1, "", "no pool's selector and offerings fit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Route(c.pools, c.short, c.labels, c.req)
			if r.Pool != c.want || !strings.Contains(r.String(), c.why) {
				t.Errorf("routed to %q (%s), want %q (%q)", r.Pool, r, c.want, c.why)
			}
		})
	}
}

// TestSplitBaseAndWeight is ECS's capacity-provider strategy: base 2 on od
// (weight 1) and weight 3 on spot split a burst of 10 into 2 + 2 on od and
// 6 on spot, in one request or one at a time, counting what already runs;
// a pool with a shortfall overflows to the strategy's other pools; pools
// the strategy does not name, or that do not fit, are left out.
func TestSplitBaseAndWeight(t *testing.T) {
	c4 := capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}
	pool := func(name string, price float64) Pool {
		return Pool{Name: name, Offerings: []capacity.Offering{{Type: "c4", Resources: c4, PricePerHour: price}}}
	}
	pools := []Pool{pool("od", 0.4), pool("spot", 0.2), pool("other", 0.1)}
	s := Strategy{{Pool: "od", Base: 2, Weight: 1}, {Pool: "spot", Weight: 3}}
	cpu1 := capacity.CPU(1000)
	tally := func(ds []Decision) map[string]int {
		m := map[string]int{}
		for _, d := range ds {
			m[d.Pool]++
		}
		return m
	}
	d := Route(pools, nil, nil, cpu1)
	if got := tally(Split(s, d, nil, 10)); got["od"] != 4 || got["spot"] != 6 || len(got) != 2 {
		t.Errorf("one burst of 10: %v, want od 4 spot 6", got)
	}
	counts := map[string]int{}
	var order []string
	for range 10 {
		one := Split(s, d, counts, 1)[0]
		counts[one.Pool]++
		order = append(order, one.Pool)
	}
	if counts["od"] != 4 || counts["spot"] != 6 || order[0] != "od" || order[1] != "od" {
		t.Errorf("ten one at a time: %v (%v), want od first twice, then od 4 spot 6", counts, order)
	}
	if ds := Split(s, d, nil, 1); !strings.Contains(ds[0].String(), "by strategy: base 2 of od, 0 live") {
		t.Errorf("first decision %q does not say the base chose", ds[0])
	}
	// Base already filled by running work: the next 4 go 1:3.
	if got := tally(Split(s, d, map[string]int{"od": 2}, 4)); got["od"] != 1 || got["spot"] != 3 {
		t.Errorf("base filled, burst of 4: %v, want od 1 spot 3", got)
	}
	// spot at its max: everything overflows to od.
	short := func(p string, _ []string) string {
		if p == "spot" {
			return "at its max of 2 nodes with 5 queued"
		}
		return ""
	}
	if got := tally(Split(s, Route(pools, short, nil, cpu1), nil, 10)); got["od"] != 10 {
		t.Errorf("spot short: %v, want all 10 on od", got)
	}
	// Nothing of the strategy fits (a selector keeps both out): plain routing.
	sel := slices.Clone(pools)
	sel[0].Selector = map[string]string{"team": "a"}
	sel[1].Selector = map[string]string{"team": "a"}
	if got := tally(Split(s, Route(sel, nil, nil, cpu1), nil, 3)); got["other"] != 3 {
		t.Errorf("strategy pools out: %v, want other 3", got)
	}
}
