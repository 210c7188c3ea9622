package fleet

import (
	"fmt"
	"time"
)

// ActionKind says what an Action asks the driver to do.
type ActionKind uint8

// The action kinds.
const (
	// ActCreate: provider Create of Machine with Offering, to become Idle.
	// The machine is reserved for Cluster: once the driver reports it Idle,
	// the next Decide configures it (Create + bootstrap).
	ActCreate ActionKind = iota + 1
	// ActConfigure: bootstrap — ask the cluster operator for Cluster's
	// bootstrap blob, then provider Configure of Machine (Idle → Configured).
	ActConfigure
	// ActDrain: cordon Machine in Cluster, evict its work within Grace, then
	// provider Drain (Configured → Idle). For, when set, is the cluster that
	// will receive the machine (a transfer).
	ActDrain
	// ActRelease: provider Delete of Machine; its slot returns to
	// Speculative (quota) once the driver reports it gone.
	ActRelease
	// ActShortfall: send Shortfall to the coordinator (it was escalated,
	// or its count changed since it was).
	ActShortfall
	// ActExport: Machine, Idle and drained for the coordinator, has left
	// this shard; hand Exported to the shard named in the directive.
	ActExport
)

var actionNames = [...]string{"", "create", "configure", "drain", "release", "shortfall", "export"}

// String returns the kind's name.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k != 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Reason says why an action was taken.
type Reason uint8

// The reasons.
const (
	// ReasonNeed: a need in Phase 1 (or a machine arriving for it).
	ReasonNeed Reason = iota + 1
	// ReasonPreempt: Phase 2 victim of a higher-priority need.
	ReasonPreempt
	// ReasonSurplus: Phase 2 took a machine its cluster no longer needs.
	ReasonSurplus
	// ReasonReclaim: Phase 3, excess returned to Idle.
	ReasonReclaim
	// ReasonIdle: Phase 3, lazy release of an Idle machine.
	ReasonIdle
	// ReasonFailed: release of a Failed machine.
	ReasonFailed
	// ReasonEscalate: a shortfall for the coordinator.
	ReasonEscalate
	// ReasonCoordinator: a directive of the coordinator.
	ReasonCoordinator
)

var reasonNames = [...]string{"", "need", "preempt", "surplus", "reclaim", "idle", "failed", "escalate",
	"coordinator"}

// String returns the reason's name.
func (r Reason) String() string {
	if int(r) < len(reasonNames) && r != 0 {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Action is one thing for the driver to carry out. Fields not used by a kind
// are zero.
type Action struct {
	Kind   ActionKind
	Reason Reason
	// Machine is the shard slot acted on (all kinds but ActShortfall).
	Machine MachineID
	// Offering is the machine's offering.
	Offering OfferingID
	// Cluster: Create — the cluster the machine is meant for (informational:
	// a later cycle may give it to a higher priority before it joins);
	// Configure — the cluster it joins; Drain — the cluster it leaves.
	Cluster ClusterID
	// For (Drain) is the cluster meant to receive the drained machine
	// (informational, as for Create); 0 when it returns to Idle or leaves the
	// shard.
	For ClusterID
	// Grace (Drain) is how long the cluster's work gets to leave.
	Grace time.Duration
	// Gap (Drain, ReasonPreempt) is the priority gap that set Grace.
	Gap int64
	// Shortfall (ActShortfall) is the escalated shortfall.
	Shortfall Shortfall
	// Exported (ActExport) describes the machine for the receiving shard.
	Exported Exported
}

// String formats the action with numeric ids (Catalog.FormatAction uses names).
func (a Action) String() string { return formatAction(a, nil) }

// FormatAction formats a with the catalog's offering and profile names.
func (c *Catalog) FormatAction(a Action) string { return formatAction(a, c) }

func formatAction(a Action, c *Catalog) string {
	off := func(o OfferingID) string {
		if c != nil {
			return c.OfferingName(o)
		}
		return fmt.Sprintf("o%d", uint16(o))
	}
	switch a.Kind {
	case ActCreate:
		return fmt.Sprintf("create %s %s for %s", a.Machine, off(a.Offering), a.Cluster)
	case ActConfigure:
		return fmt.Sprintf("configure %s %s into %s (%s)", a.Machine, off(a.Offering), a.Cluster, a.Reason)
	case ActDrain:
		s := fmt.Sprintf("drain %s %s from %s grace=%s (%s", a.Machine, off(a.Offering), a.Cluster, a.Grace, a.Reason)
		if a.Reason == ReasonPreempt {
			s += fmt.Sprintf(", gap %d", a.Gap)
		}
		if a.For != 0 {
			s += ", for " + a.For.String()
		}
		return s + ")"
	case ActRelease:
		return fmt.Sprintf("release %s %s (%s)", a.Machine, off(a.Offering), a.Reason)
	case ActShortfall:
		return "shortfall " + a.Shortfall.format(c)
	case ActExport:
		return fmt.Sprintf("export %s %s %s rp=%g", a.Machine, off(a.Exported.Offering), a.Exported.State,
			a.Exported.ReclamationPenalty)
	}
	return a.Kind.String()
}

// Shortfall is demand a shard cannot meet from its own inventory (BigFleet
// §9): the unmet count of all needs sharing a profile, priority and topology
// constraint. Age counts the consecutive cycles it has lasted, from 1.
type Shortfall struct {
	Profile  ProfileID
	Priority int32
	Count    int32
	Age      int32
	// InterruptionPenalty is the highest among the needs it sums.
	InterruptionPenalty float64
	// Topology is set when the needs are topology-constrained: only this
	// shard can serve them.
	Topology bool
}

func (s Shortfall) format(c *Catalog) string {
	name := fmt.Sprintf("p%d", uint16(s.Profile))
	if c != nil {
		name = c.ProfileName(s.Profile)
	}
	out := fmt.Sprintf("%s prio=%d count=%d age=%d pen=%g", name, s.Priority, s.Count, s.Age, s.InterruptionPenalty)
	if s.Topology {
		out += " topology"
	}
	return out
}

// String formats the shortfall with a numeric profile id.
func (s Shortfall) String() string { return s.format(nil) }

// Exported is a machine leaving one shard for another (coordinator
// reassignment): what the receiving shard's Import needs. The driver carries
// the provider's machine id alongside.
type Exported struct {
	Offering           OfferingID
	ReclamationPenalty float64
	// State is Idle or Speculative.
	State State
}
