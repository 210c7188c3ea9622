package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Tests of the target-tracking policy against seed 002 (ECS cluster auto
// scaling): Figures 1–4, the target 75 and 50 examples, both "Scaling in
// action" walkthroughs, the special cases, step clamps, the multi-type rule
// and the multi-zone fallback.

var ttT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const ttGi = int64(1) << 30

// ttM5 is the single instance type of the walkthroughs: 4 cores, 16 GiB.
var ttM5 = capacity.Offering{Type: "m5", Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 * ttGi}, PricePerHour: 0.2}

// ttTask is the one task definition of the walkthroughs: 4 fit a node.
var ttTask = capacity.Resources{MilliCPU: 1000, Memory: 2 * ttGi}

var ttDaemon = capacity.Instance{Requests: capacity.Resources{MilliCPU: 100, Memory: ttGi / 4}, Daemon: true}

func ttConfig(t testing.TB, spec capacity.NodeSpec, target int, offs []capacity.Offering, mutate ...func(*Config)) Config {
	t.Helper()
	cfg := Config{Policy: TargetTracking, Nodes: spec, Offerings: offs, TargetCapacity: target}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ttNodes returns nodes of size ttM5; tasks[i] non-daemon tasks run on node
// i, and every node runs one daemon.
func ttNodes(tasks ...int) []capacity.Node {
	nodes := make([]capacity.Node, len(tasks))
	for i, n := range tasks {
		nodes[i] = capacity.Node{ID: fmt.Sprintf("n%d", i), Ordinal: i, Resources: ttM5.Resources,
			Running: []capacity.Instance{ttDaemon}}
		for range n {
			nodes[i].Running = append(nodes[i].Running, capacity.Instance{Requests: ttTask})
		}
	}
	return nodes
}

func ttPending(count int) []capacity.Pending {
	return []capacity.Pending{{Requests: ttTask, Count: count}}
}

func ttPct(d Decision) int64 { return int64(math.Floor(d.TargetTracking.Reservation)) }

func TestTargetTrackingDecide(t *testing.T) {
	elastic := capacity.Elastic(0, 100)
	gpuTask := capacity.Resources{MilliCPU: 1000, Memory: ttGi, GPUs: 1}
	tests := []struct {
		name     string
		cfg      Config
		desired  int
		nodes    []capacity.Node
		pending  []capacity.Pending
		state    State
		wantM    int
		wantPct  int64
		wantMeth string
		want     int
		wantCode string
		wantText string // substring of the reason
	}{
		{
			name: "figure 1: every node busy, nothing provisioning: M = N = 3, 100",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(2, 1, 3),
			wantM: 3, wantPct: 100, wantMeth: MethodNoProvisioning, want: 3, wantCode: CodeSteady,
			wantText: "at target 100%",
		},
		{
			name: "figure 2: three provisioning tasks fit one more node: M = 4, 133",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(4, 4, 4), pending: ttPending(3),
			wantM: 4, wantPct: 133, wantMeth: MethodSingleType, want: 4, wantCode: CodeScaleUp,
			wantText: "133% is above target 100% (M=4, N=3)",
		},
		{
			name: "figure 3: a node running only daemons: M = 2, 66",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(2, 2, 0),
			wantM: 2, wantPct: 66, wantMeth: MethodNoProvisioning, want: 3, wantCode: CodeSteady,
			wantText: "1 of 15 low datapoints",
		},
		{
			name: "figure 4: four tasks on two nodes still give M = 2 (no repacking)",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(0, 1, 3), state: State{LowDatapoints: 14, LastDatapoint: ttT0.Add(-time.Minute)},
			wantM: 2, wantPct: 66, wantMeth: MethodNoProvisioning, want: 2, wantCode: CodeScaleDown,
			wantText: "for 15 datapoints: scale in to 2",
		},
		{
			name: "target 75: M = 10 gives N = 14 (71%, below target preferred)",
			cfg:  ttConfig(t, elastic, 75, []capacity.Offering{ttM5}), desired: 10,
			nodes: ttNodes(1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
			wantM: 10, wantPct: 100, wantMeth: MethodNoProvisioning, want: 14, wantCode: CodeScaleUp,
		},
		{
			name: "target 75: at N = 14 the metric 71 stays, no scale-in even after 15 datapoints",
			cfg:  ttConfig(t, elastic, 75, []capacity.Offering{ttM5}), desired: 14,
			nodes: ttNodes(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0), state: State{LowDatapoints: 20, LastDatapoint: ttT0.Add(-time.Minute)},
			wantM: 10, wantPct: 71, wantMeth: MethodNoProvisioning, want: 14, wantCode: CodeSteady,
		},
		{
			name: "target 50: N = 2M (M = 3 → 6)",
			cfg:  ttConfig(t, elastic, 50, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(1, 1, 1),
			wantM: 3, wantPct: 100, wantMeth: MethodNoProvisioning, want: 6, wantCode: CodeScaleUp,
		},
		{
			name: "target 50: half the nodes empty is on target",
			cfg:  ttConfig(t, elastic, 50, []capacity.Offering{ttM5}), desired: 6,
			nodes: ttNodes(1, 1, 1, 0, 0, 0),
			wantM: 3, wantPct: 50, wantMeth: MethodNoProvisioning, want: 6, wantCode: CodeSteady,
		},
		{
			name: "target 50 with provisioning: M = 4 → N = 8",
			cfg:  ttConfig(t, elastic, 50, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(4, 4, 4), pending: ttPending(2),
			wantM: 4, wantPct: 133, wantMeth: MethodSingleType, want: 8, wantCode: CodeScaleUp,
		},
		{
			name: "special case 0/0: reservation 100, stays at zero",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 0,
			wantM: 0, wantPct: 100, wantMeth: MethodNoProvisioning, want: 0, wantCode: CodeSteady,
		},
		{
			name: "special case M > 0, N = 0: reservation 200, capacity counted as 1 → 2",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 0,
			pending: ttPending(9),
			wantM:   3, wantPct: 200, wantMeth: MethodSingleType, want: 2, wantCode: CodeScaleUp,
		},
		{
			name: "from zero the next datapoint finishes the job: N = 2, one task left → 3",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 2,
			nodes: ttNodes(4, 4), pending: ttPending(1),
			wantM: 3, wantPct: 150, wantMeth: MethodSingleType, want: 3, wantCode: CodeScaleUp,
		},
		{
			name: "target below 100 never scales to zero",
			cfg:  ttConfig(t, elastic, 50, []capacity.Offering{ttM5}), desired: 2,
			nodes: ttNodes(0, 0), state: State{LowDatapoints: 14, LastDatapoint: ttT0.Add(-time.Minute)},
			wantM: 0, wantPct: 0, wantMeth: MethodNoProvisioning, want: 1, wantCode: CodeScaleDown,
		},
		{
			name: "target 100 scales to zero",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 1,
			nodes: ttNodes(0), state: State{LowDatapoints: 14, LastDatapoint: ttT0.Add(-time.Minute)},
			wantM: 0, wantPct: 0, wantMeth: MethodNoProvisioning, want: 0, wantCode: CodeScaleDown,
		},
		{
			name: "target below 100 from zero with nothing to run: 100 > 50 → 2",
			cfg:  ttConfig(t, elastic, 50, []capacity.Offering{ttM5}), desired: 0,
			wantM: 0, wantPct: 100, wantMeth: MethodNoProvisioning, want: 2, wantCode: CodeScaleUp,
		},
		{
			name: "min step raises M: one node's worth of tasks, min step 2",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, func(c *Config) { c.MinStep = 2 }), desired: 3,
			nodes: ttNodes(4, 4, 4), pending: ttPending(3),
			wantM: 5, wantPct: 166, wantMeth: MethodSingleType, want: 5, wantCode: CodeScaleUp,
		},
		{
			name: "max step caps M: 40 tasks need 10 nodes, max step 3",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, func(c *Config) { c.MaxStep = 3 }), desired: 3,
			nodes: ttNodes(4, 4, 4), pending: ttPending(40),
			wantM: 6, wantPct: 200, wantMeth: MethodSingleType, want: 6, wantCode: CodeScaleUp,
		},
		{
			name: "groups: identical requirements are merged, M is the max over groups",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 1,
			nodes: ttNodes(4),
			pending: []capacity.Pending{
				{Requests: ttTask, Count: 3}, {Requests: capacity.Resources{MilliCPU: 500, Memory: 4 * ttGi}, Count: 4},
				{Requests: ttTask, Count: 3}, // with the first: 6 tasks → 2 nodes (apart: 1 each)
			},
			wantM: 3, wantPct: 300, wantMeth: MethodSingleType, want: 3, wantCode: CodeScaleUp,
		},
		{
			name: "a group that fits no offering is ignored for M and named in the reason",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 2,
			nodes:   ttNodes(4, 4),
			pending: []capacity.Pending{{Requests: gpuTask, Count: 5}, {Requests: ttTask, Count: 2}},
			wantM:   3, wantPct: 150, wantMeth: MethodSingleType, want: 3, wantCode: CodeScaleUp,
			wantText: "5 pending instances fit no offering",
		},
		{
			name: "only unfit pending: treated as nothing provisioning",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 2,
			nodes: ttNodes(4, 4), pending: []capacity.Pending{{Requests: gpuTask, Count: 5}},
			wantM: 2, wantPct: 100, wantMeth: MethodNoProvisioning, want: 2, wantCode: CodeSteady,
			wantText: "at target 100% (M=2); 5 pending instances fit no offering",
		},
		{
			name: "clamped to max",
			cfg:  ttConfig(t, capacity.Elastic(1, 4), 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(4, 4, 4), pending: ttPending(12),
			wantM: 6, wantPct: 200, wantMeth: MethodSingleType, want: 4, wantCode: CodeAtMax,
			wantText: "asks for 6 nodes; held at max 4",
		},
		{
			name: "clamped to min",
			cfg:  ttConfig(t, capacity.Elastic(2, 4), 100, []capacity.Offering{ttM5}), desired: 3,
			nodes: ttNodes(1, 0, 0), state: State{LowDatapoints: 14, LastDatapoint: ttT0.Add(-time.Minute)},
			wantM: 1, wantPct: 33, wantMeth: MethodNoProvisioning, want: 2, wantCode: CodeAtMin,
			wantText: "asks for 1 node; held at min 2",
		},
		{
			name: "capacity already requested while nodes boot: no double scale-out",
			cfg:  ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), desired: 4,
			nodes: ttNodes(4, 4, 4), pending: ttPending(3),
			wantM: 4, wantPct: 133, wantMeth: MethodSingleType, want: 4, wantCode: CodeSteady,
			wantText: "4 nodes already requested",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewTargetTracking(tt.cfg)
			in := Input{Now: ttT0, Desired: tt.desired, State: tt.state,
				Pressure: capacity.Pressure{Nodes: tt.nodes, Pending: tt.pending}}
			d := p.Decide(in)
			f := d.TargetTracking
			if f == nil {
				t.Fatal("no TargetTracking figures")
			}
			if f.M != tt.wantM || f.N != len(tt.nodes) || ttPct(d) != tt.wantPct || f.Method != tt.wantMeth || f.Target != tt.cfg.TargetCapacity {
				t.Errorf("figures = %+v (reservation %d%%); want M=%d N=%d %d%% method %s target %d",
					*f, ttPct(d), tt.wantM, len(tt.nodes), tt.wantPct, tt.wantMeth, tt.cfg.TargetCapacity)
			}
			if d.Desired != tt.want || d.Reason.Code != tt.wantCode {
				t.Errorf("desired %d (%s: %s); want %d (%s)", d.Desired, d.Reason.Code, d.Reason, tt.want, tt.wantCode)
			}
			if !strings.Contains(d.Reason.String(), tt.wantText) {
				t.Errorf("reason %q does not contain %q", d.Reason, tt.wantText)
			}
		})
	}
}

// TestTargetTrackingMultiType: per group, the least node count over the
// largest type of each attribute; M adds the largest of those over groups.
func TestTargetTrackingMultiType(t *testing.T) {
	cpuBig := capacity.Offering{Type: "c16", Resources: capacity.Resources{MilliCPU: 16000, Memory: 32 * ttGi}, PricePerHour: 1}
	memBig := capacity.Offering{Type: "r4", Resources: capacity.Resources{MilliCPU: 4000, Memory: 64 * ttGi}, PricePerHour: 1}
	mid := capacity.Offering{Type: "m12", Resources: capacity.Resources{MilliCPU: 12000, Memory: 48 * ttGi}, PricePerHour: 1}
	gpu := capacity.Offering{Type: "g4", Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 * ttGi, GPUs: 4}, PricePerHour: 3}
	offs := []capacity.Offering{mid, cpuBig, memBig, gpu}
	res := func(cpu, memGi, gpus int64) capacity.Resources {
		return capacity.Resources{MilliCPU: cpu, Memory: memGi * ttGi, GPUs: gpus}
	}
	tests := []struct {
		name    string
		pending []capacity.Pending
		wantAdd int
	}{
		// c16: 8/node → 1; r4: 2/node → 4; g4: 4/node → 2. min 1.
		{"cpu group picks the cpu-largest type", []capacity.Pending{{Requests: res(2000, 4, 0), Count: 8}}, 1},
		// c16: 2/node → 5; r4: 4/node → 3; g4: 2/node → 5. min 3.
		{"memory group picks the memory-largest type", []capacity.Pending{{Requests: res(1000, 16, 0), Count: 10}}, 3},
		{"max over groups", []capacity.Pending{
			{Requests: res(2000, 4, 0), Count: 8},
			{Requests: res(1000, 16, 0), Count: 10},
			{Requests: res(1000, 1, 1), Count: 3}, // only g4 fits: 1
		}, 3},
		// m12 would hold both (1 node) but is largest in nothing: the rule
		// uses c16 (one per node → 2), as the seed says.
		{"a type largest in nothing is not used", []capacity.Pending{{Requests: res(6000, 24, 0), Count: 2}}, 2},
		// Only m12 fits (10 cores, 40 GiB): fall back to the types that fit.
		{"a group only a smaller type fits uses that type", []capacity.Pending{{Requests: res(10000, 40, 0), Count: 3}}, 3},
	}
	cfg := ttConfig(t, capacity.Elastic(0, 100), 100, offs)
	p := NewTargetTracking(cfg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(Input{Now: ttT0, Desired: 2, Pressure: capacity.Pressure{Nodes: ttNodes(4, 4), Pending: tt.pending}})
			if f := d.TargetTracking; f.M != 2+tt.wantAdd || f.Method != MethodMultiType {
				t.Errorf("M = %d (%s), want %d (%s)", f.M, f.Method, 2+tt.wantAdd, MethodMultiType)
			}
		})
	}
}

// TestTargetTrackingZones: offerings in two zones fall back to M = N + MinStep;
// one named zone (or none) keeps the bin-pack estimate.
func TestTargetTrackingZones(t *testing.T) {
	zoned := func(zone string) capacity.Offering { o := ttM5; o.Zone = zone; return o }
	tests := []struct {
		name     string
		offs     []capacity.Offering
		wantM    int
		wantMeth string
	}{
		{"two zones: min-step fallback", []capacity.Offering{zoned("a"), zoned("b")}, 3 + 2, MethodMinStepFallback},
		{"one zone, spot and on-demand: single type", []capacity.Offering{zoned("a"), func() capacity.Offering {
			o := zoned("a")
			o.Kind = capacity.Spot
			return o
		}()}, 3 + 3, MethodSingleType},
		{"no zone named: single type", []capacity.Offering{ttM5}, 3 + 3, MethodSingleType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ttConfig(t, capacity.Elastic(0, 100), 100, tt.offs, func(c *Config) { c.MinStep = 2 })
			d := NewTargetTracking(cfg).Decide(Input{Now: ttT0, Desired: 3,
				Pressure: capacity.Pressure{Nodes: ttNodes(4, 4, 4), Pending: ttPending(12)}})
			if f := d.TargetTracking; f.M != tt.wantM || f.Method != tt.wantMeth {
				t.Errorf("M = %d (%s), want %d (%s)", f.M, f.Method, tt.wantM, tt.wantMeth)
			}
		})
	}
}

type ttStep struct {
	at       time.Duration // since ttT0
	nodes    []capacity.Node
	pending  int
	wantM    int
	wantPct  int64
	want     int
	wantCode string
	wantLow  int
}

// runTTSteps feeds the steps in order, threading State and Desired.
func runTTSteps(t *testing.T, cfg Config, desired int, steps []ttStep) {
	t.Helper()
	p := NewTargetTracking(cfg)
	var st State
	for i, s := range steps {
		var pending []capacity.Pending
		if s.pending > 0 {
			pending = ttPending(s.pending)
		}
		d := p.Decide(Input{Now: ttT0.Add(s.at), Desired: desired, State: st,
			Pressure: capacity.Pressure{Nodes: s.nodes, Pending: pending}})
		f := d.TargetTracking
		if f.M != s.wantM || ttPct(d) != s.wantPct || d.Desired != s.want || d.Reason.Code != s.wantCode || f.LowDatapoints != s.wantLow {
			t.Fatalf("step %d (t+%v): M=%d %d%% desired %d %s low %d (%s); want M=%d %d%% desired %d %s low %d",
				i, s.at, f.M, ttPct(d), d.Desired, d.Reason.Code, f.LowDatapoints, d.Reason,
				s.wantM, s.wantPct, s.want, s.wantCode, s.wantLow)
		}
		desired, st = d.Desired, d.State
	}
}

// TestTargetTrackingScalingOut is the seed's "Scaling out" walkthrough.
func TestTargetTrackingScalingOut(t *testing.T) {
	cfg := ttConfig(t, capacity.Elastic(0, 10), 100, []capacity.Offering{ttM5})
	runTTSteps(t, cfg, 3, []ttStep{
		// Step 1: three instances all running tasks: M = N = 3, 100.
		{at: 0, nodes: ttNodes(2, 2, 2), wantM: 3, wantPct: 100, want: 3, wantCode: CodeSteady},
		// Step 2: nine more tasks, six placed, three provisioning: M = 4, 133.
		// Step 3: above target → desired 3 → 4 at once.
		{at: time.Minute, nodes: ttNodes(4, 4, 4), pending: 3, wantM: 4, wantPct: 133, want: 4, wantCode: CodeScaleUp},
		// The new instance is booting; the tasks still provision: no further scale-out.
		{at: 2 * time.Minute, nodes: ttNodes(4, 4, 4), pending: 3, wantM: 4, wantPct: 133, want: 4, wantCode: CodeSteady},
		// Steps 4–5: tasks placed on the new instance: M = N = 4, 100.
		{at: 3 * time.Minute, nodes: ttNodes(4, 4, 4, 3), wantM: 4, wantPct: 100, want: 4, wantCode: CodeSteady},
	})
}

// TestTargetTrackingScalingIn is the seed's "Scaling in" walkthrough: 15
// consecutive datapoints one minute apart before the scale-in; evaluations
// between datapoints do not count.
func TestTargetTrackingScalingIn(t *testing.T) {
	cfg := ttConfig(t, capacity.Elastic(0, 10), 100, []capacity.Offering{ttM5})
	steps := []ttStep{
		// Step 1: M = N = 3, 100.
		{at: 0, nodes: ttNodes(1, 1, 1), wantM: 3, wantPct: 100, want: 3, wantCode: CodeSteady},
	}
	// Steps 2–3: the third instance's task stops: M = 2, N = 3, 66. A datapoint
	// each minute from t+1m; an extra evaluation 30s later changes nothing.
	for k := 1; k <= 14; k++ {
		at := time.Duration(k) * time.Minute
		steps = append(steps,
			ttStep{at: at, nodes: ttNodes(1, 1, 0), wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: k},
			ttStep{at: at + 30*time.Second, nodes: ttNodes(1, 1, 0), wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: k})
	}
	steps = append(steps,
		// Step 4: the 15th consecutive datapoint: scale in to 2.
		ttStep{at: 15 * time.Minute, nodes: ttNodes(1, 1, 0), wantM: 2, wantPct: 66, want: 2, wantCode: CodeScaleDown},
		// The empty instance terminates meanwhile the metric still reads 66: no second scale-in.
		ttStep{at: 16 * time.Minute, nodes: ttNodes(1, 1, 0), wantM: 2, wantPct: 66, want: 2, wantCode: CodeSteady, wantLow: 1},
		// Step 5: N = 2, M = 2, 100. No further scaling.
		ttStep{at: 17 * time.Minute, nodes: ttNodes(1, 1), wantM: 2, wantPct: 100, want: 2, wantCode: CodeSteady},
	)
	runTTSteps(t, cfg, 3, steps)
}

// TestTargetTrackingDatapointReset: a datapoint at or above target resets
// the count of consecutive low datapoints.
func TestTargetTrackingDatapointReset(t *testing.T) {
	cfg := ttConfig(t, capacity.Elastic(0, 10), 100, []capacity.Offering{ttM5}, func(c *Config) { c.ScaleInDatapoints = 3 })
	low, full := ttNodes(1, 1, 0), ttNodes(1, 1, 1)
	runTTSteps(t, cfg, 3, []ttStep{
		{at: 0, nodes: low, wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: 1},
		{at: time.Minute, nodes: low, wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: 2},
		{at: 2 * time.Minute, nodes: full, wantM: 3, wantPct: 100, want: 3, wantCode: CodeSteady, wantLow: 0},
		{at: 3 * time.Minute, nodes: low, wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: 1},
		{at: 4 * time.Minute, nodes: low, wantM: 2, wantPct: 66, want: 3, wantCode: CodeSteady, wantLow: 2},
		{at: 5 * time.Minute, nodes: low, wantM: 2, wantPct: 66, want: 2, wantCode: CodeScaleDown, wantLow: 0},
	})
}

// TestTargetTrackingPure: Decide keeps no hidden state and does not modify its input.
func TestTargetTrackingPure(t *testing.T) {
	cfg := ttConfig(t, capacity.Elastic(0, 10), 100, []capacity.Offering{ttM5})
	p := NewTargetTracking(cfg)
	pending := []capacity.Pending{{Requests: ttTask, Count: 3}, {Requests: ttTask, Count: 2}}
	in := Input{Now: ttT0, Desired: 3, Pressure: capacity.Pressure{Nodes: ttNodes(4, 4, 4), Pending: pending}}
	a, b := p.Decide(in), p.Decide(in)
	if a.Desired != b.Desired || *a.TargetTracking != *b.TargetTracking || a.State != b.State {
		t.Errorf("two calls differ: %+v vs %+v", a, b)
	}
	if pending[0].Count != 3 || pending[1].Count != 2 {
		t.Errorf("Decide modified the pending groups: %+v", pending)
	}
	if p.Name() != TargetTracking {
		t.Errorf("Name() = %q", p.Name())
	}
}

// BenchmarkTargetTrackingDecide: one decision with 1,000 pending instances
// in 10 shape groups over 100 offerings (budget 50 µs/op).
func BenchmarkTargetTrackingDecide(b *testing.B) {
	var offs []capacity.Offering
	for i := range 100 {
		cores := int64(2 << (i % 6))
		offs = append(offs, capacity.Offering{Type: fmt.Sprintf("t%d", i%25), Zone: "a",
			Resources: capacity.Resources{MilliCPU: cores * 1000, Memory: cores * int64(2+i%3*2) * ttGi, GPUs: int64(i%7/6) * 4}, PricePerHour: float64(cores) / 10})
	}
	var pending []capacity.Pending
	for i := range 10 {
		pending = append(pending, capacity.Pending{Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) * ttGi}, Count: 100})
	}
	nodes := make([]capacity.Node, 100)
	for i := range nodes {
		nodes[i] = ttNodes(4)[0]
	}
	cfg := ttConfig(b, capacity.Elastic(0, 10000), 100, offs)
	p := NewTargetTracking(cfg)
	in := Input{Now: ttT0, Desired: 100, Pressure: capacity.Pressure{Nodes: nodes, Pending: pending}}
	b.ReportAllocs()
	for b.Loop() {
		in.State = p.Decide(in).State
	}
}

func TestTTGroups(t *testing.T) {
	x := func(cpu, v int64) capacity.Resources {
		r := capacity.Resources{MilliCPU: cpu, Memory: ttGi}
		if v > 0 {
			r.Extended = map[string]int64{"x": v}
		}
		return r
	}
	got := ttGroups([]capacity.Pending{
		{Requests: x(1000, 1), Count: 2}, {Requests: x(1000, 0), Count: 3}, {Requests: x(1000, 1), Count: 4},
		{Requests: x(500, 0), Count: 0}, {Requests: x(2000, 0), Count: -1}, {Requests: x(1000, 0), Count: 1},
	})
	want := []capacity.Pending{{Requests: x(1000, 1), Count: 6}, {Requests: x(1000, 0), Count: 4}}
	if len(got) != len(want) {
		t.Fatalf("ttGroups = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Requests.Equal(want[i].Requests) || got[i].Count != want[i].Count {
			t.Errorf("group %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestTargetTrackingInstanceWarmup is ECS's instance warm-up period: a
// node that joined less than instance_warmup ago is held out of M and N;
// it still counts as capacity a scale-out already bought, and no low
// datapoint is counted (no scale-in) while it warms. A node past its
// warm-up, one whose join time is unknown, or a pool without warm-up
// counts as before.
func TestTargetTrackingInstanceWarmup(t *testing.T) {
	warm := func(c *Config) { c.InstanceWarmup = 5 * time.Minute }
	joined := func(nodes []capacity.Node, ago ...time.Duration) []capacity.Node {
		for i, a := range ago {
			if a >= 0 {
				nodes[i].JoinedAt = ttT0.Add(-a)
			}
		}
		return nodes
	}
	const unknown = -1
	elastic := capacity.Elastic(0, 100)
	for _, c := range []struct {
		name     string
		cfg      Config
		desired  int
		nodes    []capacity.Node
		pending  int
		wantM    int
		wantN    int
		wantWarm int
		want     int
		wantLow  int
		wantText string
	}{
		{"no warm-up: a fresh empty node lowers the metric and counts a low datapoint",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}), 3, joined(ttNodes(2, 2, 0), time.Hour, time.Hour, time.Minute), 0,
			2, 3, 0, 3, 1, "66% is below target 100%: 1 of 15 low datapoints"},
		{"a fresh empty node warming is held out: M = N = 2, at target",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 3, joined(ttNodes(2, 2, 0), time.Hour, time.Hour, time.Minute), 0,
			2, 2, 1, 3, 0, "100% is at target"},
		{"past its warm-up it counts again",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 3, joined(ttNodes(2, 2, 0), time.Hour, time.Hour, 5*time.Minute), 0,
			2, 3, 0, 3, 1, "1 of 15 low datapoints"},
		{"a join time unknown counts as warmed",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 3, joined(ttNodes(2, 2, 0), time.Hour, time.Hour, unknown), 0,
			2, 3, 0, 3, 1, "1 of 15 low datapoints"},
		{"below target while a node warms: no low datapoint, no scale-in",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 4, joined(ttNodes(2, 0, 0, 1), time.Hour, time.Hour, time.Hour, time.Minute), 0,
			1, 3, 1, 4, 0, "1 node warming up hold scale-in"},
		{"scale-out counts the warming node as bought: 2 warmed busy + 1 warming, 5 more tasks",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 3, joined(ttNodes(4, 4, 0), time.Hour, time.Hour, time.Minute), 5,
			4, 2, 1, 5, 0, "above target"},
		{"every node warming, work pending: the need plus the warming, no scale-from-zero rule",
			ttConfig(t, elastic, 100, []capacity.Offering{ttM5}, warm), 2, joined(ttNodes(0, 0), time.Minute, time.Minute), 12,
			3, 0, 2, 5, 0, "above target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			pr := capacity.Pressure{Nodes: c.nodes}
			if c.pending > 0 {
				pr.Pending = ttPending(c.pending)
			}
			d := pol.Decide(Input{Now: ttT0, Desired: c.desired, Pressure: pr})
			f := d.TargetTracking
			if f.M != c.wantM || f.N != c.wantN || f.Warming != c.wantWarm || d.Desired != c.want ||
				d.State.LowDatapoints != c.wantLow || !strings.Contains(d.Reason.String(), c.wantText) {
				t.Errorf("M=%d N=%d warming=%d desired=%d low=%d (%s), want M=%d N=%d warming=%d desired=%d low=%d (%q)",
					f.M, f.N, f.Warming, d.Desired, d.State.LowDatapoints, d.Reason, c.wantM, c.wantN, c.wantWarm, c.want,
					c.wantLow, c.wantText)
			}
		})
	}
}
