package fleet

import (
	"fmt"
	"slices"
)

// ClusterID identifies a cluster fleet-wide. The coordinator assigns it on a
// cluster's first contact, together with the cluster's shard. 0 means "no
// cluster": an unbound machine has cluster 0.
type ClusterID uint32

// ProfileID is a profile's index in the Catalog: the machine class that needs
// ask for (e.g. "h100x8"). Offerings of several providers and capacity kinds
// provide the same profile.
type ProfileID uint16

// OfferingID is an offering's index in the Catalog.
type OfferingID uint16

// ProviderID is a provider's index in the Catalog.
type ProviderID uint16

// MachineID is a machine's slot in one shard's inventory. The driver maps it
// to the provider's machine id; a slot is reused only after its machine has
// left the shard (Action Export, Shard.Export).
type MachineID uint32

// ShardID identifies a shard; the coordinator uses it in summaries and
// directives.
type ShardID uint16

// String formats the cluster as "c<n>".
func (c ClusterID) String() string { return fmt.Sprintf("c%d", uint32(c)) }

// String formats the machine as "m<n>".
func (m MachineID) String() string { return fmt.Sprintf("m%d", uint32(m)) }

// String formats the shard as "s<n>".
func (s ShardID) String() string { return fmt.Sprintf("s%d", uint16(s)) }

// State is where a machine is in the lifecycle of BigFleet §5. The names are
// those of provider.State (internal/provider), which this pure package may
// not import: a driver converts with provider.State(s.String()) and
// ParseState(string(ps)).
type State uint8

// The machine states. The zero State is not a state: it marks a free slot.
const (
	// Speculative is a quota slot: no host, no cluster.
	Speculative State = iota + 1
	// Creating is hardware being acquired; the target is Idle.
	Creating
	// Idle is booted hardware with no cluster binding.
	Idle
	// Configuring is an Idle machine joining a cluster.
	Configuring
	// Configured is hardware joined to a cluster.
	Configured
	// Draining is a machine leaving its cluster; the target is Idle.
	Draining
	// Deleting is a machine being released; its slot returns to Speculative.
	Deleting
	// Failed is a machine whose transition did not finish; it is released.
	Failed
)

var stateNames = [...]string{"", "speculative", "creating", "idle", "configuring", "configured", "draining",
	"deleting", "failed"}

// States lists every state in lifecycle order.
var States = []State{Speculative, Creating, Idle, Configuring, Configured, Draining, Deleting, Failed}

// String returns the state's name, the same as provider.State's.
func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool { return s >= Speculative && s <= Failed }

// ParseState reads a state name as provider.State writes it.
func ParseState(name string) (State, error) {
	i := slices.Index(stateNames[:], name)
	if i <= 0 {
		return 0, fmt.Errorf("state: unknown state %q", name)
	}
	return State(i), nil
}

// checkBinding verifies the machine model's rules for one machine: a machine
// without a host has no cluster (host = nil ⇒ cluster = 0), and the stable
// states hold what they must. Errors name the field.
func checkBinding(st State, host bool, cluster ClusterID) error {
	if !st.Valid() {
		return fmt.Errorf("state: unknown state %d", uint8(st))
	}
	if !host && cluster != 0 {
		return fmt.Errorf("cluster: bound to %s without a host", cluster)
	}
	switch st {
	case Speculative, Creating:
		if host {
			return fmt.Errorf("host: a %s machine has no host", st)
		}
	case Idle:
		if !host {
			return fmt.Errorf("host: an idle machine has a host")
		}
		if cluster != 0 {
			return fmt.Errorf("cluster: an idle machine is bound to no cluster, got %s", cluster)
		}
	case Configuring, Configured, Draining:
		if !host || cluster == 0 {
			return fmt.Errorf("cluster: a %s machine needs a host and a cluster", st)
		}
	}
	return nil
}
