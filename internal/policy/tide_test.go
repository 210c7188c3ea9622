package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

var tideT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var (
	tideC4 = capacity.Resources{MilliCPU: 4000, Memory: 16 * ttGi}
	// tideOD is 4 cores on demand at $0.20/h.
	tideOD = capacity.Offering{Type: "c4", Kind: capacity.OnDemand, Resources: tideC4, PricePerHour: 0.20}
	// tideTask: 4 fit a c4 node beside its daemon (ttDaemon, 100m).
	tideTask = capacity.Resources{MilliCPU: 900, Memory: 2 * ttGi}
	tideGPU  = capacity.Offering{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 24.5,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 * ttGi, GPUs: 8}}
)

// tideSpot is c4 on spot at $0.06/h with a 10% hourly interruption
// probability and the given penalty: effective 0.06 + 0.1 × penalty.
func tideSpot(penalty float64) capacity.Offering {
	return capacity.Offering{Type: "c4", Kind: capacity.Spot, Resources: tideC4, PricePerHour: 0.06,
		InterruptionProbability: 0.1, InterruptionPenalty: penalty}
}

func tideConfig(t testing.TB, spec capacity.NodeSpec, offs []capacity.Offering, mutate ...func(*Config)) Config {
	t.Helper()
	cfg := Config{Policy: Tide, Nodes: spec, Offerings: offs}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// idle60 sets the idle timeout to 60s (the default before TideIdleTimeout).
func idle60(c *Config) { c.IdleTimeout = time.Minute }

// tideFullNodes returns n c4 nodes, each running its daemon and 4 tasks.
func tideFullNodes(n int) []capacity.Node {
	out := make([]capacity.Node, n)
	for i := range out {
		out[i] = tideNode(fmt.Sprintf("n%d", i), 4)
	}
	return out
}

type tideNodeOpt func(*capacity.Node)

// idleFor marks the node empty since d before tideT0.
func idleFor(d time.Duration) tideNodeOpt {
	return func(n *capacity.Node) { n.IdleSince = tideT0.Add(-d) }
}

func marked(n *capacity.Node) { n.MarkedAt = tideT0.Add(-time.Minute) }

// tideNode is a c4 node running one daemon and tasks tideTasks.
func tideNode(id string, tasks int, opts ...tideNodeOpt) capacity.Node {
	n := capacity.Node{ID: id, Resources: tideC4, Running: []capacity.Instance{ttDaemon}}
	for range tasks {
		n.Running = append(n.Running, capacity.Instance{Requests: tideTask})
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func tidePending(req capacity.Resources, count int) capacity.Pending {
	return capacity.Pending{Requests: req, Count: count}
}

// waited is a state whose backlog was first seen long enough ago.
var waited = State{PendingSince: tideT0.Add(-time.Minute)}

func TestTideDecide(t *testing.T) {
	elastic := capacity.Elastic(0, 20)
	gpuTask := capacity.Resources{MilliCPU: 3000, Memory: 16 * ttGi, GPUs: 1} // 8 per g8 node
	tests := []struct {
		name     string
		cfg      Config
		desired  int
		nodes    []capacity.Node
		pending  []capacity.Pending
		state    State
		want     int
		wantCode string
		wantMix  []OfferingCount
		wantCost float64
		wantIdle []string
		wantText string
	}{
		{
			name: "steady: nothing queued, nothing idle",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, idle60), desired: 2,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 0, idleFor(10*time.Second))},
			want:  2, wantCode: CodeSteady, wantText: "1 busy and 1 empty nodes, none idle for 60s",
		},
		{
			name: "batching: a new backlog waits for the window",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 8)},
			want:    1, wantCode: CodeBatching, wantText: "8 queued instances batched for 0ms of the 1000ms window",
		},
		{
			name: "batching: backlog younger than the window",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 8)},
			state:   State{PendingSince: tideT0.Add(-999 * time.Millisecond)},
			want:    1, wantCode: CodeBatching,
		},
		{
			name: "scale-up once the window has passed",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 8)},
			state:   State{PendingSince: tideT0.Add(-2 * time.Second)},
			want:    3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 2}}, wantCost: 0.4,
			wantText: "8 queued instances need 2 new nodes and 0 spare, effective cost 40 cents/h",
		},
		{
			name: "free space of existing nodes first: nothing to buy",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 2,
			nodes:   []capacity.Node{tideNode("a", 1), tideNode("b", 2)},
			pending: []capacity.Pending{tidePending(tideTask, 5)}, state: waited,
			want: 2, wantCode: CodeSteady, wantText: "5 queued instances fit the free space of existing nodes",
		},
		{
			name: "free space first, then new nodes",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 2,
			nodes:   []capacity.Node{tideNode("a", 1), tideNode("b", 2)},
			pending: []capacity.Pending{tidePending(tideTask, 9)}, state: waited,
			want: 3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 1}}, wantCost: 0.2,
		},
		{
			name: "a node marked for deletion gives no space and does not count",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4), tideNode("b", 0, marked)},
			pending: []capacity.Pending{tidePending(tideTask, 4)}, state: waited,
			want: 2, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 1}}, wantCost: 0.2,
		},
		{
			name: "spot when its effective cost is lower (0.06 + 0.1×1 < 0.20)",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD, tideSpot(1)}), desired: 0,
			pending: []capacity.Pending{tidePending(tideTask, 6), tidePending(capacity.Resources{MilliCPU: 2000, Memory: 8 * ttGi}, 3)},
			state:   waited,
			want:    3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/spot", 3}}, wantCost: 3 * 0.16,
		},
		{
			name: "on-demand when the penalty makes spot dearer (0.06 + 0.1×2 > 0.20)",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD, tideSpot(2)}), desired: 0,
			pending: []capacity.Pending{tidePending(tideTask, 6), tidePending(capacity.Resources{MilliCPU: 2000, Memory: 8 * ttGi}, 3)},
			state:   waited,
			want:    3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 3}}, wantCost: 3 * 0.20,
		},
		{
			name: "gpu shapes buy gpu nodes; cpu work fills their leftovers",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD, tideGPU}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(gpuTask, 10), tidePending(tideTask, 4)}, state: waited,
			want: 3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"g8/on-demand", 2}}, wantCost: 49,
		},
		{
			name: "a shape that fits no offering is named; the rest is bought",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 4), tidePending(gpuTask, 3)}, state: waited,
			want: 2, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 1}}, wantCost: 0.2,
			wantText: "3 instances of shape cpu=3000m mem=16384Mi gpu=1 fit no offering",
		},
		{
			name: "only unfit shapes: nothing to buy",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(gpuTask, 3)}, state: waited,
			want: 1, wantCode: CodeSteady, wantText: "no new node helps; 3 instances of shape cpu=3000m",
		},
		{
			name: "max reached: buy what max allows",
			cfg:  tideConfig(t, capacity.Elastic(0, 3), []capacity.Offering{tideOD}), desired: 2,
			nodes:   []capacity.Node{tideNode("a", 4), tideNode("b", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 12)}, state: waited,
			want: 3, wantCode: CodeAtMax, wantMix: []OfferingCount{{"c4/on-demand", 1}}, wantCost: 0.2,
			wantText: "12 queued instances need 5 nodes; held at max 3",
		},
		{
			name: "min = max: a fixed pool never grows",
			cfg:  tideConfig(t, capacity.Fixed(2), []capacity.Offering{tideOD}), desired: 2,
			nodes:   []capacity.Node{tideNode("a", 4), tideNode("b", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 4)}, state: waited,
			want: 2, wantCode: CodeAtMax, wantText: "held at max 2",
		},
		{
			name: "min = max: a fixed pool never shrinks",
			cfg:  tideConfig(t, capacity.Fixed(2), []capacity.Offering{tideOD}), desired: 2,
			nodes: []capacity.Node{tideNode("a", 0, idleFor(time.Hour)), tideNode("b", 0, idleFor(time.Hour))},
			want:  2, wantCode: CodeSteady, wantIdle: []string{"a", "b"},
		},
		{
			name: "headroom adds spare nodes to a scale-up",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.Headroom = 1 }), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 4)}, state: waited,
			want: 3, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 1}}, wantCost: 0.2,
			wantText: "need 1 new node and 1 spare",
		},
		{
			name: "nodes already requested while they boot: no double provisioning, no cut",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 4,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 8)}, state: waited,
			want: 4, wantCode: CodeSteady, wantMix: []OfferingCount{{"c4/on-demand", 2}}, wantCost: 0.4,
			wantText: "8 queued instances need 3 nodes; 4 already requested",
		},
		{
			// 1 joined and 1 booting; 44 tasks need 11 new nodes, more than
			// the 1 booting: the burst goes on, so 11/10 = 1 spare comes too.
			name: "a backlog that outgrows the nodes booting gets the burst spare",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 2,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(tideTask, 44)}, state: waited,
			want: 13, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 11}}, wantCost: 2.2,
			wantText: "44 queued instances need 11 new nodes and 1 spare",
		},
		{
			// 20 full nodes and 1 booting; 20 tasks need 5 new nodes, more
			// than the 1 booting: 5/10 rounds to no spare, but the pool's
			// 5 % (20 nodes × 5 % = 1) gives one.
			name: "a burst that outgrows the nodes booting of a pool of 20 gets 5 % of it spare",
			cfg:  tideConfig(t, capacity.Elastic(0, 50), []capacity.Offering{tideOD}), desired: 21,
			nodes:   tideFullNodes(20),
			pending: []capacity.Pending{tidePending(tideTask, 20)}, state: waited,
			want: 26, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 5}}, wantCost: 1.0,
			wantText: "20 queued instances need 5 new nodes and 1 spare",
		},
		{
			// 64 tasks need 16 new nodes: the burst spare comes at once, 2 + 16/10.
			name: "a backlog of 16 new nodes or more gets the burst spare at once",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 0,
			pending: []capacity.Pending{tidePending(tideTask, 64)}, state: waited,
			want: 19, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 16}}, wantCost: 3.2,
			wantText: "64 queued instances need 16 new nodes and 3 spare",
		},
		{
			// Headroom 4 beats the burst spare of 2 + 16/10 = 3.
			name: "headroom above the burst spare wins",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.Headroom = 4 }), desired: 0,
			pending: []capacity.Pending{tidePending(tideTask, 64)}, state: waited,
			want: 20, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 16}}, wantCost: 3.2,
			wantText: "64 queued instances need 16 new nodes and 4 spare",
		},
		{
			name: "new nodes lose to daemons what daemons take on existing nodes",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes:   []capacity.Node{tideNode("a", 4)},
			pending: []capacity.Pending{tidePending(capacity.Resources{MilliCPU: 1000, Memory: ttGi}, 8)}, state: waited,
			want: 4, wantCode: CodeScaleUp, wantMix: []OfferingCount{{"c4/on-demand", 3}}, wantCost: 0.6, // 3 per node, not 4
		},
		{
			name: "scale-down of nodes idle beyond the timeout",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, idle60), desired: 4,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 0, idleFor(2*time.Minute)),
				tideNode("c", 0, idleFor(time.Minute)), tideNode("d", 0, idleFor(59*time.Second))},
			want: 2, wantCode: CodeScaleDown, wantIdle: []string{"b", "c"},
			wantText: "2 nodes idle for at least 60s: scale down to 2",
		},
		{
			name: "by default an empty node goes after 1s",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 3,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 0, idleFor(time.Second)),
				tideNode("c", 0, idleFor(999*time.Millisecond))},
			want: 2, wantCode: CodeScaleDown, wantIdle: []string{"b"},
			wantText: "1 node idle for at least 1s: scale down to 2",
		},
		{
			name: "a node running only daemons is empty; one with unknown idle time is kept",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 3,
			nodes: []capacity.Node{tideNode("a", 0, idleFor(time.Hour)), tideNode("b", 0), tideNode("c", 2)},
			want:  2, wantCode: CodeScaleDown, wantIdle: []string{"a"},
		},
		{
			name: "never below min",
			cfg:  tideConfig(t, capacity.Elastic(2, 20), []capacity.Offering{tideOD}), desired: 3,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 0, idleFor(time.Hour)), tideNode("c", 0, idleFor(time.Hour))},
			want:  2, wantCode: CodeScaleDown, wantIdle: []string{"b", "c"},
		},
		{
			name: "headroom keeps that many empty nodes",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.Headroom = 1 }), desired: 3,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 0, idleFor(time.Hour)), tideNode("c", 0, idleFor(time.Hour))},
			want:  2, wantCode: CodeScaleDown, wantIdle: []string{"b", "c"},
		},
		{
			name: "headroom restored without a backlog",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.Headroom = 2 }), desired: 2,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 3)},
			want:  4, wantCode: CodeScaleUp, wantText: "keeping 2 spare nodes: 0 empty, desired 4",
		},
		{
			name: "never below running work",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 1,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 1), tideNode("c", 0, idleFor(time.Hour))},
			want:  2, wantCode: CodeScaleUp, wantIdle: []string{"c"},
		},
		{
			name: "a backlog blocks scale-down and reuses idle nodes",
			cfg:  tideConfig(t, elastic, []capacity.Offering{tideOD}), desired: 3,
			nodes:   []capacity.Node{tideNode("a", 4), tideNode("b", 0, idleFor(time.Hour)), tideNode("c", 0, idleFor(time.Hour))},
			pending: []capacity.Pending{tidePending(tideTask, 3)}, state: waited,
			want: 3, wantCode: CodeSteady, wantIdle: []string{"c"},
		},
		{
			name: "at min from below",
			cfg:  tideConfig(t, capacity.Elastic(3, 20), []capacity.Offering{tideOD}), desired: 1,
			nodes: []capacity.Node{tideNode("a", 1)},
			want:  3, wantCode: CodeAtMin, wantText: "held at min 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewTide(tt.cfg)
			in := Input{Now: tideT0, Desired: tt.desired, State: tt.state,
				Pressure: capacity.Pressure{Nodes: tt.nodes, Pending: tt.pending}}
			d := p.Decide(in)
			if d.Desired != tt.want || d.Reason.Code != tt.wantCode {
				t.Errorf("desired %d (%s: %s); want %d (%s)", d.Desired, d.Reason.Code, d.Reason, tt.want, tt.wantCode)
			}
			f := d.Tide
			if f == nil {
				t.Fatal("no Tide figures")
			}
			if !slices.Equal(f.Mix, tt.wantMix) || abs(f.Cost-tt.wantCost) > 1e-9 || !slices.Equal(f.Idle, tt.wantIdle) {
				t.Errorf("figures mix=%v cost=%v idle=%v; want mix=%v cost=%v idle=%v", f.Mix, f.Cost, f.Idle, tt.wantMix, tt.wantCost, tt.wantIdle)
			}
			if !strings.Contains(d.Reason.String(), tt.wantText) {
				t.Errorf("reason %q does not contain %q", d.Reason, tt.wantText)
			}
			// Invariant 3: never fewer nodes than run non-daemon work, never outside [min, max].
			busy := 0
			for i := range tt.nodes {
				if tt.nodes[i].MarkedAt.IsZero() && tt.nodes[i].Busy() {
					busy++
				}
			}
			if d.Desired < min(busy, tt.cfg.Nodes.Max) || d.Desired != tt.cfg.Nodes.Clamp(d.Desired) {
				t.Errorf("desired %d with %d busy nodes in %v", d.Desired, busy, tt.cfg.Nodes)
			}
		})
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestTideBurst: instances arriving over the batch window are covered by
// one scale-up decision; while the nodes boot nothing more is asked for;
// once the backlog is placed the batch state clears.
func TestTideBurst(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 50), []capacity.Offering{tideOD})
	p := NewTide(cfg)
	nodes := []capacity.Node{tideNode("a", 4)}
	steps := []struct {
		at       time.Duration
		queued   int
		nodes    []capacity.Node
		want     int
		wantCode string
	}{
		{0, 5, nodes, 1, CodeBatching},
		{500 * time.Millisecond, 25, nodes, 1, CodeBatching},
		{950 * time.Millisecond, 39, nodes, 1, CodeBatching},
		{time.Second, 40, nodes, 11, CodeScaleUp},    // the whole burst: 40 tasks, 4 per node
		{2 * time.Second, 40, nodes, 11, CodeSteady}, // booting: already requested
		{time.Minute, 0, nil, 11, CodeSteady},        // all placed
		{time.Minute + time.Second, 4, nodes, 11, CodeBatching},
	}
	desired, st := 1, State{}
	for i, s := range steps {
		var pending []capacity.Pending
		if s.queued > 0 {
			pending = []capacity.Pending{tidePending(tideTask, s.queued)}
		}
		ns := s.nodes
		if ns == nil { // the burst has landed on eleven busy nodes
			for j := range 11 {
				ns = append(ns, tideNode(fmt.Sprint(j), 4))
			}
		}
		d := p.Decide(Input{Now: tideT0.Add(s.at), Desired: desired, State: st,
			Pressure: capacity.Pressure{Nodes: ns, Pending: pending}})
		if d.Desired != s.want || d.Reason.Code != s.wantCode {
			t.Fatalf("step %d: desired %d (%s: %s); want %d (%s)", i, d.Desired, d.Reason.Code, d.Reason, s.want, s.wantCode)
		}
		wantSince := tideT0
		switch {
		case s.queued == 0:
			wantSince = time.Time{}
		case s.at > time.Minute:
			wantSince = tideT0.Add(s.at)
		}
		if !d.State.PendingSince.Equal(wantSince) {
			t.Fatalf("step %d: PendingSince %v, want %v", i, d.State.PendingSince, wantSince)
		}
		desired, st = d.Desired, d.State
	}
}

// TestBurstSpare: none while the backlog fits the nodes booting or for a
// small first scale-up; 1 per 10 new nodes or 5 % of the pool's nodes,
// whichever is more, when the backlog outgrows the nodes booting; 2 + 1
// per 10 when it needs 16 new nodes or more at once.
func TestBurstSpare(t *testing.T) {
	tests := []struct {
		newNodes, booting, nodes, want int
	}{
		{0, 0, 0, 0}, {0, 3, 0, 0}, {1, 0, 0, 0}, {15, 0, 0, 0}, {16, 0, 0, 3}, {830, 0, 0, 85},
		{3, 3, 0, 0}, {2, 5, 0, 0}, {4, 3, 0, 0}, {12, 2, 0, 1}, {25, 24, 0, 2},
		// The pool's 5 %: none below 20 nodes, then 1 per 20.
		{4, 3, 19, 0}, {4, 3, 20, 1}, {12, 2, 19, 1}, {12, 2, 100, 5}, {30, 20, 100, 5}, {60, 20, 100, 6},
		// A backlog the booting nodes cover gets none, however large the pool.
		{3, 3, 1000, 0}, {2, 5, 1000, 0},
		// From a standing start the pool's size does not count.
		{15, 0, 1000, 0}, {16, 0, 1000, 3},
	}
	for _, tt := range tests {
		if got := burstSpare(tt.newNodes, tt.booting, tt.nodes); got != tt.want {
			t.Errorf("burstSpare(%d new, %d booting, %d nodes) = %d, want %d", tt.newNodes, tt.booting, tt.nodes, got, tt.want)
		}
	}
}

// TestTideLastScale: LastScale moves only when desired changes.
func TestTideLastScale(t *testing.T) {
	cfg := tideConfig(t, capacity.Elastic(0, 10), []capacity.Offering{tideOD})
	p := NewTide(cfg)
	d := p.Decide(Input{Now: tideT0, Desired: 1, State: waited, Pressure: capacity.Pressure{
		Nodes: []capacity.Node{tideNode("a", 4)}, Pending: []capacity.Pending{tidePending(tideTask, 4)}}})
	if d.Desired != 2 || !d.State.LastScale.Equal(tideT0) {
		t.Fatalf("desired %d LastScale %v", d.Desired, d.State.LastScale)
	}
	d = p.Decide(Input{Now: tideT0.Add(time.Second), Desired: 2, State: d.State, Pressure: capacity.Pressure{
		Nodes: []capacity.Node{tideNode("a", 4), tideNode("b", 4)}}})
	if d.Desired != 2 || !d.State.LastScale.Equal(tideT0) || !d.State.PendingSince.IsZero() {
		t.Fatalf("steady step changed state: %+v", d.State)
	}
	if p.Name() != Tide {
		t.Errorf("Name() = %q", p.Name())
	}
}

// BenchmarkTideDecide: 1,000 pending instances in 10 shapes over 100
// offerings, 100 existing nodes.
func BenchmarkTideDecide(b *testing.B) {
	var offs []capacity.Offering
	for i := range 100 {
		cores := int64(2 << (i % 6))
		o := capacity.Offering{Type: fmt.Sprintf("t%d", i%25), Zone: fmt.Sprint("z", i%3),
			Resources: capacity.Resources{MilliCPU: cores * 1000, Memory: cores * int64(2+i%3*2) * ttGi}, PricePerHour: float64(cores) / 10}
		if i%2 == 1 {
			o.Kind, o.PricePerHour, o.InterruptionProbability, o.InterruptionPenalty = capacity.Spot, o.PricePerHour/3, 0.05, 2
		}
		offs = append(offs, o)
	}
	var pending []capacity.Pending
	for i := range 10 {
		pending = append(pending, capacity.Pending{Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) * ttGi}, Count: 100})
	}
	nodes := make([]capacity.Node, 100)
	for i := range nodes {
		nodes[i] = tideNode(fmt.Sprint(i), i%4)
	}
	cfg := tideConfig(b, capacity.Elastic(0, 10000), offs)
	p := NewTide(cfg)
	in := Input{Now: tideT0, Desired: 100, State: waited, Pressure: capacity.Pressure{Nodes: nodes, Pending: pending}}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(in)
	}
}

// TestTideBatchingAsksForARecheck: while a backlog is held for the batching
// window the decision names the window's end, so a driver decides then
// instead of at its next tick; other decisions name no time.
func TestTideBatchingAsksForARecheck(t *testing.T) {
	p := NewTide(tideConfig(t, capacity.Elastic(0, 8), []capacity.Offering{tideOD}))
	in := Input{Now: tideT0, Desired: 1, Pressure: capacity.Pressure{
		Nodes: []capacity.Node{tideNode("a", 4)}, Pending: []capacity.Pending{tidePending(tideTask, 8)}}}
	d := p.Decide(in)
	if d.Reason.Code != CodeBatching || !d.Recheck.Equal(tideT0.Add(time.Second)) {
		t.Fatalf("batching decision: code %s recheck %v, want batching at +1s", d.Reason.Code, d.Recheck)
	}
	in.Now, in.State = d.Recheck, d.State
	if d = p.Decide(in); d.Reason.Code != CodeScaleUp || !d.Recheck.IsZero() {
		t.Fatalf("at the recheck: code %s recheck %v, want scale-up and no recheck", d.Reason.Code, d.Recheck)
	}
}
