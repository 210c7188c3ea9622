package policy

import (
	"math"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// TestTurnoverObserve: the rates come from the growth of the report's
// counters, a counter that went down (the reporter restarted) counts
// nothing, the boot is learnt from the latest purchase before a join, and
// a join after the pool had all its nodes (a replacement) is no sample.
func TestTurnoverObserve(t *testing.T) {
	// report is the pool's report at tideT0+at: it asks for one node, and
	// one joined at each of joined.
	report := func(at time.Duration, finished int, joined ...time.Duration) *Input {
		in := &Input{Now: tideT0.Add(at), Desired: 1}
		in.Pressure.Finished = finished
		in.Pressure.FinishedRequests = tideTask.Scale(int64(finished))
		for _, j := range joined {
			in.Pressure.Nodes = append(in.Pressure.Nodes, capacity.Node{ID: "n", JoinedAt: tideT0.Add(j)})
		}
		return in
	}
	var tu Turnover
	tu = tu.observe(report(0, 100))
	if tu.Rate != 0 || tu.Boot != 0 {
		t.Fatalf("first report: rate %v boot %v, want none (nothing to compare with)", tu.Rate, tu.Boot)
	}
	tu = tu.bought(tideT0)
	// 30 finished in 30 s; a node joined 3 min after the purchase.
	tu = tu.observe(report(30*time.Second, 130))
	want := 30 / turnoverWindow.Seconds() // the average's first step
	if math.Abs(tu.Rate-want) > 1e-9 {
		t.Errorf("rate %v, want %v", tu.Rate, want)
	}
	if got, want := tu.FreedRate[0], want*0.9; math.Abs(got-want) > 1e-9 {
		t.Errorf("freed CPU rate %v, want %v (0.9 cores an instance)", got, want)
	}
	tu = tu.observe(report(3*time.Minute, 130, 3*time.Minute))
	if tu.Boot != 3*time.Minute {
		t.Errorf("boot %v, want 3m (purchase at 0, join at 3m)", tu.Boot)
	}
	before := tu.Rate
	tu = tu.observe(report(4*time.Minute, 5, 3*time.Minute)) // restarted reporter
	if tu.Rate >= before {
		t.Errorf("rate %v after a restart, want it decayed below %v and nothing counted", tu.Rate, before)
	}
	if tu.Finished != 5 {
		t.Errorf("counter %d, want the new one (5) kept for the next report", tu.Finished)
	}
	// The node is interrupted and its replacement joins at 9 min; no
	// purchase was made since the pool had its node.
	tu = tu.observe(report(5*time.Minute, 5))
	tu = tu.observe(report(9*time.Minute, 5, 9*time.Minute))
	if tu.Boot != 3*time.Minute {
		t.Errorf("boot %v after a replacement joined, want 3m still (9m counted from the purchase is no boot)", tu.Boot)
	}
}

func TestTurnoverExpected(t *testing.T) {
	tests := []struct {
		name string
		tu   Turnover
		z    float64
		want float64
	}{
		{"no boot seen", Turnover{Rate: 1}, 0, 0},
		{"nothing finishes", Turnover{Boot: time.Minute}, 0, 0},
		{"cost: all expected", Turnover{Rate: 0.1, Boot: 100 * time.Second}, 0, 10},
		{"balanced: one sigma below", Turnover{Rate: 0.1, Boot: 100 * time.Second}, 1, 10 - math.Sqrt(10)},
		{"balanced: too few to count on", Turnover{Rate: 0.005, Boot: 100 * time.Second}, 1, 0},
	}
	for _, tt := range tests {
		if got := tt.tu.Expected(tt.z); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Expected(%v) = %v, want %v", tt.name, tt.z, got, tt.want)
		}
	}
}

// TestTideCountsOnFinishingWork: a backlog that the work finishing within
// a boot absorbs is not bought for under prefer balanced or cost, in the
// pieces the finished instances free, and is looked at again when the boot
// since it began to wait ends; prefer latency, a gang, and a backlog that
// has waited a boot already buy for all of it.
func TestTideCountsOnFinishingWork(t *testing.T) {
	elastic := capacity.Elastic(0, 20)
	// 0.1 instances a second of tideTask finish, boot 100 s: 10 expected,
	// 6.8 at one sigma.
	fast := waited
	fast.Turnover = Turnover{At: tideT0, Rate: 0.1, FreedRate: [3]float64{0.09, 0.2, 0}, Boot: 100 * time.Second}
	tests := []struct {
		name      string
		prefer    string
		pending   []capacity.Pending
		want      int
		finishing int
		waited    time.Duration // since the backlog began to wait (default 1 min)
	}{
		{"latency: buys for all", PreferLatency, []capacity.Pending{tidePending(tideTask, 6)}, 4, 0, 0},
		{"balanced: 6 of 6.8 finishing", PreferBalanced, []capacity.Pending{tidePending(tideTask, 6)}, 2, 6, 0},
		{"balanced: the rest bought", PreferBalanced, []capacity.Pending{tidePending(tideTask, 12)}, 4, 6, 0},
		{"cost: all 10 expected", PreferCost, []capacity.Pending{tidePending(tideTask, 12)}, 3, 10, 0},
		{"a piece holds no bigger instance", PreferCost, []capacity.Pending{tidePending(tideTask.Scale(2), 2)}, 3, 10, 0},
		{"gang: bought whole", PreferCost, []capacity.Pending{{Requests: tideTask, Count: 4, Gang: "g"}}, 3, 0, 0},
		{"cost: waited a boot, bought whole", PreferCost, []capacity.Pending{tidePending(tideTask, 12)}, 5, 0, 100 * time.Second},
		{"cost: a second younger", PreferCost, []capacity.Pending{tidePending(tideTask, 12)}, 3, 10, 99 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tideConfig(t, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.Prefer = tt.prefer })
			st := fast
			if tt.waited > 0 {
				st.PendingSince = tideT0.Add(-tt.waited)
			}
			d := NewTide(cfg).Decide(Input{Now: tideT0, Desired: 2, State: st,
				Pressure: capacity.Pressure{Nodes: tideFullNodes(2), Pending: tt.pending}})
			if d.Desired != tt.want {
				t.Errorf("desired %d, want %d (%s)", d.Desired, tt.want, d.Reason)
			}
			if d.Tide == nil || d.Tide.Finishing != tt.finishing {
				t.Errorf("figures %+v, want %d finishing", d.Tide, tt.finishing)
			}
			recheck := time.Time{}
			if tt.finishing > 0 {
				recheck = st.PendingSince.Add(fast.Turnover.Boot)
			}
			if !d.Recheck.Equal(recheck) {
				t.Errorf("recheck %v, want %v (the end of the credit, when there is one)", d.Recheck, recheck)
			}
		})
	}
}

func TestPreferValidates(t *testing.T) {
	cfg := Config{Policy: Tide, Nodes: capacity.Elastic(0, 2), Offerings: []capacity.Offering{tideOD}, Prefer: "speed"}
	if err := cfg.Validate(); err == nil {
		t.Fatal("prefer: speed validated")
	}
	cfg.Prefer = ""
	if err := cfg.Validate(); err != nil || cfg.Prefer != PreferLatency {
		t.Fatalf("default prefer: %q, %v; want latency", cfg.Prefer, err)
	}
}
