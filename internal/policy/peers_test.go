package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// peerCase is one decision of a peer policy.
type peerCase struct {
	name    string
	cfg     Config
	desired int
	nodes   []capacity.Node
	pending []capacity.Pending
	state   State

	want      int
	code      string
	words     string    // a substring of the reason
	recheck   time.Time // zero: not checked
	launch    string    // the first launch's offering ("": none expected)
	wantState func(t *testing.T, st State)
}

func runPeerCases(t *testing.T, tests []peerCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Now: tideT0, Desired: tc.desired, State: tc.state,
				Pressure: capacity.Pressure{Nodes: tc.nodes, Pending: tc.pending}}
			d := p.Decide(in)
			if d.Desired != tc.want || d.Reason.Code != tc.code {
				t.Fatalf("desired %d (%s), want %d (%s)", d.Desired, d.Reason.MarshalTextString(), tc.want, tc.code)
			}
			if !strings.Contains(d.Reason.String(), tc.words) {
				t.Errorf("reason %q lacks %q", d.Reason.String(), tc.words)
			}
			if !tc.recheck.IsZero() && !d.Recheck.Equal(tc.recheck) {
				t.Errorf("recheck %s, want %s", d.Recheck.Sub(tideT0), tc.recheck.Sub(tideT0))
			}
			switch {
			case tc.launch == "" && len(d.Launch) > 0:
				t.Errorf("launch %+v, want none", d.Launch)
			case tc.launch != "" && (len(d.Launch) == 0 || d.Launch[0].Offering != tc.launch):
				t.Errorf("launch %+v, want %s first", d.Launch, tc.launch)
			}
			if n := launched(d.Launch); d.Desired > tc.desired && n != d.Desired-tc.desired {
				t.Errorf("launches %d nodes for a raise of %d", n, d.Desired-tc.desired)
			}
			if tc.wantState != nil {
				tc.wantState(t, d.State)
			}
		})
	}
}

func launched(ls []capacity.Launch) int {
	n := 0
	for _, l := range ls {
		n += l.Count
	}
	return n
}

// MarshalTextString is the reason as logs show it.
func (r Reason) MarshalTextString() string { b, _ := r.MarshalText(); return string(b) }

func peerConfig(t testing.TB, name string, spec capacity.NodeSpec, offs []capacity.Offering, mutate ...func(*Config)) Config {
	t.Helper()
	cfg := tideConfig(t, spec, offs, mutate...)
	cfg.Policy = name
	return cfg
}

func emptyNodes(n int, idle time.Duration) []capacity.Node {
	out := make([]capacity.Node, n)
	for i := range out {
		out[i] = tideNode(string(rune('a'+i)), 0, idleFor(idle))
	}
	return out
}

func TestKarpenterDecide(t *testing.T) {
	elastic := capacity.Elastic(0, 30)
	kc := peerConfig(t, Karpenter, elastic, []capacity.Offering{tideOD})
	sec := time.Second
	big := capacity.Offering{Type: "c16", Kind: capacity.OnDemand, PricePerHour: 0.70,
		Resources: capacity.Resources{MilliCPU: 16000, Memory: 64 * ttGi}}
	runPeerCases(t, []peerCase{
		{name: "new backlog opens a batch of 1 s idle", cfg: kc, pending: []capacity.Pending{tidePending(tideTask, 4)},
			want: 0, code: CodeBatching, words: "batched", recheck: tideT0.Add(sec),
			wantState: func(t *testing.T, st State) {
				if !st.PendingSince.Equal(tideT0) || !st.BatchGrewAt.Equal(tideT0) || st.BatchQueued != 4 {
					t.Errorf("state %+v", st)
				}
			}},
		{name: "an arrival keeps the batch open another second", cfg: kc, pending: []capacity.Pending{tidePending(tideTask, 4)},
			state: State{PendingSince: tideT0.Add(-5 * sec), BatchGrewAt: tideT0.Add(-500 * time.Millisecond), BatchQueued: 2},
			want:  0, code: CodeBatching, recheck: tideT0.Add(sec)},
		{name: "the batch closes after 1 s idle and buys one node", cfg: kc, pending: []capacity.Pending{tidePending(tideTask, 4)},
			state: State{PendingSince: tideT0.Add(-3 * sec), BatchGrewAt: tideT0.Add(-sec), BatchQueued: 4},
			want:  1, code: CodeScaleUp, words: "cheapest", launch: tideOD.Name(),
			wantState: func(t *testing.T, st State) {
				if !st.PendingSince.IsZero() || !st.LastLoop.Equal(tideT0) {
					t.Errorf("state %+v: batch not closed or poll not recorded", st)
				}
			}},
		{name: "the batch closes at 10 s however busy arrivals are", cfg: kc, pending: []capacity.Pending{tidePending(tideTask, 9)},
			state: State{PendingSince: tideT0.Add(-10 * sec), BatchGrewAt: tideT0.Add(-100 * time.Millisecond), BatchQueued: 8},
			want:  3, code: CodeScaleUp, launch: tideOD.Name()},
		{name: "cheapest offerings that fit: spot over on-demand", cfg: peerConfig(t, Karpenter, elastic, []capacity.Offering{tideOD, tideSpot(0.1)}),
			pending: []capacity.Pending{tidePending(tideTask, 8)}, state: State{PendingSince: tideT0.Add(-2 * sec), BatchGrewAt: tideT0.Add(-2 * sec), BatchQueued: 8},
			want: 2, code: CodeScaleUp, launch: tideSpot(0.1).Name()},
		{name: "cheapest offerings that fit: one big node over four small", cfg: peerConfig(t, Karpenter, elastic, []capacity.Offering{tideOD, big}),
			pending: []capacity.Pending{tidePending(tideTask, 16)}, state: State{PendingSince: tideT0.Add(-2 * sec), BatchGrewAt: tideT0.Add(-2 * sec), BatchQueued: 16},
			want: 1, code: CodeScaleUp, launch: big.Name()},
		{name: "nodes in flight count", cfg: kc, desired: 2, pending: []capacity.Pending{tidePending(tideTask, 8)},
			state: State{PendingSince: tideT0.Add(-2 * sec), BatchGrewAt: tideT0.Add(-2 * sec), BatchQueued: 8},
			want:  2, code: CodeSteady, words: "already requested"},
		{name: "work in the free space of existing nodes buys nothing", cfg: kc, desired: 1, nodes: []capacity.Node{tideNode("a", 1)},
			pending: []capacity.Pending{tidePending(tideTask, 2)}, state: State{PendingSince: tideT0.Add(-2 * sec), BatchGrewAt: tideT0.Add(-2 * sec), BatchQueued: 2},
			want: 1, code: CodeSteady, words: "free space"},
		{name: "the provisioner requeues every 10 s while work waits", cfg: kc, desired: 0,
			pending: []capacity.Pending{tidePending(tideTask, 4)}, state: State{BatchQueued: 4, LastLoop: tideT0.Add(-10 * sec)},
			want: 1, code: CodeScaleUp, launch: tideOD.Name()},
		{name: "an empty node goes at the next poll (consolidateAfter 0 s)", cfg: kc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(0))}, state: State{LastLoop: tideT0.Add(-10 * sec)},
			want: 1, code: CodeScaleDown, words: "consolidating 1"},
		{name: "no consolidation between polls", cfg: kc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(time.Hour))}, state: State{LastLoop: tideT0.Add(-4 * sec)},
			want: 2, code: CodeSteady, recheck: tideT0.Add(6 * sec)},
		{name: "consolidateAfter holds an empty node", cfg: peerConfig(t, Karpenter, elastic, []capacity.Offering{tideOD}, func(c *Config) { c.ConsolidateAfter = 30 * sec }),
			desired: 2, nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(5*sec))},
			want: 2, code: CodeSteady, recheck: tideT0.Add(25 * sec)},
		{name: "the 10 % budget: 2 of 20 empty nodes per poll", cfg: kc, desired: 20, nodes: emptyNodes(20, time.Minute),
			want: 18, code: CodeScaleDown, words: "budget 2"},
		{name: "the budget rounds up: 1 of 3", cfg: kc, desired: 3, nodes: emptyNodes(3, time.Minute),
			want: 2, code: CodeScaleDown},
		{name: "min holds", cfg: peerConfig(t, Karpenter, capacity.Elastic(2, 30), []capacity.Offering{tideOD}), desired: 2, nodes: emptyNodes(2, time.Minute),
			want: 2, code: CodeSteady},
		{name: "busy nodes never go, however little they run", cfg: kc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 1)}, want: 2, code: CodeSteady},
		{name: "at max", cfg: peerConfig(t, Karpenter, capacity.Elastic(0, 2), []capacity.Offering{tideOD}),
			pending: []capacity.Pending{tidePending(tideTask, 40)}, state: State{PendingSince: tideT0.Add(-2 * sec), BatchGrewAt: tideT0.Add(-2 * sec), BatchQueued: 40},
			want: 2, code: CodeAtMax, launch: tideOD.Name()},
	})
}

func TestClusterAutoscalerDecide(t *testing.T) {
	elastic := capacity.Elastic(0, 30)
	cc := peerConfig(t, ClusterAutoscaler, elastic, []capacity.Offering{tideOD})
	big := capacity.Offering{Type: "c16", Kind: capacity.OnDemand, PricePerHour: 0.70,
		Resources: capacity.Resources{MilliCPU: 16000, Memory: 64 * ttGi}}
	gpuTask := capacity.Resources{MilliCPU: 3000, Memory: 16 * ttGi, GPUs: 1}
	sec, minute := time.Second, time.Minute
	runPeerCases(t, []peerCase{
		{name: "the loop runs every 10 s", cfg: cc, pending: []capacity.Pending{tidePending(tideTask, 4)},
			state: State{LastLoop: tideT0.Add(-4 * sec)}, want: 0, code: CodeSteady, words: "next loop", recheck: tideT0.Add(6 * sec)},
		{name: "scale-up by the group that fits", cfg: cc, pending: []capacity.Pending{tidePending(tideTask, 8)},
			want: 2, code: CodeScaleUp, launch: tideOD.Name(),
			wantState: func(t *testing.T, st State) {
				if !st.LastScaleUp.Equal(tideT0) || !st.LastLoop.Equal(tideT0) {
					t.Errorf("state %+v", st)
				}
			}},
		{name: "least waste: the small group wastes less", cfg: peerConfig(t, ClusterAutoscaler, elastic, []capacity.Offering{big, tideOD}),
			pending: []capacity.Pending{tidePending(tideTask, 4)}, want: 1, code: CodeScaleUp, launch: tideOD.Name()},
		{name: "only the group whose template fits", cfg: peerConfig(t, ClusterAutoscaler, elastic, []capacity.Offering{tideOD, tideGPU}),
			pending: []capacity.Pending{tidePending(gpuTask, 9)}, want: 2, code: CodeScaleUp, launch: tideGPU.Name()},
		{name: "nothing fits any group", cfg: cc, pending: []capacity.Pending{tidePending(gpuTask, 1)}, want: 0, code: CodeSteady, words: "no node group"},
		{name: "nodes in flight count", cfg: cc, desired: 2, pending: []capacity.Pending{tidePending(tideTask, 8)},
			want: 2, code: CodeSteady, words: "already requested"},
		{name: "an empty node goes after 10 min unneeded", cfg: cc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(10*minute))}, want: 1, code: CodeScaleDown, words: "unneeded for 600s"},
		{name: "an empty node 9 min unneeded stays", cfg: cc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(9*minute))}, want: 2, code: CodeSteady, recheck: tideT0.Add(minute)},
		{name: "no scale-down for 10 min after a scale-up", cfg: cc, desired: 2, state: State{LastScaleUp: tideT0.Add(-4 * minute)},
			nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(time.Hour))}, want: 2, code: CodeSteady, recheck: tideT0.Add(6 * minute)},
		{name: "empty nodes go 10 at a time", cfg: cc, desired: 15, nodes: emptyNodes(15, time.Hour), want: 5, code: CodeScaleDown, words: "removing 10"},
		{name: "under 50 % use but the work may not move", cfg: cc, desired: 2,
			nodes: []capacity.Node{tideNode("a", 1), tideNode("b", 1)}, want: 2, code: CodeSteady, words: "2 nodes under 50% use"},
		{name: "min holds", cfg: peerConfig(t, ClusterAutoscaler, capacity.Elastic(1, 30), []capacity.Offering{tideOD}), desired: 1,
			nodes: emptyNodes(1, time.Hour), want: 1, code: CodeSteady},
		{name: "at max", cfg: peerConfig(t, ClusterAutoscaler, capacity.Elastic(0, 3), []capacity.Offering{tideOD}),
			pending: []capacity.Pending{tidePending(tideTask, 40)}, want: 3, code: CodeScaleUp, launch: tideOD.Name()},
	})
}

// TestPeersNeedOfferings: the peers buy offerings, so a pool without one
// is rejected, naming the field; consolidate_after must not be negative.
func TestPeersNeedOfferings(t *testing.T) {
	for _, name := range []string{Karpenter, ClusterAutoscaler} {
		cfg := Config{Policy: name, Nodes: capacity.Elastic(0, 3)}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "offerings") {
			t.Errorf("%s without offerings: %v", name, err)
		}
	}
	cfg := Config{Policy: Karpenter, Nodes: capacity.Elastic(0, 3), Offerings: []capacity.Offering{tideOD}, ConsolidateAfter: -time.Second}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "consolidate_after") {
		t.Errorf("negative consolidate_after: %v", err)
	}
}

// TestPeersArePure: the same input gives the same decision, and the input
// is not modified.
func TestPeersArePure(t *testing.T) {
	for _, name := range []string{Karpenter, ClusterAutoscaler} {
		p, err := New(peerConfig(t, name, capacity.Elastic(0, 30), []capacity.Offering{tideOD, tideSpot(0.1)}))
		if err != nil {
			t.Fatal(err)
		}
		in := Input{Now: tideT0, Desired: 3, State: State{LastLoop: tideT0.Add(-time.Minute)},
			Pressure: capacity.Pressure{Nodes: []capacity.Node{tideNode("a", 2), tideNode("b", 0, idleFor(time.Hour)), tideNode("c", 4)},
				Pending: []capacity.Pending{tidePending(tideTask, 6)}}}
		a, b := p.Decide(in), p.Decide(in)
		if a.Desired != b.Desired || a.Reason != b.Reason || a.State != b.State || !a.Recheck.Equal(b.Recheck) {
			t.Errorf("%s: two decisions differ: %+v / %+v", name, a, b)
		}
		if len(in.Pressure.Nodes[0].Running) != 3 || in.Pressure.Pending[0].Count != 6 {
			t.Errorf("%s modified its input", name)
		}
	}
}
