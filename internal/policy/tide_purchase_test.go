package policy

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// TestTideCountsAreArithmetic: the tide policy decides a backlog of 10^9
// instances in 10 shapes without expanding it: the purchase is a handful
// of node groups, the decision allocates about as much as for 10^4, and
// desired is the pool's max (the purchase is cut there) or the exact need.
func TestTideCountsAreArithmetic(t *testing.T) {
	var offs []capacity.Offering
	for i := range 20 {
		cores := int64(2 << (i % 6))
		offs = append(offs, capacity.Offering{Type: fmt.Sprintf("t%d", i), Resources: capacity.Resources{MilliCPU: cores * 1000,
			Memory: cores * int64(2+i%3*2) * ttGi}, PricePerHour: float64(cores) / 10 * (1 + float64(i%5)/20)})
	}
	pending := func(n int) []capacity.Pending {
		var out []capacity.Pending
		for i := range 10 {
			out = append(out, capacity.Pending{Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) * ttGi}, Count: n})
		}
		return out
	}
	for _, max := range []int{1000, 9_000_000} {
		cfg := tideConfig(t, capacity.Elastic(0, max), offs)
		p := NewTide(cfg)
		bytes := func(n int) (Decision, uint64) {
			in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: pending(n)}}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			d := p.Decide(in)
			runtime.ReadMemStats(&after)
			return d, after.TotalAlloc - before.TotalAlloc
		}
		d, big := bytes(100_000_000)
		_, small := bytes(1000)
		t.Logf("max %d: desired %d, %d launches, %d KB for 10^9 instances, %d KB for 10^4", max, d.Desired, len(d.Launch), big>>10, small>>10)
		if d.Desired != max && max < 1_000_000 {
			t.Errorf("desired %d, want the max %d", d.Desired, max)
		}
		if big > 10<<20 {
			t.Errorf("%d bytes allocated for 10^9 instances, want under 10 MB", big)
		}
		total := 0
		for _, l := range d.Launch {
			total += l.Count
		}
		if total != d.Desired {
			t.Errorf("launches for %d nodes, desired %d", total, d.Desired)
		}
	}
}

// TestTideCountsOnlyBootingNodesThatFit: nodes on their way absorb the
// backlog only as far as they can host it. A c4 replacement booting (Input.Booting)
// holds no 8-GPU task, so the task gets a g8 node now rather than a boot later,
// when the c4 has joined and still cannot run it; a g8 booting does hold it;
// without Input.Booting, or with an offering the policy does not know, the
// policy counts the nodes asked for, as before. What a booting machine
// provides is read from the policy's own offerings: a slot that Kubernetes
// mode adds to them (TestTideBootingNodesProvideTheirSlots) counts.
func TestTideCountsOnlyBootingNodesThatFit(t *testing.T) {
	gpuTask := capacity.Resources{MilliCPU: 3000, Memory: 16 * ttGi, GPUs: 8}
	offs := []capacity.Offering{tideOD, tideGPU}
	cfg := tideConfig(t, capacity.Elastic(0, 20), offs)
	tests := []struct {
		name    string
		booting []string
		desired int
		want    int
		launch  string // the offering of the launch, "" for none
	}{
		{"booting unknown: the node asked for counts", nil, 3, 3, ""},
		{"a c4 booting cannot host it", []string{tideOD.Name()}, 3, 4, tideGPU.Name()},
		{"a g8 booting hosts it", []string{tideGPU.Name()}, 3, 3, ""},
		{"nothing booting, one asked for and not launched", []string{}, 3, 3, ""},
		{"two c4 booting, one g8 not launched yet", []string{tideOD.Name(), tideOD.Name()}, 5, 5, ""},
		{"a c4 and a g8 booting", []string{tideOD.Name(), tideGPU.Name()}, 4, 4, ""},
		{"an offering the policy does not know", []string{"x1/on-demand"}, 3, 3, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Now: tideT0, State: waited, Desired: tc.desired, Booting: tc.booting,
				Pressure: capacity.Pressure{Nodes: tideFullNodes(2), Pending: []capacity.Pending{tidePending(gpuTask, 1)}}}
			d := NewTide(cfg).Decide(in)
			if d.Desired != tc.want {
				t.Fatalf("desired %d, want %d (%s)", d.Desired, tc.want, d.Reason)
			}
			got := ""
			if len(d.Launch) > 0 {
				got = d.Launch[0].Offering
				if len(d.Launch) != 1 || d.Launch[0].Count != tc.want-tc.desired {
					t.Errorf("launch %+v, want %d × %s", d.Launch, tc.want-tc.desired, tc.launch)
				}
			}
			if got != tc.launch {
				t.Errorf("launch %q, want %q", got, tc.launch)
			}
		})
	}
}

// TestTideBootingNodesProvideTheirSlots: Kubernetes mode adds placement slots
// to a pool's offerings (an extended resource per node, e.g. one pod of an
// anti-affinity group per hostname); a booting machine provides the slots of
// the policy's offering of its name, so a pod that needs one waits for it
// rather than buying a node more on every decision.
func TestTideBootingNodesProvideTheirSlots(t *testing.T) {
	slotted := tideOD
	slotted.Resources = slotted.Resources.Clone()
	slotted.Resources.Extended = map[string]int64{"slot.tide.dev/spread": 1}
	cfg := tideConfig(t, capacity.Elastic(0, 20), []capacity.Offering{slotted, tideGPU})
	pod := tideTask.Clone()
	pod.Extended = map[string]int64{"slot.tide.dev/spread": 1}
	in := Input{Now: tideT0, State: waited, Desired: 3, Booting: []string{slotted.Name()},
		Pressure: capacity.Pressure{Nodes: tideFullNodes(2), Pending: []capacity.Pending{tidePending(pod, 1)}}}
	if d := NewTide(cfg).Decide(in); d.Desired != 3 {
		t.Fatalf("desired %d, want 3: the booting node holds the pod and its slot (%s)", d.Desired, d.Reason)
	}
	in.Pressure.Pending = []capacity.Pending{tidePending(pod, 2)} // two slots: the booting node holds one
	if d := NewTide(cfg).Decide(in); d.Desired != 4 {
		t.Fatalf("desired %d, want 4: one node more for the second slot (%s)", d.Desired, d.Reason)
	}
}
