package reconcile

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// NodeID is a node's ordinal in its pool. New provisioning takes the lowest
// free ordinals (rank reuse); ordinal 0 is the pool's first node.
type NodeID int

// Event is an input to Pool.Step. The set is closed: only the types declared
// in this package implement it.
type Event interface {
	fmt.Stringer
	isEvent()
}

// DesiredChanged says the policy wants Desired nodes. A value outside
// [Nodes.Min, Nodes.Max] is clamped, with a Note.
type DesiredChanged struct {
	Desired int
	// Reason is the policy's reason, kept for Describe.
	Reason string
	// Launch, when set, is the purchase behind the new count: the next
	// provisions ask for these offerings, in order (it replaces any plan
	// left from an earlier DesiredChanged).
	Launch []capacity.Launch
}

// BoundsChanged resizes the pool (a new min/desired/max). An invalid spec is
// refused with a Note; a valid one clamps the desired count into its bounds.
type BoundsChanged struct {
	Nodes capacity.NodeSpec
}

// Tick is the periodic reconcile tick. It retries provisioning after a
// failure, heals lost nodes and lets deletion marks come due.
type Tick struct{}

// Provisioned is the result of the one outstanding Provision action: the
// subset of the requested ids that the provider created. It may hold fewer
// ids than requested, or none.
type Provisioned struct {
	IDs []NodeID
}

// ProvisionFailed is the error of the one outstanding Provision action: none
// of its ids were created.
type ProvisionFailed struct {
	Err string
}

// NodeJoined says a node finished booting and serves work.
type NodeJoined struct {
	ID NodeID
}

// NodeLost says a node is gone or unusable (spot interruption, crash, failed
// health check). Its machine is terminated so that nothing leaks.
type NodeLost struct {
	ID NodeID
}

// NodeBusy says whether a joined node runs non-daemon work. Busy nodes are
// never drained, marked or terminated by scale-down.
type NodeBusy struct {
	ID   NodeID
	Busy bool
}

// DrainComplete says a draining node stopped taking work and has none left.
// The pool answers with Terminate.
type DrainComplete struct {
	ID NodeID
}

// Adopt replaces the pool's view of its machines after a controller restart
// with what the provider and the scheduler report: joined nodes, nodes still
// booting, and the joined nodes that run non-daemon work. It forgets any
// provision call in flight and drains, and keeps only the deletion marks it
// carries; send it as the first event after New.
type Adopt struct {
	Current, Pending, Busy []NodeID
	// Marks are deletion marks that outlived the restart (ScaleDownDelay >
	// 0), e.g. read back from the cluster's deletion-candidate taints: the
	// delay continues from each mark's time instead of starting again. A
	// mark on a node that is not current, is busy or protected, or has no
	// time is dropped (the planner marks again when it has to).
	Marks map[NodeID]time.Time
	// Launch, when set, is the purchase for the nodes the adopted pool is
	// short of (a decision that arrived before the restart finished).
	Launch []capacity.Launch
}

// Replace says a joined node is to be replaced: repaired (unhealthy too
// long), drifted (its pool's settings changed since it was made), expired
// (older than the pool allows) or swapped for a cheaper offering. The pool
// launches a node in its place first: a node being replaced no longer
// counts toward the desired size, so the shortfall is provisioned like any
// other; once the joined nodes kept make the desired size without it, it
// is drained (Drain; the drain of a replaced node is never aborted, not
// even when it becomes busy) and terminated after its DrainComplete.
// Reason names the cause for notes and the driver ("repair", "drift",
// "expired", "replace").
type Replace struct {
	ID     NodeID
	Reason string
}

func (Replace) isEvent()         {}
func (DesiredChanged) isEvent()  {}
func (BoundsChanged) isEvent()   {}
func (Tick) isEvent()            {}
func (Provisioned) isEvent()     {}
func (ProvisionFailed) isEvent() {}
func (NodeJoined) isEvent()      {}
func (NodeLost) isEvent()        {}
func (NodeBusy) isEvent()        {}
func (DrainComplete) isEvent()   {}
func (Adopt) isEvent()           {}

// String formats the event for logs and transcripts.
func (e DesiredChanged) String() string {
	s := fmt.Sprintf("desired %d", e.Desired)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if len(e.Launch) > 0 {
		s += " buying " + FormatLaunch(e.Launch)
	}
	return s
}

// FormatLaunch writes launches as "2 x g8/on-demand, 1 x g2/spot".
func FormatLaunch(ls []capacity.Launch) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(l.Count))
		b.WriteString(" x ")
		b.WriteString(l.Offering)
	}
	return b.String()
}

// String formats the event for logs and transcripts.
func (e BoundsChanged) String() string { return "bounds " + e.Nodes.String() }

// String formats the event for logs and transcripts.
func (Tick) String() string { return "tick" }

// String formats the event for logs and transcripts.
func (e Provisioned) String() string { return "provisioned " + formatIDs(e.IDs) }

// String formats the event for logs and transcripts.
func (e ProvisionFailed) String() string { return "provision failed: " + e.Err }

// String formats the event for logs and transcripts.
func (e NodeJoined) String() string { return fmt.Sprintf("joined %d", e.ID) }

// String formats the event for logs and transcripts.
func (e NodeLost) String() string { return fmt.Sprintf("lost %d", e.ID) }

// String formats the event for logs and transcripts.
func (e NodeBusy) String() string {
	if e.Busy {
		return fmt.Sprintf("busy %d", e.ID)
	}
	return fmt.Sprintf("idle %d", e.ID)
}

// String formats the event for logs and transcripts.
func (e Replace) String() string { return fmt.Sprintf("replace %d (%s)", e.ID, e.Reason) }

// String formats the event for logs and transcripts.
func (e DrainComplete) String() string { return fmt.Sprintf("drain complete %d", e.ID) }

// String formats the event for logs and transcripts.
func (e Adopt) String() string {
	return fmt.Sprintf("adopt current %s pending %s busy %s", formatIDs(e.Current), formatIDs(e.Pending), formatIDs(e.Busy))
}

// formatIDs writes ids separated by spaces, or "none".
func formatIDs(ids []NodeID) string {
	if len(ids) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	return b.String()
}
