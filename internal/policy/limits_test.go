package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

func ptr[T any](v T) *T { return &v }

// TestLimitsCutThePurchase: a scale-up never takes a pool past a limit;
// the decision buys what fits, and its reason names the limit and the
// figures. Each case is one policy and one limit.
func TestLimitsCutThePurchase(t *testing.T) {
	c8 := capacity.Offering{Type: "c8", Kind: capacity.OnDemand, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 * ttGi},
		PricePerHour: 0.40}
	backlog := capacity.Pressure{Pending: []capacity.Pending{{Requests: tideTask, Count: 40}}} // 10 c4 nodes
	tests := []struct {
		name    string
		policy  string
		offs    []capacity.Offering
		limits  Limits
		held    *Held
		desired int
		want    int
		reason  string
	}{
		{name: "cpu, tide, 2 held", policy: Tide, offs: []capacity.Offering{tideOD}, limits: Limits{MilliCPU: ptr[int64](16000)},
			held: &Held{Nodes: 2, Resources: tideC4.Scale(2), CostPerHour: 0.4}, desired: 2, want: 4,
			reason: "limits.cpu 16: the pool holds 16, a node of 4 would make 20; 2 of "},
		{name: "cost, target-tracking", policy: TargetTracking, offs: []capacity.Offering{tideOD}, limits: Limits{CostPerHour: ptr(0.3)},
			held: &Held{}, desired: 0, want: 1,
			reason: "limits.cost_per_hour $0.30/h: the pool costs $0.20/h, a node of $0.20/h would make $0.40/h; 1 of 2 new nodes bought (capacity provider"},
		{name: "gpus, skyward", policy: Skyward, offs: []capacity.Offering{tideOD}, limits: Limits{GPUs: ptr[int64](0)},
			held: &Held{}, desired: 0, want: 40},
		{name: "memory, a booting node counted at the largest offering", policy: Tide, offs: []capacity.Offering{tideOD, c8},
			limits: Limits{Memory: ptr[int64](64 * ttGi)}, held: &Held{}, desired: 1, want: 2,
			reason: "limits.memory 64Gi: the pool holds 64Gi, a node of 32Gi would make 96Gi; 1 of 10 new nodes"},
		{name: "no controller: the report's nodes", policy: Tide, offs: []capacity.Offering{tideOD},
			limits: Limits{MilliCPU: ptr[int64](12000)}, desired: 1, want: 3, reason: "limits.cpu 12: the pool holds 12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Policy: tc.policy, Nodes: capacity.Elastic(0, 50), Offerings: tc.offs, Limits: tc.limits}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Now: tideT0, State: waited, Desired: tc.desired, Pressure: backlog, Held: tc.held}
			if tc.held == nil {
				in.Pressure.Nodes = []capacity.Node{{ID: "n0", Resources: tideC4}}
			}
			d := p.Decide(in)
			if d.Desired != tc.want {
				t.Errorf("desired %d, want %d (%s)", d.Desired, tc.want, d.Reason.String())
			}
			if tc.reason != "" && (d.Reason.Code != CodeAtLimit || !strings.Contains(d.Reason.String(), tc.reason)) {
				t.Errorf("reason %s: %s, want %s containing %q", d.Reason.Code, d.Reason.String(), CodeAtLimit, tc.reason)
			}
			if tc.reason == "" && d.Reason.Code == CodeAtLimit {
				t.Errorf("cut by a limit that does not bind: %s", d.Reason.String())
			}
			if n := launched(d.Launch); d.Launch != nil && n != d.Desired-tc.desired {
				t.Errorf("launches for %d nodes, desired %d -> %d", n, tc.desired, d.Desired)
			}
		})
	}
}

// TestLimitsNeverCrossed: whatever the backlog (a gang in it) and the held
// machines, a decision's new nodes, each counted at the most its launch could add,
// keep the pool within every limit it was within.
func TestLimitsNeverCrossed(t *testing.T) {
	g8 := tideGPU
	offs := []capacity.Offering{tideOD, g8}
	lim := Limits{MilliCPU: ptr[int64](64000), GPUs: ptr[int64](16), CostPerHour: ptr(80.0)}
	for _, pol := range Names {
		p, err := New(Config{Policy: pol, Nodes: capacity.Elastic(0, 100), Offerings: offs, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q <= 200; q += 25 {
			for held := 0; held <= 2; held++ { // within the limits
				h := &Held{Nodes: held, Resources: g8.Resources.Scale(int64(held)), CostPerHour: g8.PricePerHour * float64(held)}
				in := Input{Now: tideT0, State: waited, Desired: held, Held: h, Pressure: capacity.Pressure{Pending: []capacity.Pending{
					{Requests: tideTask, Count: q}, {Requests: capacity.Resources{MilliCPU: 3000, Memory: 16 * ttGi, GPUs: 1}, Count: q / 5},
					{Requests: capacity.Resources{MilliCPU: 4000, Memory: 16 * ttGi, GPUs: 4}, Count: 1 + q/50, Gang: "g", Priority: q % 3}}}}
				d := p.Decide(in)
				r, cost := h.Resources, h.CostPerHour
				ls := d.Launch
				if ls == nil && d.Desired > held {
					ls = []capacity.Launch{{Offering: tideOD.Name(), Fallback: []string{g8.Name()}, Count: d.Desired - held}}
				}
				for _, l := range ls {
					lp := &limited{cfg: Config{Offerings: offs}}
					res, c := lp.most(append([]string{l.Offering}, l.Fallback...))
					r, cost = r.Add(res.Scale(int64(l.Count))), cost+c*float64(l.Count)
				}
				if r.MilliCPU > *lim.MilliCPU || r.GPUs > *lim.GPUs || cost > *lim.CostPerHour+1e-9 {
					t.Fatalf("%s, %d queued, %d held: desired %d holds %v at $%.2f/h, past %v (%s)", pol, q, held, d.Desired, r, cost,
						lim, d.Reason.String())
				}
			}
		}
	}
}

// TestLimitsValidate: errors name the field and the figures.
func TestLimitsValidate(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		min  int
		want string
	}{
		{Limits{MilliCPU: ptr[int64](-1)}, 0, "limits.cpu: must not be negative, got -1"},
		{Limits{CostPerHour: ptr(-0.5)}, 0, "limits.cost_per_hour: must be a non-negative number, got -0.5"},
		{Limits{MilliCPU: ptr[int64](7000)}, 2, "limits.cpu: 7 is below nodes.min (2) x the smallest offering's 4"},
		{Limits{CostPerHour: ptr(0.3)}, 2, "limits.cost_per_hour: 0.30 is below nodes.min (2) x the cheapest offering's 0.20"},
		{Limits{GPUs: ptr[int64](0)}, 2, ""},
	} {
		cfg := Config{Nodes: capacity.Elastic(c.min, 10), Offerings: []capacity.Offering{tideOD}, Limits: c.l}
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.l, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want %q", c.l, err, c.want)
		}
	}
}

// TestLimitsBuyGangsWhole: under cpu, gpu or cost limits a gang's nodes are
// bought whole or not at all, as under the pool's max: the purchase is the
// longest run of the backlog by priority that fits within the limits, plus
// what fits of a next group that is no gang. A gang left out waits whole,
// and the reason names it, saying when it could never fit.
func TestLimitsBuyGangsWhole(t *testing.T) {
	gang := func(name string, n, gpus, prio int) capacity.Pending {
		return capacity.Pending{Requests: gpu(int64(gpus)), Count: n, Gang: name, Priority: prio}
	}
	plain := func(n, gpus, prio int) capacity.Pending {
		return capacity.Pending{Requests: gpu(int64(gpus)), Count: n, Priority: prio}
	}
	tests := []struct {
		name    string
		limits  Limits
		held    int // g8 machines the pool holds
		pending []capacity.Pending
		want    int
		kept    []string // the gangs bought for
		reason  string   // "" : no limit binds
	}{
		{name: "a gang within the limits is bought whole", limits: Limits{GPUs: ptr[int64](32)},
			pending: []capacity.Pending{gang("a", 3, 8, 0)}, want: 3, kept: []string{"a"}},
		{name: "a gang that can never fit waits whole; plain work after it gets what fits", limits: Limits{GPUs: ptr[int64](16)},
			pending: []capacity.Pending{gang("a", 3, 8, 5), plain(4, 8, 0)}, want: 2,
			reason: "gang a (3 instances) can never fit, not even in an empty pool: limits.gpus 16: the pool holds 16, a node of 8 would make 24; 2 of 4 instances of the next group bought for"},
		{name: "the higher priority gang is bought, the lower waits whole", limits: Limits{GPUs: ptr[int64](32)},
			pending: []capacity.Pending{gang("low", 3, 8, 1), gang("high", 2, 8, 5)}, want: 2, kept: []string{"high"},
			reason: "gang low (3 instances) waits whole: its nodes would cross the limit after work of higher priority"},
		{name: "what the pool holds counts", limits: Limits{GPUs: ptr[int64](32)}, held: 2,
			pending: []capacity.Pending{gang("a", 3, 8, 0)}, want: 2,
			reason: "limits.gpus 32: the pool holds 32, a node of 8 would make 40; gang a (3 instances) waits whole: its nodes would cross"},
		{name: "cost", limits: Limits{CostPerHour: ptr(60.0)},
			pending: []capacity.Pending{gang("a", 3, 8, 0)}, want: 0,
			reason: "gang a (3 instances) can never fit, not even in an empty pool: limits.cost_per_hour $60.00/h"},
		{name: "a gang of two groups that can never fit is left out whole", limits: Limits{GPUs: ptr[int64](24)},
			pending: []capacity.Pending{gang("m", 2, 8, 0), gang("m", 2, 6, 0), plain(1, 8, -1)}, want: 1,
			reason: "gang m (4 instances) can never fit, not even in an empty pool: limits.gpus 24"},
		{name: "a gang of two groups cut between them waits whole", limits: Limits{GPUs: ptr[int64](32)},
			pending: []capacity.Pending{plain(1, 8, 5), gang("m", 2, 8, 0), gang("m", 2, 6, 0)}, want: 1,
			reason: "gang m (4 instances) waits whole: its nodes would cross the limit after work of higher priority"},
		{name: "cpu, a gang before plain work of the same priority", limits: Limits{MilliCPU: ptr[int64](4 * 96000)},
			pending: []capacity.Pending{gang("a", 3, 8, 0), plain(3, 8, 0)}, want: 4, kept: []string{"a"},
			reason: "1 of 3 instances of the next group bought for"},
	}
	for _, pol := range []string{Tide, Karpenter, ClusterAutoscaler} {
		for _, tc := range tests {
			t.Run(pol+"/"+tc.name, func(t *testing.T) {
				cfg := tideConfig(t, capacity.Elastic(0, 20), []capacity.Offering{g8}, func(c *Config) { c.Policy, c.Limits = pol, tc.limits })
				p, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				in := Input{Now: tideT0, State: waited, Desired: tc.held, Pressure: capacity.Pressure{Pending: tc.pending},
					Held: &Held{Nodes: tc.held, Resources: g8.Resources.Scale(int64(tc.held)), CostPerHour: g8.PricePerHour * float64(tc.held)}}
				for i := range tc.held {
					in.Pressure.Nodes = append(in.Pressure.Nodes, capacity.Node{ID: fmt.Sprint("n", i), Resources: g8.Resources,
						Running: []capacity.Instance{{Requests: gpu(8)}}})
				}
				d := p.Decide(in)
				if d.Desired != tc.want {
					t.Errorf("desired %d, want %d (%s)", d.Desired, tc.want, d.Reason.String())
				}
				if n := launched(d.Launch); d.Launch != nil && n != d.Desired-tc.held {
					t.Errorf("launches for %d nodes, desired %d -> %d", n, tc.held, d.Desired)
				}
				if tc.reason == "" {
					if d.Reason.Code == CodeAtLimit {
						t.Errorf("cut by a limit that does not bind: %s", d.Reason.String())
					}
					return
				}
				if d.Reason.Code != CodeAtLimit || !strings.Contains(d.Reason.String(), tc.reason) {
					t.Errorf("reason %s: %s, want %s containing %q", d.Reason.Code, d.Reason.String(), CodeAtLimit, tc.reason)
				}
				var kept []string
				for _, g := range d.Backlog {
					if g.Gang != "" {
						kept = append(kept, g.Gang)
					}
				}
				if !slices.Equal(kept, tc.kept) {
					t.Errorf("gangs bought for %v, want %v", kept, tc.kept)
				}
			})
		}
	}
}
