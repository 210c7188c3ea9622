package controller

import (
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/reconcile"
)

// Event is one thing a pool's controller decided, declined to do, or ran
// into: "a pool that does not scale must say why". Every reconciler action
// and note, every machine milestone and every provider, journal or workload
// error becomes one.
type Event struct {
	Time time.Time
	Pool string
	// Type is TypeNormal or TypeWarning.
	Type string
	// Reason is a stable kebab-case code for tools (one of the Reason*
	// constants, or a reconcile Note code).
	Reason string
	// Message says it in words for people.
	Message string
}

// String formats the event as one log line.
func (e Event) String() string {
	return fmt.Sprintf("%s %s %s %s: %s", e.Time.UTC().Format(time.RFC3339), e.Pool, e.Type, e.Reason, e.Message)
}

// Event types.
const (
	// TypeNormal is a decision or milestone.
	TypeNormal = "Normal"
	// TypeWarning is a failure, a refusal or something that keeps the pool
	// from its desired size.
	TypeWarning = "Warning"
)

// Event reasons of the controller. The reconciler's Note codes
// (reconcile.NoteAtMax, ...) are used as reasons too.
const (
	// ReasonStarted: the controller took the pool over (epoch raised) and
	// adopted what it found.
	ReasonStarted = "started"
	// ReasonDeposed: a provider refused a call with a stale fence; this
	// controller stops acting.
	ReasonDeposed = "deposed"
	// ReasonDesiredChanged: the reconciler's desired count changed.
	ReasonDesiredChanged = "desired-changed"
	// ReasonProvision, ReasonDrain, ReasonAbortDrain, ReasonTerminate,
	// ReasonMark and ReasonUnmark: the reconciler's actions.
	ReasonProvision  = "provision"
	ReasonDrain      = "drain"
	ReasonAbortDrain = "abort-drain"
	ReasonTerminate  = "terminate"
	ReasonMark       = "mark"
	ReasonUnmark     = "unmark"
	// ReasonLaunched: a Create was accepted.
	ReasonLaunched = "launched"
	// ReasonConfiguring: an Idle machine was handed the bootstrap blob.
	ReasonConfiguring = "configuring"
	// ReasonJoined: a machine reached Configured; its node joined.
	ReasonJoined = "joined"
	// ReasonDrained: a drained node's machine left its cluster.
	ReasonDrained = "drained"
	// ReasonDeleted: a machine's Delete ended in NotFound; its record is gone.
	ReasonDeleted = "deleted"
	// ReasonOrphan: a machine of the pool that no journal knows is deleted.
	ReasonOrphan = "orphan"
	// ReasonOrphanSeen: a machine of the pool that no journal knows was
	// seen; it is deleted once Config.OrphanGrace has passed.
	ReasonOrphanSeen = "orphan-seen"
	// ReasonNodeLost: a machine disappeared, failed or is being deleted by
	// someone else.
	ReasonNodeLost = "node-lost"
	// ReasonInterrupted: a spot interruption notice was given.
	ReasonInterrupted = "interrupted"
	// ReasonLaunchTimeout: a machine did not reach Configured in time.
	ReasonLaunchTimeout = "launch-timeout"
	// ReasonRegistrationTimeout: a Configured machine's agent did not
	// register in time; the machine is replaced.
	ReasonRegistrationTimeout = "registration-timeout"
	// ReasonOfferingBackedOff: an offering timed out repeatedly (launch or
	// registration) and is skipped for a while.
	ReasonOfferingBackedOff = "offering-backed-off"
	// ReasonUnhealthy and ReasonRecovered: a joined node became unhealthy,
	// or healthy again.
	ReasonUnhealthy = "unhealthy"
	ReasonRecovered = "recovered"
	// ReasonRepair, ReasonDrift, ReasonExpired, ReasonReplace (a cheaper
	// offering): a node is replaced (lifecycle's reasons);
	// ReasonRepairBreaker: repair is held.
	ReasonRepair        = "repair"
	ReasonDrift         = "drift"
	ReasonExpired       = "expired"
	ReasonReplace       = "replace"
	ReasonRepairBreaker = "repair-breaker"
	// ReasonDisruptionWait: a node due for a replacement waits (budget,
	// work that may not be disrupted, repair_after not reached).
	ReasonDisruptionWait = "disruption-waits"
	// ReasonInspectError: the Workload's Inspect failed.
	ReasonInspectError = "inspect-error"
	// ReasonInsufficientCapacity: an offering is out of capacity and is
	// skipped for a while.
	ReasonInsufficientCapacity = "insufficient-capacity"
	// ReasonQuotaExceeded: a quota refused a Create.
	ReasonQuotaExceeded = "quota-exceeded"
	// ReasonOfferingRefused: the provider called a Create invalid; the
	// offering is skipped for a while.
	ReasonOfferingRefused = "offering-refused"
	// ReasonNoOffering: every offering is being skipped.
	ReasonNoOffering = "no-offering"
	// ReasonProviderError: a provider call failed; it is retried.
	ReasonProviderError = "provider-error"
	// ReasonConflict: a call did not fit the machine's state; it is re-read.
	ReasonConflict = "conflict"
	// ReasonGaveUp: a machine's call failed MaxRetries times; the machine
	// is replaced.
	ReasonGaveUp = "gave-up"
	// ReasonJournalError: the journal refused a write; the step is retried.
	ReasonJournalError = "journal-error"
	// ReasonWorkloadError: a Workload call failed. A Busy call is asked
	// again at the next tick (the node counts as busy meanwhile); a failed
	// Forget or MachineDeleted is not retried: the head's liveness check
	// then requeues the worker's work when it goes OFFLINE, and a fence
	// hold runs its course.
	ReasonWorkloadError = "workload-error"
)

// EventSink receives a controller's events, in order, on the goroutine that
// drives the controller. Emit must not block for long and must not call back
// into the controller's Tick, Sync or Run.
type EventSink interface {
	Emit(Event)
}

// EventFunc adapts a function to EventSink.
type EventFunc func(Event)

// Emit calls f(e).
func (f EventFunc) Emit(e Event) { f(e) }

// noteType is the event type of a reconciler Note.
func noteType(code string) string {
	switch code {
	case reconcile.NoteProvisionFailed, reconcile.NoteProvisionShort, reconcile.NoteDrainBlocked,
		reconcile.NoteBoundsRejected, reconcile.NoteNodeLost, reconcile.NoteIgnored, reconcile.NoteAtMax:
		return TypeWarning
	}
	return TypeNormal
}
