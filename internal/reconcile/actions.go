package reconcile

import (
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Action is an output of Pool.Step for the driver to carry out, in order. The
// set is closed: only the types declared in this package implement it.
type Action interface {
	fmt.Stringer
	isAction()
}

// Provision asks the provider to create one machine per id. At most one
// Provision is outstanding at a time; the driver answers it with exactly one
// Provisioned or ProvisionFailed.
type Provision struct {
	IDs []NodeID
	// Launch says which offerings the new nodes should be, applied to IDs
	// in order (the policy's purchase); ids past its counts, or all of
	// them when it is empty, take the driver's default offering.
	Launch []capacity.Launch
}

// Drain stops dispatch to a node and lets its work finish; the driver answers
// with DrainComplete once the node runs nothing.
type Drain struct {
	ID NodeID
}

// AbortDrain puts a draining node back in rotation. A DrainComplete for it
// that was already on its way is ignored.
type AbortDrain struct {
	ID NodeID
}

// Terminate destroys a node's machine (fire-and-forget, idempotent). It
// follows a DrainComplete or a NodeLost of the node. The driver must resolve
// the id to its machine before carrying out a later Provision, which may reuse
// the ordinal.
type Terminate struct {
	ID NodeID
}

// Mark records deletion marks (seed 001's deletion-timestamp taints) on nodes
// chosen for removal once the scale-down delay has passed since At.
type Mark struct {
	IDs []NodeID
	At  time.Time
}

// Unmark removes deletion marks: demand returned, or the node became busy.
type Unmark struct {
	IDs []NodeID
}

// Note tells a person about a non-decision: a clamp, a refusal, a blocked
// drain, a failure and when it is retried. Code is stable for tools; Message
// is for people.
type Note struct {
	Code, Message string
}

// Note codes.
const (
	// NoteAtMax: a desired count above max was clamped to max.
	NoteAtMax = "at-max"
	// NoteBelowMin: a desired count below min was refused (clamped to min).
	NoteBelowMin = "below-min"
	// NoteClamped: new bounds moved the desired count.
	NoteClamped = "clamped"
	// NoteBoundsRejected: a BoundsChanged carried an invalid spec.
	NoteBoundsRejected = "bounds-rejected"
	// NoteDrainBlocked: scale-down wants to remove nodes it may not (busy or
	// protected); repeated only when the blocking set changes.
	NoteDrainBlocked = "drain-blocked"
	// NoteDrainAborted: drains were aborted (desired rose, or a draining node
	// became busy).
	NoteDrainAborted = "drain-aborted"
	// NoteProvisionFailed: a provision call failed; the next tick retries.
	NoteProvisionFailed = "provision-failed"
	// NoteProvisionShort: a provision call created fewer machines than asked.
	NoteProvisionShort = "provision-short"
	// NoteNodeLost: a node was lost and its machine is terminated.
	NoteNodeLost = "node-lost"
	// NoteAdopted: the pool adopted machines (restart, or an unannounced join).
	NoteAdopted = "adopted"
	// NoteReplacing: a node is being replaced (Replace): a node is
	// launched in its place before it is drained.
	NoteReplacing = "replacing"
	// NoteIgnored: an event did not match the pool's state and changed nothing.
	NoteIgnored = "ignored"
)

func (Provision) isAction()  {}
func (Drain) isAction()      {}
func (AbortDrain) isAction() {}
func (Terminate) isAction()  {}
func (Mark) isAction()       {}
func (Unmark) isAction()     {}
func (Note) isAction()       {}

// String formats the action for logs and transcripts.
func (a Provision) String() string {
	if len(a.Launch) == 0 {
		return "provision " + formatIDs(a.IDs)
	}
	return "provision " + formatIDs(a.IDs) + " as " + FormatLaunch(a.Launch)
}

// String formats the action for logs and transcripts.
func (a Drain) String() string { return fmt.Sprintf("drain %d", a.ID) }

// String formats the action for logs and transcripts.
func (a AbortDrain) String() string { return fmt.Sprintf("abort-drain %d", a.ID) }

// String formats the action for logs and transcripts.
func (a Terminate) String() string { return fmt.Sprintf("terminate %d", a.ID) }

// String formats the action for logs and transcripts.
func (a Mark) String() string {
	return fmt.Sprintf("mark %s at %s", formatIDs(a.IDs), a.At.UTC().Format(time.RFC3339))
}

// String formats the action for logs and transcripts.
func (a Unmark) String() string { return "unmark " + formatIDs(a.IDs) }

// String formats the action for logs and transcripts.
func (a Note) String() string { return "note " + a.Code + ": " + a.Message }
