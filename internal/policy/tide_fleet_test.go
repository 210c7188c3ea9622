package policy

import (
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// TestTideBuysOnTheFleetsOfferings: a purchase keeps to the offerings of the
// cheapest fleet for all the pool's work when that costs at most 25 % more
// than the backlog's own cheapest purchase. A c16 holds 17 tasks, a c4 4
// (beside the daemon); 12 tasks alone are cheapest on 3 c4 ($0.60/h), but
// with the 4 running on a c4 the whole 16 are cheapest on one c16.
func TestTideBuysOnTheFleetsOfferings(t *testing.T) {
	c16 := func(price float64) capacity.Offering {
		return capacity.Offering{Type: "c16", Kind: capacity.OnDemand, PricePerHour: price,
			Resources: capacity.Resources{MilliCPU: 16000, Memory: 64 * ttGi}}
	}
	full := []capacity.Node{tideNode("a", 4)}
	gang := tidePending(tideTask, 12)
	gang.Gang = "g"
	tests := []struct {
		name    string
		offs    []capacity.Offering
		nodes   []capacity.Node
		pending capacity.Pending
		want    capacity.Launch // the one launch
		shaped  bool
	}{
		{"the fleet's offering, 17 % dearer for the step", []capacity.Offering{tideOD, c16(0.70)}, full, tidePending(tideTask, 12),
			capacity.Launch{Offering: "c16/on-demand", Count: 1}, true},
		{"the fleet's offering 30 % dearer: the step's own", []capacity.Offering{tideOD, c16(0.78)}, full, tidePending(tideTask, 12),
			capacity.Launch{Offering: "c4/on-demand", Count: 3, Fallback: []string{"c16/on-demand"}}, false},
		{"nothing running: the fleet is the step's", []capacity.Offering{tideOD, c16(0.70)}, nil, tidePending(tideTask, 12),
			capacity.Launch{Offering: "c4/on-demand", Count: 3, Fallback: []string{"c16/on-demand"}}, false},
		{"a gang keeps its own purchase", []capacity.Offering{tideOD, c16(0.70)}, full, gang,
			capacity.Launch{Offering: "c4/on-demand", Count: 3, Fallback: []string{"c16/on-demand"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewTide(tideConfig(t, capacity.Elastic(0, 20), tt.offs))
			d := p.Decide(Input{Now: tideT0, Desired: len(tt.nodes), State: waited, Pressure: capacity.Pressure{
				Nodes: tt.nodes, Pending: []capacity.Pending{tt.pending}}})
			if len(d.Launch) != 1 || d.Launch[0].Offering != tt.want.Offering || d.Launch[0].Count != tt.want.Count {
				t.Fatalf("launch %+v (%s), want %+v", d.Launch, d.Reason, tt.want)
			}
			if want := len(tt.nodes) + tt.want.Count; d.Desired != want || d.Tide.FleetShaped != tt.shaped {
				t.Errorf("desired %d, fleet-shaped %v; want %d, %v", d.Desired, d.Tide.FleetShaped, want, tt.shaped)
			}
		})
	}
}

// TestRunningGroups: the work running on the listed nodes, daemons left
// out, counted per shape (an entry standing for several instances counts
// as many; extended resources tell shapes apart, a zero amount does not).
func TestRunningGroups(t *testing.T) {
	fpga := capacity.Resources{MilliCPU: 900, Memory: 2 * ttGi, Extended: map[string]int64{"fpga": 1}}
	nodes := []capacity.Node{
		tideNode("a", 1),
		{ID: "e", Running: []capacity.Instance{{Requests: capacity.Resources{MilliCPU: 900, Memory: 2 * ttGi, Extended: map[string]int64{"slot": 0}}}}},
		{ID: "b", Running: []capacity.Instance{ttDaemon, {Requests: tideTask.Scale(3), Count: 3}, {Requests: fpga}}},
		tideNode("c", 4), // not listed: marked, say
		{ID: "d", Running: []capacity.Instance{{Requests: fpga}, {Requests: fpga.Scale(2), Count: 2},
			{Requests: capacity.Resources{MilliCPU: 900, Memory: 2 * ttGi, Extended: map[string]int64{"fpga": 1, "slot": 0}}}}},
	}
	got := runningGroups(nodes, []int{0, 1, 2, 4})
	if len(got) != 2 || !got[0].Requests.Equal(tideTask) || got[0].Count != 5 || !got[1].Requests.Equal(fpga) || got[1].Count != 5 {
		t.Fatalf("groups %+v, want 5 tasks and 5 fpga instances", got)
	}
}

// TestTideFleetShapedGivesWayToBooting: when the machines booting cannot
// hold the backlog (a tiny offering boots; the tasks need more), the
// purchase for what they leave replaces the fleet-shaped one, and the
// decision no longer says it kept to the fleet.
func TestTideFleetShapedGivesWayToBooting(t *testing.T) {
	c16 := capacity.Offering{Type: "c16", Kind: capacity.OnDemand, PricePerHour: 0.70,
		Resources: capacity.Resources{MilliCPU: 16000, Memory: 64 * ttGi}}
	tiny := capacity.Offering{Type: "tiny", Kind: capacity.OnDemand, PricePerHour: 0.01,
		Resources: capacity.Resources{MilliCPU: 500, Memory: ttGi}}
	p := NewTide(tideConfig(t, capacity.Elastic(0, 20), []capacity.Offering{tideOD, c16, tiny}))
	in := Input{Now: tideT0, Desired: 1, State: waited, Pressure: capacity.Pressure{
		Nodes: []capacity.Node{tideNode("a", 4)}, Pending: []capacity.Pending{tidePending(tideTask, 12)}}}
	if d := p.Decide(in); !d.Tide.FleetShaped || d.Desired != 2 {
		t.Fatalf("nothing booting: desired %d, fleet-shaped %v; want 2, true (%s)", d.Desired, d.Tide.FleetShaped, d.Reason)
	}
	in.Desired, in.Booting = 2, []string{tiny.Name()}
	d := p.Decide(in)
	if len(d.Launch) != 1 || d.Launch[0].Offering != tideOD.Name() || d.Launch[0].Count != 3 || d.Desired != 5 {
		t.Fatalf("launch %+v, desired %d (%s); want 3 × %s on top of the 2 asked for", d.Launch, d.Desired, d.Reason, tideOD.Name())
	}
	if d.Tide.FleetShaped {
		t.Error("the purchase for what the booting tiny machine cannot hold says it kept to the fleet")
	}
}
