package provider

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// State is where a machine is in its lifecycle (see the package doc).
type State string

// The machine states of BigFleet §5.
const (
	// Speculative is a quota slot: no host, no cluster.
	Speculative State = "speculative"
	// Creating is hardware being acquired and booted; the target is Idle.
	Creating State = "creating"
	// Idle is booted hardware with no cluster binding.
	Idle State = "idle"
	// Configuring is an Idle machine joining a cluster; the target is Configured.
	Configuring State = "configuring"
	// Configured is hardware joined to a cluster.
	Configured State = "configured"
	// Draining is a machine leaving its cluster; the target is Idle.
	Draining State = "draining"
	// Deleting is a machine being released; the target is gone.
	Deleting State = "deleting"
	// Failed is a machine whose transition did not finish in time, or whose
	// host was lost while it was Idle or Configured (a local worker process
	// that died). It keeps whatever it holds (and costs money) until it is
	// deleted.
	Failed State = "failed"
)

// States lists every state in lifecycle order.
var States = []State{Speculative, Creating, Idle, Configuring, Configured, Draining, Deleting, Failed}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Stable reports whether s is Speculative, Idle or Configured: a state a
// machine stays in until someone asks for a change.
func (s State) Stable() bool { return s == Speculative || s == Idle || s == Configured }

// Transitional reports whether s is Creating, Configuring, Draining or
// Deleting: the machine is moving toward a target on its own.
func (s State) Transitional() bool {
	return s == Creating || s == Configuring || s == Draining || s == Deleting
}

// transitions is the model's edge table. Disappearance (delete finished, spot
// reclaim, hardware loss) is not a state and is allowed from any state.
var transitions = map[State][]State{
	Speculative: {Creating, Deleting},
	Creating:    {Idle, Failed, Deleting},
	Idle:        {Configuring, Failed, Deleting},
	Configuring: {Configured, Draining, Failed, Deleting},
	Configured:  {Draining, Failed, Deleting},
	Draining:    {Idle, Failed, Deleting},
	Deleting:    {},
	Failed:      {Deleting},
}

// CanTransition reports whether the model allows a machine to go from one
// state to another in a single step.
func CanTransition(from, to State) bool { return slices.Contains(transitions[from], to) }

// Reachable reports whether a machine observed in state from may later be
// observed in state to (from itself included): the reflexive, transitive
// closure of CanTransition. Observers polling with Get or List may miss
// intermediate states, so this is the check to apply between two polls.
func Reachable(from, to State) bool {
	if from == to {
		return true
	}
	seen := map[State]bool{from: true}
	queue := []State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range transitions[s] {
			if n == to {
				return true
			}
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return false
}

// Machine is a provider's view of one machine.
type Machine struct {
	// ID is chosen by the caller of Create and unique within the provider.
	ID string `json:"id"`
	// Pool is the pool the machine was created in and belongs to.
	Pool string `json:"pool"`
	// Offering is the name (Offering.Name) of what the machine is.
	Offering string `json:"offering"`
	// State is where the machine is in its lifecycle.
	State State `json:"state"`
	// Host is the machine's address; empty while it has no hardware.
	Host string `json:"host,omitempty"`
	// Cluster is the cluster the machine is bound to (joining, joined or
	// leaving); empty when unbound. Never set while Host is empty.
	Cluster string `json:"cluster,omitempty"`
	// Bootstrap is the blob given to the Configure that bound the machine;
	// nil when unbound.
	Bootstrap []byte `json:"bootstrap,omitempty"`
	// Labels are the labels given to Create.
	Labels map[string]string `json:"labels,omitempty"`
	// CreatedAt is when the provider accepted the Create.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the machine entered its current state.
	UpdatedAt time.Time `json:"updated_at"`
	// ReclaimAt, when not zero, is when the provider will take the machine
	// back (a spot interruption notice). The machine disappears then.
	ReclaimAt time.Time `json:"reclaim_at,omitzero"`
	// Reason says why the machine is Failed; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// Clone returns a deep copy of m.
func (m Machine) Clone() Machine {
	m.Bootstrap = slices.Clone(m.Bootstrap)
	m.Labels = maps.Clone(m.Labels)
	return m
}

// Check verifies the model's invariants on one observation of m: the state is
// known, a machine without a host has no cluster binding, and each stable
// state holds what it must (Speculative: no host; Idle: host, no cluster;
// Configured: host and cluster). Errors name the field.
func (m *Machine) Check() error {
	var errs []error
	if m.ID == "" {
		errs = append(errs, errors.New("id: must be set"))
	}
	if !m.State.Valid() {
		errs = append(errs, fmt.Errorf("state: unknown state %q", m.State))
	}
	if m.Host == "" && m.Cluster != "" {
		errs = append(errs, fmt.Errorf("cluster: machine %q is bound to %q without a host", m.ID, m.Cluster))
	}
	switch m.State {
	case Speculative:
		if m.Host != "" {
			errs = append(errs, fmt.Errorf("host: speculative machine %q has host %q", m.ID, m.Host))
		}
	case Idle:
		if m.Host == "" {
			errs = append(errs, fmt.Errorf("host: idle machine %q has no host", m.ID))
		}
		if m.Cluster != "" {
			errs = append(errs, fmt.Errorf("cluster: idle machine %q is bound to %q", m.ID, m.Cluster))
		}
	case Configuring, Configured:
		if m.Host == "" || m.Cluster == "" {
			errs = append(errs, fmt.Errorf("cluster: %s machine %q needs a host and a cluster (host %q, cluster %q)",
				m.State, m.ID, m.Host, m.Cluster))
		}
	}
	if m.State == Failed && m.Reason == "" {
		errs = append(errs, fmt.Errorf("reason: failed machine %q gives no reason", m.ID))
	}
	return errors.Join(errs...)
}

// Filter selects machines in List. The zero Filter selects every machine.
type Filter struct {
	// Pool, when set, keeps only the machines of that pool.
	Pool string
	// States, when not empty, keeps only the machines in one of them.
	States []State
}

// Matches reports whether m passes the filter.
func (f Filter) Matches(m *Machine) bool {
	if f.Pool != "" && m.Pool != f.Pool {
		return false
	}
	return len(f.States) == 0 || slices.Contains(f.States, m.State)
}
