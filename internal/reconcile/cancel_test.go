package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// TestScaleDownCancelsBootingNodesFirst is issue 16's provider-fault
// sequence (TestProviderFaultsSim, 30 % of calls failing, churn, seed 3)
// and its neighbours. Before the fix, a desired count that dropped while
// machines were booting drained only joined nodes; each booting machine
// then joined as one too many and was drained and deleted after it: join,
// drain, delete took a 4th tick after the fault cleared. Now a scale-down
// cancels the excess booting nodes first, with a Drain (the driver cordons,
// waits for no work, unbinds, then terminates): never a running node's
// work, never a second provision. Booting nodes are cancelled only once the
// excess was found by cancelAfterTicks Ticks in a row: a dip of the desired
// count shorter than that (a policy's own spares still booting) keeps them.
func TestScaleDownCancelsBootingNodesFirst(t *testing.T) {
	type step struct {
		ev   Event
		want string // the actions, notes left out, "; "-joined ("" for none)
	}
	tests := []struct {
		name    string
		protect bool
		view    View
		steps   []step
		// current, pending and draining at the end.
		current, pending, draining string
	}{
		{
			// The failing seed: desired 3 → 6 while 3, 4, 6 drain and 5, 7
			// boot. Before: abort 3 4 6, then 5 joins (drain 6), 7 joins
			// (drain 7), and the last delete is a 4th tick.
			name: "seed 3 churn: desired rises over draining and booting nodes",
			view: View{Desired: 3, Current: []NodeID{0, 1, 2, 3, 4, 6}, Pending: []NodeID{5, 7}, Draining: []NodeID{3, 4, 6}},
			steps: []step{
				{DesiredChanged{Desired: 6}, "abort-drain 3; abort-drain 4; abort-drain 6"},
				{Tick{}, ""}, // the excess has not yet outlived a tick
				{Tick{}, "drain 7; drain 5"},
				{DrainComplete{ID: 7}, "terminate 7"},
				{NodeJoined{ID: 5}, ""}, // joined while cancelled: still draining
				{DrainComplete{ID: 5}, "terminate 5"},
				{Tick{}, ""},
			},
			current: "0 1 2 3 4 6", pending: "none", draining: "none",
		},
		{
			name: "desired drops while launches boot: the booting nodes go, not the joined ones",
			view: View{Desired: 6, Current: []NodeID{0, 1, 2, 3}, Pending: []NodeID{4, 5}},
			steps: []step{
				{DesiredChanged{Desired: 4}, ""},
				{Tick{}, ""},
				{Tick{}, "drain 5; drain 4"},
				{DrainComplete{ID: 4}, "terminate 4"},
				{DrainComplete{ID: 5}, "terminate 5"},
			},
			current: "0 1 2 3", pending: "none", draining: "none",
		},
		{
			name: "excess beyond the booting nodes: joined idle ones drain down to desired",
			view: View{Desired: 7, Current: []NodeID{0, 1, 2, 3, 4}, Pending: []NodeID{5, 6}, Busy: []NodeID{4}},
			steps: []step{
				{DesiredChanged{Desired: 2}, "drain 3; drain 2; drain 1"},
				{Tick{}, ""},
				{Tick{}, "drain 6; drain 5"},
			},
			current: "0 1 2 3 4", pending: "5 6", draining: "1 2 3 5 6",
		},
		{
			name: "a dip shorter than the hold: the booting nodes stay",
			view: View{Desired: 6, Current: []NodeID{0, 1, 2, 3}, Pending: []NodeID{4, 5}},
			steps: []step{
				{DesiredChanged{Desired: 4}, ""},
				{Tick{}, ""},
				{DesiredChanged{Desired: 6}, ""}, // excess gone: the count restarts
				{DesiredChanged{Desired: 4}, ""},
				{Tick{}, ""},
				{DesiredChanged{Desired: 6}, ""},
				{NodeJoined{ID: 4}, ""},
			},
			current: "0 1 2 3 4", pending: "5", draining: "none",
		},
		{
			name: "desired rises again: cancelled launches are put back, nothing provisioned",
			view: View{Desired: 4, Current: []NodeID{0, 1, 2, 3}, Pending: []NodeID{4, 5}, Draining: []NodeID{4, 5}},
			steps: []step{
				{DesiredChanged{Desired: 5}, "abort-drain 4"},
				{DesiredChanged{Desired: 6}, "abort-drain 5"},
				{DesiredChanged{Desired: 7}, "provision 6"},
			},
			current: "0 1 2 3", pending: "4 5", draining: "none",
		},
		{
			name: "a cancelled booting node is lost: terminated once, not replaced",
			view: View{Desired: 4, Current: []NodeID{0, 1, 2, 3}, Pending: []NodeID{4}, Draining: []NodeID{4}},
			steps: []step{
				{NodeLost{ID: 4}, "terminate 4"},
				{Tick{}, ""},
			},
			current: "0 1 2 3", pending: "none", draining: "none",
		},
		{
			name: "work reached a cancelled node once it joined: the cancel is aborted",
			view: View{Desired: 4, Current: []NodeID{0, 1, 2, 3}, Pending: []NodeID{4}, Draining: []NodeID{4}},
			steps: []step{
				{NodeJoined{ID: 4}, ""},
				{NodeBusy{ID: 4, Busy: true}, "abort-drain 4; drain 3"},
			},
			current: "0 1 2 3 4", pending: "none", draining: "3",
		},
		{
			name: "a provision call in flight: nothing is cancelled until its result",
			view: View{Desired: 6, Current: []NodeID{0, 1, 2, 3}, Asked: []NodeID{4, 5}},
			steps: []step{
				{DesiredChanged{Desired: 4}, ""},
				{Provisioned{IDs: []NodeID{4, 5}}, ""},
				{Tick{}, ""},
				{Tick{}, "drain 5; drain 4"},
			},
			current: "0 1 2 3", pending: "4 5", draining: "4 5",
		},
		{
			name:    "the protected first node is never cancelled",
			protect: true,
			view:    View{Desired: 3, Current: []NodeID{1, 2}, Pending: []NodeID{0}},
			steps: []step{
				// Joined nodes never drain below desired: wait for node 0.
				{DesiredChanged{Desired: 2}, ""},
				{NodeJoined{ID: 0}, "drain 2"},
			},
			current: "0 1 2", pending: "none", draining: "2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Restore(Config{Nodes: capacity.Elastic(0, 8), ProtectFirstNode: tt.protect}, tt.view)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			for i, s := range tt.steps {
				now = now.Add(time.Minute)
				var got []string
				for _, a := range p.Step(now, s.ev) {
					if _, note := a.(Note); !note {
						got = append(got, a.String())
					}
				}
				if g := strings.Join(got, "; "); g != s.want {
					t.Fatalf("step %d (%s): actions %q, want %q\n%s", i, s.ev, g, s.want, p.Describe())
				}
			}
			if g := formatIDs(p.Current()); g != tt.current {
				t.Errorf("current %s, want %s", g, tt.current)
			}
			if g := formatIDs(p.Pending()); g != tt.pending {
				t.Errorf("pending %s, want %s", g, tt.pending)
			}
			if g := formatIDs(p.Draining()); g != tt.draining {
				t.Errorf("draining %s, want %s", g, tt.draining)
			}
		})
	}
}
