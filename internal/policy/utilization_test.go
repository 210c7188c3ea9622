package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// utilDelay is the scale-down delay d of seed 001's scenarios.
const utilDelay = 10 * time.Minute

var utilT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// utilConfig is a utilization pool in [min, max] with MinUtilization 80 and
// ScaleDownDelay utilDelay, validated.
func utilConfig(t *testing.T, min, max int, mutate ...func(*Config)) Config {
	t.Helper()
	cfg := Config{Policy: Utilization, Nodes: capacity.Elastic(min, max), MinUtilization: 80, ScaleDownDelay: utilDelay}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// utilNodes returns n nodes of gpus GPUs each, n0..n{n-1}; each runs a
// daemon (which must not count), and the busy lowest ordinals run one
// instance using every GPU, so node-level and chip-level utilization match
// as in the seed's examples.
func utilNodes(n, gpus, busy int) []capacity.Node {
	nodes := make([]capacity.Node, n)
	for i := range nodes {
		nodes[i] = capacity.Node{ID: fmt.Sprintf("n%d", i), Ordinal: i, Resources: capacity.Resources{GPUs: int64(gpus)}}
	}
	return utilSetBusy(nodes, busy)
}

// utilSetBusy makes the busy lowest ordinals fully used and the rest empty.
func utilSetBusy(nodes []capacity.Node, busy int) []capacity.Node {
	for i := range nodes {
		n := &nodes[i]
		n.Running = []capacity.Instance{{Requests: capacity.CPU(100), Daemon: true}}
		if n.Ordinal < busy {
			n.Running = append(n.Running, capacity.Instance{Requests: capacity.Resources{GPUs: n.Resources.GPUs}})
		}
	}
	return nodes
}

// utilApply carries out the reconcile action of a decision the way the
// reconciler would: marks are stamped with now, unmarks cleared, deleted
// nodes removed.
func utilApply(nodes []capacity.Node, f *UtilizationFigures, now time.Time) []capacity.Node {
	out := nodes[:0:0]
	for _, n := range nodes {
		switch {
		case slices.Contains(f.Delete, n.ID):
			continue
		case slices.Contains(f.Mark, n.ID):
			n.MarkedAt = now
		case slices.Contains(f.Unmark, n.ID):
			n.MarkedAt = time.Time{}
		}
		out = append(out, n)
	}
	return out
}

// utilIDs returns "n{hi}" down to "n{lo}".
func utilIDs(hi, lo int) []string {
	var ids []string
	for i := hi; i >= lo; i-- {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	return ids
}

// utilStep is one reconcile loop of a scenario: set the busy count (-1 keeps
// it), decide at t, check, apply the plan.
type utilStep struct {
	what                 string
	at                   time.Duration
	busy                 int
	target               int
	mark, unmark, delete []string
	nodesAfter           int
}

func runUtilScenario(t *testing.T, steps []utilStep) {
	t.Helper()
	p := NewUtilization(utilConfig(t, 0, 200))
	nodes := utilNodes(120, 8, 80)
	for _, s := range steps {
		now := utilT0.Add(s.at)
		if s.busy >= 0 {
			nodes = utilSetBusy(nodes, s.busy)
		}
		d := p.Decide(Input{Now: now, Desired: len(nodes), Pressure: capacity.Pressure{Nodes: nodes}})
		f := d.Utilization
		if f == nil {
			t.Fatalf("%s: no utilization figures", s.what)
		}
		if d.Desired != s.target || f.Target != s.target {
			t.Errorf("%s: desired %d, figures target %d (%v); want %d", s.what, d.Desired, f.Target, d.Reason, s.target)
		}
		for _, c := range []struct {
			name      string
			got, want []string
		}{{"mark", f.Mark, s.mark}, {"unmark", f.Unmark, s.unmark}, {"delete", f.Delete, s.delete}} {
			if c.got == nil || !slices.Equal(c.got, c.want) {
				t.Errorf("%s: %s %v, want %v", s.what, c.name, c.got, c.want)
			}
		}
		nodes = utilApply(nodes, f, now)
		if len(nodes) != s.nodesAfter {
			t.Errorf("%s: %d nodes after the loop, want %d", s.what, len(nodes), s.nodesAfter)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// Seed 001, scenario A: 120 nodes of 8 GPUs, 80 fully used, min utilization
// 80%: target 100 and 20 nodes marked at t=0; no change before the delay; at
// t=d the 20 are deleted.
func TestUtilizationScenarioA(t *testing.T) {
	runUtilScenario(t, []utilStep{
		{what: "t=0: evaluate sets target 100, reconcile marks 20", at: 0, busy: 80, target: 100,
			mark: utilIDs(119, 100), nodesAfter: 120},
		{what: "t=d/2: marks wait for the delay", at: utilDelay / 2, busy: -1, target: 100, nodesAfter: 120},
		{what: "t=d: no change to the target, the 20 marked are deleted", at: utilDelay, busy: -1, target: 100,
			delete: utilIDs(119, 100), nodesAfter: 100},
		{what: "t=d, next loop: at target, nothing to do", at: utilDelay, busy: -1, target: 100, nodesAfter: 100},
	})
}

// Seed 001, scenario B: as A, but at t=d utilization drops to 60 nodes: target
// 75 and the 20 marked are deleted; the next loop marks 25 more, deleted at 2d.
func TestUtilizationScenarioB(t *testing.T) {
	runUtilScenario(t, []utilStep{
		{what: "t=0: target 100, mark 20", at: 0, busy: 80, target: 100, mark: utilIDs(119, 100), nodesAfter: 120},
		{what: "t=d: utilized drops to 60, target 75, the 20 marked are deleted", at: utilDelay, busy: 60, target: 75,
			delete: utilIDs(119, 100), nodesAfter: 100},
		{what: "t=d, next loop: mark 25 more", at: utilDelay, busy: -1, target: 75, mark: utilIDs(99, 75), nodesAfter: 100},
		{what: "t=2d-1s: the 25 wait", at: 2*utilDelay - time.Second, busy: -1, target: 75, nodesAfter: 100},
		{what: "t=2d: no change to the target, the 25 are deleted", at: 2 * utilDelay, busy: -1, target: 75,
			delete: utilIDs(99, 75), nodesAfter: 75},
		{what: "t=2d, next loop: at target", at: 2 * utilDelay, busy: -1, target: 75, nodesAfter: 75},
	})
}

// Seed 001, scenario C: as A, but at 0<t<d utilization rises to 88 nodes:
// target 110 and 10 marks are removed; at t=d the 10 still marked are deleted.
func TestUtilizationScenarioC(t *testing.T) {
	runUtilScenario(t, []utilStep{
		{what: "t=0: target 100, mark 20", at: 0, busy: 80, target: 100, mark: utilIDs(119, 100), nodesAfter: 120},
		{what: "t=d/2: utilized rises to 88, target 110, unmark 10", at: utilDelay / 2, busy: 88, target: 110,
			unmark: []string{"n100", "n101", "n102", "n103", "n104", "n105", "n106", "n107", "n108", "n109"}, nodesAfter: 120},
		{what: "t=d: the 10 still marked are deleted", at: utilDelay, busy: -1, target: 110,
			delete: utilIDs(119, 110), nodesAfter: 110},
		{what: "t=d, next loop: at target", at: utilDelay, busy: -1, target: 110, nodesAfter: 110},
	})
}

func TestUtilizationDecide(t *testing.T) {
	gpuOffering := func(gpus int64) capacity.Offering {
		return capacity.Offering{Type: fmt.Sprintf("g%d", gpus), Resources: capacity.Resources{GPUs: gpus}, PricePerHour: 1}
	}
	pendingGPUs := func(count int, gpus int64) []capacity.Pending {
		return []capacity.Pending{{Requests: capacity.Resources{GPUs: gpus, MilliCPU: 1000}, Count: count}}
	}
	marked := func(nodes []capacity.Node, at time.Time, ords ...int) []capacity.Node {
		for _, o := range ords {
			nodes[o].MarkedAt = at
		}
		return nodes
	}
	mixed := append(utilNodes(2, 4, 2), capacity.Node{ID: "n2", Ordinal: 2, Resources: capacity.Resources{GPUs: 8}})
	partial := func(n int, used ...int64) []capacity.Node {
		nodes := utilNodes(n, 8, 0)
		for i, u := range used {
			nodes[i].Running = append(nodes[i].Running, capacity.Instance{Requests: capacity.Resources{GPUs: u}})
		}
		return nodes
	}
	tests := []struct {
		name                 string
		cfg                  func(*Config)
		min, max             int
		nodes                []capacity.Node
		pending              []capacity.Pending
		want                 int
		code                 string
		util                 float64
		mark, unmark, delete []string
	}{
		{name: "pending GPUs: add ceil(pending / largest offering's GPUs) nodes",
			cfg: func(c *Config) { c.Offerings = []capacity.Offering{gpuOffering(8), gpuOffering(2)} },
			max: 20, nodes: utilNodes(4, 4, 4), pending: pendingGPUs(3, 4), want: 6, code: CodeScaleUp, util: 100},
		{name: "pending GPUs without offerings: largest existing node",
			max: 20, nodes: mixed, pending: pendingGPUs(3, 4), want: 5, code: CodeScaleUp, util: 8.0 / 16 * 100},
		{name: "pending GPUs, node size unknown: one node", max: 20, pending: pendingGPUs(5, 2),
			want: 1, code: CodeScaleUp},
		{name: "pending without GPUs is ignored", max: 20, nodes: utilNodes(4, 8, 4), pending: pendingGPUs(3, 0),
			want: 4, code: CodeSteady, util: 100},
		{name: "scale-up is the one action: marks stay",
			max: 20, nodes: marked(utilNodes(4, 8, 2), utilT0.Add(-time.Hour), 3), pending: pendingGPUs(1, 8),
			want: 5, code: CodeScaleUp, util: 50},
		{name: "scale-up capped at max", max: 5, nodes: utilNodes(4, 8, 4), pending: pendingGPUs(2, 8),
			want: 5, code: CodeAtMax, util: 100},
		{name: "at or above min utilization: steady", max: 20, nodes: utilNodes(10, 8, 8), want: 10, code: CodeSteady, util: 80},
		{name: "below min utilization: ceil(used / (gpus × 80%))", max: 20, nodes: utilNodes(10, 8, 7),
			want: 9, code: CodeScaleDown, util: 70, mark: []string{"n9"}},
		{name: "partially used nodes count in GPUs", max: 20, nodes: partial(4, 4, 4),
			want: 2, code: CodeScaleDown, util: 25, mark: []string{"n3", "n2"}},
		{name: "never below the busy nodes", max: 20, nodes: partial(4, 1, 1, 1, 1),
			want: 4, code: CodeSteady, util: 12.5},
		{name: "MinUnutilizedNodes keeps a buffer of empty nodes",
			cfg: func(c *Config) { c.MinUnutilizedNodes = 3 }, max: 20, nodes: utilNodes(10, 8, 2),
			want: 5, code: CodeScaleDown, util: 20, mark: utilIDs(9, 5)},
		{name: "MinUnutilizedNodes buffer covering every empty node: steady",
			cfg: func(c *Config) { c.MinUnutilizedNodes = 5 }, max: 20, nodes: utilNodes(10, 8, 5),
			want: 10, code: CodeSteady, util: 50},
		{name: "MinUnutilizedNodes never grows the pool",
			cfg: func(c *Config) { c.MinUnutilizedNodes = 5 }, max: 20, nodes: utilNodes(10, 8, 9),
			want: 10, code: CodeSteady, util: 90},
		{name: "scale-down stops at min", min: 8, max: 20, nodes: utilNodes(10, 8, 2),
			want: 8, code: CodeAtMin, util: 20, mark: []string{"n9", "n8"}},
		{name: "busy marked node gets unmarked", max: 20, nodes: marked(utilNodes(10, 8, 8), utilT0.Add(-time.Hour), 7),
			want: 10, code: CodeSteady, util: 80, unmark: []string{"n7"}},
		{name: "marks beyond the excess are removed", max: 20,
			nodes: marked(utilNodes(10, 8, 7), utilT0.Add(-time.Minute), 8, 9), want: 9, code: CodeScaleDown, util: 70,
			unmark: []string{"n8"}},
		{name: "due marks are deleted", max: 20, nodes: marked(utilNodes(10, 8, 7), utilT0.Add(-utilDelay), 9),
			want: 9, code: CodeScaleDown, util: 70, delete: []string{"n9"}},
		{name: "pool above a lowered max shrinks through marks", max: 8, nodes: utilNodes(10, 8, 8),
			want: 8, code: CodeAtMax, util: 80, mark: []string{"n9", "n8"}},
		{name: "nodes without GPUs: steady", max: 20, nodes: utilNodes(3, 0, 0), want: 3, code: CodeSteady},
		{name: "empty pool below min: provision to min", min: 2, max: 20, want: 2, code: CodeAtMin},
		{name: "empty pool at min 0: steady", max: 20, want: 0, code: CodeSteady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mutate []func(*Config)
			if tt.cfg != nil {
				mutate = append(mutate, tt.cfg)
			}
			p := NewUtilization(utilConfig(t, tt.min, tt.max, mutate...))
			state := State{LastScale: utilT0.Add(-time.Hour)}
			d := p.Decide(Input{Now: utilT0, Desired: len(tt.nodes),
				Pressure: capacity.Pressure{Nodes: tt.nodes, Pending: tt.pending}, State: state})
			f := d.Utilization
			if d.Desired != tt.want || d.Reason.Code != tt.code {
				t.Errorf("Decide = %d (%v), want %d (%s)", d.Desired, d.Reason, tt.want, tt.code)
			}
			if f == nil {
				t.Fatal("no utilization figures")
			}
			if f.Target != d.Desired || math.Abs(f.Utilization-tt.util) > 1e-9 {
				t.Errorf("figures target %d utilization %v, want %d %v", f.Target, f.Utilization, d.Desired, tt.util)
			}
			for _, c := range []struct {
				name      string
				got, want []string
			}{{"mark", f.Mark, tt.mark}, {"unmark", f.Unmark, tt.unmark}, {"delete", f.Delete, tt.delete}} {
				if c.got == nil || !slices.Equal(c.got, c.want) {
					t.Errorf("%s %v, want %v", c.name, c.got, c.want)
				}
			}
			if d.State != state {
				t.Errorf("State = %+v, want the input state %+v", d.State, state)
			}
			if d.TargetTracking != nil || d.Tide != nil {
				t.Errorf("utilization filled another policy's figures: %+v", d)
			}
		})
	}
}

func TestUtilizationReasonWords(t *testing.T) {
	tests := []struct {
		name    string
		min     int
		max     int
		nodes   []capacity.Node
		pending []capacity.Pending
		words   string
	}{
		{"seed scenario A", 0, 200, utilNodes(120, 8, 80), nil,
			"scale-down: GPU utilization 66% is below min 80%: 640 of 960 GPUs used"},
		{"scale-up", 0, 200, utilNodes(4, 8, 4), []capacity.Pending{{Requests: capacity.Resources{GPUs: 8}, Count: 3}},
			"scale-up: 24 GPUs requested by pending instances need 3 more nodes of 8 GPUs on top of 4"},
		{"at max", 0, 5, utilNodes(4, 8, 4), []capacity.Pending{{Requests: capacity.Resources{GPUs: 8}, Count: 3}},
			"at-max: wanted 7 nodes (24 GPUs pending, 32 GPUs used); capped at max 5"},
		{"at min", 110, 200, utilNodes(120, 8, 80), nil,
			"at-min: wanted 100 nodes (0 GPUs pending, 640 GPUs used); raised to min 110"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewUtilization(utilConfig(t, tt.min, tt.max))
			d := p.Decide(Input{Now: utilT0, Desired: len(tt.nodes), Pressure: capacity.Pressure{Nodes: tt.nodes, Pending: tt.pending}})
			if text, _ := d.Reason.MarshalText(); string(text) != tt.words {
				t.Errorf("reason = %q, want %q", text, tt.words)
			}
		})
	}
}

// TestUtilizationFiguresJSON pins the wire form: the three id lists are
// always arrays, never null.
func TestUtilizationFiguresJSON(t *testing.T) {
	p := NewUtilization(utilConfig(t, 0, 200))
	d := p.Decide(Input{Now: utilT0, Desired: 120, Pressure: capacity.Pressure{Nodes: utilNodes(120, 8, 80)}})
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"target":100`, `"unmark":[]`, `"delete":[]`, `"mark":["n119",`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("decision JSON %s lacks %s", raw, want)
		}
	}
}

// TestUtilizationProtectsFirstNode holds invariant 3: with protect_first_node
// the pool's first node is never marked, even when it is the only empty one.
func TestUtilizationProtectsFirstNode(t *testing.T) {
	nodes := utilNodes(4, 8, 0)
	for i := 1; i < 4; i++ { // nodes 1..3 busy, node 0 empty
		nodes[i].Running = append(nodes[i].Running, capacity.Instance{Requests: capacity.Resources{GPUs: 8}})
	}
	in := Input{Now: utilT0, Desired: 4, Pressure: capacity.Pressure{Nodes: nodes}}
	unprotected := NewUtilization(utilConfig(t, 0, 8, func(c *Config) { c.MinUtilization = 100 })).Decide(in)
	if !slices.Equal(unprotected.Utilization.Mark, []string{"n0"}) {
		t.Fatalf("without protection: mark %v, want [n0]", unprotected.Utilization.Mark)
	}
	protected := NewUtilization(utilConfig(t, 0, 8, func(c *Config) { c.MinUtilization = 100; c.ProtectFirstNode = true })).Decide(in)
	if len(protected.Utilization.Mark) != 0 || len(protected.Utilization.Delete) != 0 {
		t.Fatalf("with protection: mark %v delete %v, want nothing", protected.Utilization.Mark, protected.Utilization.Delete)
	}
}
