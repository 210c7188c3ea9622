package reconcile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// short writes actions without notes' messages, for comparisons.
func short(acts []Action) string {
	var parts []string
	for _, a := range acts {
		if n, ok := a.(Note); ok {
			parts = append(parts, "note "+n.Code)
			continue
		}
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ", ")
}

// TestReplaceLaunchesFirst: a replaced node stops counting toward the
// desired size, so its replacement is provisioned at once; the replaced
// node is drained only once the replacement joined, its drain is not
// aborted when it turns busy or when desired rises, and it is terminated
// after its drain.
func TestReplaceLaunchesFirst(t *testing.T) {
	now := time.Unix(0, 0)
	p, err := Restore(Config{Nodes: capacity.Fixed(3)}, View{Desired: 3, Current: []NodeID{0, 1, 2}, Busy: []NodeID{1}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ev   Event
		want string
	}{
		{Replace{ID: 1, Reason: "drift"}, "note replacing, provision 3"},
		{Replace{ID: 1, Reason: "drift"}, ""}, // repeated: nothing new
		{Provisioned{IDs: []NodeID{3}}, ""},
		{Tick{}, ""}, // the replacement boots: node 1 stays
		{NodeJoined{ID: 3}, "drain 1"},
		{NodeBusy{ID: 1, Busy: true}, ""}, // never aborted
		{DesiredChanged{Desired: 3}, ""},
		{DrainComplete{ID: 1}, "terminate 1"},
		{Tick{}, ""},
	}
	for i, s := range steps {
		if got := short(p.Step(now, s.ev)); got != s.want {
			t.Fatalf("step %d (%s): actions %q, want %q\n%s", i, s.ev, got, s.want, p.Describe())
		}
	}
	if got := fmt.Sprint(p.Current()); got != "[0 2 3]" {
		t.Fatalf("current %s, want [0 2 3]", got)
	}
}

// TestReplaceTable covers the other paths of a Replace.
func TestReplaceTable(t *testing.T) {
	now := time.Unix(0, 0)
	tests := []struct {
		name  string
		nodes capacity.NodeSpec
		view  View
		evs   []Event
		want  string // actions of the last event
	}{
		{"not joined", capacity.Elastic(0, 4), View{Desired: 1, Pending: []NodeID{0}}, []Event{Replace{ID: 0, Reason: "repair"}}, "note ignored"},
		{"already draining", capacity.Elastic(0, 4), View{Desired: 0, Current: []NodeID{0}, Draining: []NodeID{0}},
			[]Event{Replace{ID: 0, Reason: "repair"}}, "note ignored"},
		{"more nodes than desired: drained at once", capacity.Elastic(0, 4), View{Desired: 1, Current: []NodeID{0, 1}, Busy: []NodeID{1}},
			[]Event{Replace{ID: 0, Reason: "expired"}}, "note replacing, drain 0"},
		{"desired falls while the replacement boots: drained", capacity.Elastic(0, 4), View{Desired: 2, Current: []NodeID{0, 1}},
			[]Event{Replace{ID: 1, Reason: "drift"}, Provisioned{IDs: []NodeID{2}}, DesiredChanged{Desired: 1}}, "drain 1"},
		{"lost while replaced: terminated, the replacement stays", capacity.Fixed(2), View{Desired: 2, Current: []NodeID{0, 1}},
			[]Event{Replace{ID: 1, Reason: "repair"}, Provisioned{IDs: []NodeID{2}}, NodeLost{ID: 1}}, "note node-lost, terminate 1"},
		{"two at once, one replacement each", capacity.Fixed(3), View{Desired: 3, Current: []NodeID{0, 1, 2}},
			[]Event{Replace{ID: 0, Reason: "drift"}, Provisioned{IDs: []NodeID{3}}, Replace{ID: 2, Reason: "drift"}}, "note replacing, provision 4"},
		{"scale-down never takes a replaced node as a victim", capacity.Elastic(0, 4), View{Desired: 3, Current: []NodeID{0, 1, 2}},
			[]Event{Replace{ID: 2, Reason: "drift"}, Provisioned{IDs: []NodeID{3}}, NodeJoined{ID: 3}, DrainComplete{ID: 2}, DesiredChanged{Desired: 2}}, "drain 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Restore(Config{Nodes: tc.nodes}, tc.view)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for _, ev := range tc.evs {
				got = short(p.Step(now, ev))
			}
			if got != tc.want {
				t.Fatalf("last actions %q, want %q\n%s", got, tc.want, p.Describe())
			}
			if _, err := Restore(Config{Nodes: tc.nodes}, p.View()); err != nil {
				t.Fatalf("the view does not restore: %v", err)
			}
		})
	}
}
