package provider

import (
	"slices"
	"strings"
	"testing"
)

func TestStateClasses(t *testing.T) {
	for _, s := range States {
		if !s.Valid() {
			t.Errorf("%s: not valid", s)
		}
		if s.Stable() && s.Transitional() {
			t.Errorf("%s: both stable and transitional", s)
		}
		if s != Failed && !s.Stable() && !s.Transitional() {
			t.Errorf("%s: neither stable nor transitional", s)
		}
	}
	if State("booting").Valid() {
		t.Error(`"booting" is valid`)
	}
	var stable []State
	for _, s := range States {
		if s.Stable() {
			stable = append(stable, s)
		}
	}
	if want := []State{Speculative, Idle, Configured}; !slices.Equal(stable, want) {
		t.Errorf("stable states = %v, want %v (BigFleet §5)", stable, want)
	}
}

func TestTransitions(t *testing.T) {
	tests := []struct {
		from, to State
		step     bool // CanTransition
		reach    bool // Reachable
	}{
		{Speculative, Creating, true, true},
		{Creating, Idle, true, true},
		{Idle, Configuring, true, true},
		{Configuring, Configured, true, true},
		{Configured, Draining, true, true},
		{Draining, Idle, true, true},
		{Creating, Failed, true, true},
		{Failed, Deleting, true, true},
		{Configured, Deleting, true, true},
		// Idle is the hub: a configured machine reaches another cluster only through Drain → Idle.
		{Configured, Configuring, false, true},
		{Configured, Idle, false, true},
		{Creating, Configured, false, true},
		// Nothing goes back to a quota slot, and nothing leaves Deleting but disappearance.
		{Idle, Speculative, false, false},
		{Deleting, Idle, false, false},
		{Deleting, Failed, false, false},
		{Failed, Idle, false, false},
		{Idle, Creating, false, false},
		{Idle, Idle, false, true},
	}
	for _, tt := range tests {
		if got := CanTransition(tt.from, tt.to); got != tt.step {
			t.Errorf("CanTransition(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.step)
		}
		if got := Reachable(tt.from, tt.to); got != tt.reach {
			t.Errorf("Reachable(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.reach)
		}
	}
	// Every state can be released.
	for _, s := range States {
		if s != Deleting && !CanTransition(s, Deleting) {
			t.Errorf("%s cannot go to deleting", s)
		}
	}
}

func TestMachineCheck(t *testing.T) {
	tests := []struct {
		name string
		m    Machine
		want string // substring of the error; empty for valid
	}{
		{"speculative", Machine{ID: "a", State: Speculative}, ""},
		{"creating without host", Machine{ID: "a", State: Creating}, ""},
		{"idle", Machine{ID: "a", State: Idle, Host: "10.0.0.1"}, ""},
		{"configured", Machine{ID: "a", State: Configured, Host: "h", Cluster: "c"}, ""},
		{"draining", Machine{ID: "a", State: Draining, Host: "h", Cluster: "c"}, ""},
		{"failed with reason", Machine{ID: "a", State: Failed, Reason: "boot timeout"}, ""},
		{"no host but bound", Machine{ID: "a", State: Creating, Cluster: "c"}, "without a host"},
		{"speculative with host", Machine{ID: "a", State: Speculative, Host: "h"}, "host: speculative"},
		{"idle without host", Machine{ID: "a", State: Idle}, "host: idle"},
		{"idle but bound", Machine{ID: "a", State: Idle, Host: "h", Cluster: "c"}, "cluster: idle"},
		{"configured unbound", Machine{ID: "a", State: Configured, Host: "h"}, "needs a host and a cluster"},
		{"failed without reason", Machine{ID: "a", State: Failed}, "reason:"},
		{"unknown state", Machine{ID: "a", State: "zombie"}, "state: unknown"},
		{"no id", Machine{State: Idle, Host: "h"}, "id: must be set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestFilterMatches(t *testing.T) {
	m := Machine{ID: "a", Pool: "gpu", State: Idle}
	tests := []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Pool: "gpu"}, true},
		{Filter{Pool: "cpu"}, false},
		{Filter{States: []State{Creating, Idle}}, true},
		{Filter{States: []State{Configured}}, false},
		{Filter{Pool: "gpu", States: []State{Configured}}, false},
	}
	for _, tt := range tests {
		if got := tt.f.Matches(&m); got != tt.want {
			t.Errorf("%+v.Matches = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestMachineCloneIsDeep(t *testing.T) {
	m := Machine{ID: "a", Labels: map[string]string{"k": "v"}, Bootstrap: []byte("blob")}
	c := m.Clone()
	c.Labels["k"] = "changed"
	c.Bootstrap[0] = 'X'
	if m.Labels["k"] != "v" || string(m.Bootstrap) != "blob" {
		t.Fatalf("clone shares memory with the original: %+v", m)
	}
}
