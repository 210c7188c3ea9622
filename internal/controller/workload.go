package controller

import (
	"context"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/reconcile"
)

// Node names one node of a pool for the Workload: its reconciler ordinal and
// the machine that serves it.
type Node struct {
	Pool string
	ID   reconcile.NodeID
	// MachineID is the provider's machine id.
	MachineID string
	// Host is the machine's address; empty while it has none.
	Host string
}

// String formats the node as "pool/ordinal (machine)".
func (n Node) String() string {
	return n.Pool + "/" + strconv.Itoa(int(n.ID)) + " (" + n.MachineID + ")"
}

// Workload is the scheduler side of a pool as the controller needs it: stop
// and resume dispatch to a node, and tell whether a node still runs
// non-daemon work. A drain is Cordon, then waiting until Busy is false, then
// the provider's Drain; an aborted drain is Uncordon. All methods must be
// idempotent and safe for concurrent use; an error is reported as an event
// and the call is retried on the next tick.
type Workload interface {
	// Cordon stops dispatching new work to the node.
	Cordon(ctx context.Context, n Node) error
	// Uncordon resumes dispatching work to the node.
	Uncordon(ctx context.Context, n Node) error
	// Busy reports whether the node runs non-daemon work. The controller
	// asks it for the joined nodes it adopts after a restart, and for each
	// cordoned node until it is empty.
	Busy(ctx context.Context, n Node) (bool, error)
}

// Forgetter is an optional extension of a Workload: Forget is called once a
// node's machine is gone for good (terminated after its drain, or lost), so
// the scheduler side can drop the node at once and rerun its work instead of
// waiting for the node to time out. Errors are reported as events and not
// retried.
type Forgetter interface {
	Forget(ctx context.Context, n Node) error
}

// DeletionObserver is an optional extension of a Workload: MachineDeleted
// is called once the provider has confirmed that a machine of the pool is
// deleted, that is when its Delete answered NotFound (the end state of
// Delete in the provider contract: the machine, and every process it ran,
// no longer exists). Nothing weaker calls it: not a Drain, not a Delete
// accepted but still under way, not a machine that failed or was lost
// (Forgetter.Forget comes then, before the Delete). The scheduler side may
// then drop any precaution it took against work still running there (the
// head releases the fence hold of instances requeued from the machine's
// worker). Called at least once per deleted machine (again if a restarted
// controller finds the delete intent still journaled), so it must be
// idempotent; n.ID is -1 for an orphan and n.Host is empty. Errors are
// reported as events and not retried: the precaution then simply runs its
// course.
type DeletionObserver interface {
	MachineDeleted(ctx context.Context, n Node) error
}

// MarkReader is an optional extension of a Workload whose nodes carry the
// reconciler's deletion marks where every controller sees them (Kubernetes
// mode writes them as deletion-candidate taints with their time). A
// controller taking the pool over with a scale-down delay asks it for the
// mark of each joined, idle node it adopts, so a failover or restart keeps
// the marks and their delay continues instead of starting again. A zero
// time means no mark; an error is reported as an event and the node is
// adopted unmarked.
type MarkReader interface {
	MarkedAt(ctx context.Context, n Node) (time.Time, error)
}

// NodeInfo is what an Inspector knows of one node's agent.
type NodeInfo struct {
	// Registered is set once the node's agent registered with its cluster
	// (a worker of the machine's name with the head; its Node in
	// Kubernetes).
	Registered bool
	// Unhealthy says why the registered agent is unhealthy now ("" when it
	// is healthy): a worker OFFLINE, a Node NotReady or carrying a
	// condition the pool names.
	Unhealthy string
	// Blocked says why the node's work may not be disrupted now ("" when
	// it may): non-restartable work, or work labelled
	// tide.dev/do-not-disrupt. Drift and expiry wait for it.
	Blocked string
	// Used is what the node's non-daemon work requests, and WorkHours the
	// work a restart of it would lose, in node hours (each instance's run
	// time × its share of the node): the replace move (a cheaper offering
	// that hosts the work) weighs them.
	Used      capacity.Resources
	WorkHours float64
}

// Inspector is an optional extension of a Workload: what the cluster knows
// of the pool's nodes, asked once per tick for every node the controller
// tracks. It makes registration (RequireRegistration), repair and the
// do-not-disrupt rules of drift and expiry possible. The answer is keyed by
// machine id; a node left out is not registered. An error is reported as an
// event and the tick goes on without it: no node joins, none is judged.
type Inspector interface {
	Inspect(ctx context.Context, nodes []Node) (map[string]NodeInfo, error)
}

// Evacuator is an optional extension of a Workload: Evacuate moves the
// restartable work off a cordoned node that is being replaced (drift,
// expiry), so that the drain does not wait for it to end; work that may
// not move is left to end by itself. Errors are reported as events and the
// call is retried on the next tick while the drain waits.
type Evacuator interface {
	Evacuate(ctx context.Context, n Node) error
}

// IdleWorkload is the Workload of a pool that runs nothing the controller
// must wait for (the simulator's pools, benchmarks): dispatch changes are
// no-ops and every node is empty.
type IdleWorkload struct{}

var _ Workload = IdleWorkload{}

// Cordon does nothing.
func (IdleWorkload) Cordon(context.Context, Node) error { return nil }

// Uncordon does nothing.
func (IdleWorkload) Uncordon(context.Context, Node) error { return nil }

// Busy reports false.
func (IdleWorkload) Busy(context.Context, Node) (bool, error) { return false, nil }
