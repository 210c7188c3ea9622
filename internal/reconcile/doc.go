// Package reconcile is the per-pool reconciler of seed 000 (Skyward's elastic
// pools) as a deterministic state machine: events in, actions out. It does no
// I/O, reads no clock and keeps no goroutines; time is Step's argument.
//
// A driver (internal/controller, or the simulator at virtual speed) owns one
// Pool per node pool, feeds it Events (the policy's DesiredChanged, a periodic
// Tick, provider results, node lifecycle reports) and carries out the returned
// Actions in order (Provision, Drain, AbortDrain, Terminate, Mark, Unmark),
// reporting their outcomes back as Events. Notes explain non-decisions to
// people: clamps, refusals, blocked drains, failures and when they are retried.
//
// Restore builds a Pool in a stated View (and Pool.View returns it), so a
// what-if tool (internal/decide, tide decide) runs Step of this same state
// machine on a pool described by a snapshot, step after step.
//
// # Model
//
// Nodes are ordinals (NodeID). The pool tracks
//
//	current    joined nodes (draining ones included)
//	pending    provisioned, not yet joined
//	in flight  the ids of the one outstanding Provision
//	draining   nodes told to Drain, awaiting DrainComplete: joined ones, and
//	           booting ones a scale-down cancelled
//	busy       joined nodes running non-daemon work
//	marks      deletion marks with their times (ScaleDownDelay > 0)
//
// and effective = |current| + |pending| + |in flight|. New nodes take the
// lowest free ordinals, so a lost node 0 is replaced by a new node 0.
//
// A DesiredChanged may carry the policy's purchase (capacity.Launch: which
// offerings the new nodes should be). The pool keeps it as a plan and hands
// its front to each Provision, in id order; the launches of ids a provision
// did not create go back to the front of the plan, a new purchase replaces
// it and a lower desired count drops it. Without a purchase, Provision
// carries none and the driver picks the offering.
//
// # States
//
// The state is derived from the sets, so it can never disagree with them:
// draining while any node drains, scaling_up while a provision call is in
// flight, watching otherwise.
//
//	              desired > effective, no call in flight, no backoff
//	     +--------------------------------------------------------+
//	     |                                                        v
//	+----------+  Provisioned: enough, or none (backoff)   +------------+
//	| watching | <---------------------------------------- | scaling_up | <-+ Provisioned, still
//	+----------+  ProvisionFailed (backoff)                +------------+ --+ short: ask for the rest
//	   |    ^                                                    ^
//	   |    | last DrainComplete -> Terminate,                   | every drain aborted
//	   |    | or every drain aborted (AbortDrain)                | and desired > effective
//	   v    |                                                    |
//	+----------+                                                 |
//	| draining | ------------------------------------------------+
//	+----------+ <-+ more excess: Drain more idle nodes;
//	        |      | desired rose a little: AbortDrain some
//	        +------+
//
// watching -> draining when the joined and booting nodes kept exceed desired
// and no provision call is in flight. With ScaleDownDelay = 0 the excess goes
// at once, booting nodes first (highest id first): a booting node is
// cancelled with a Drain, so the driver stops dispatch to it and waits for it
// to be empty like any other, and the excess ends before it joins instead of
// a tick or more after; joined idle nodes then drain down to desired. With
// ScaleDownDelay > 0 joined nodes are drained when their deletion marks come
// due (marks are set and removed while watching); booting nodes are not
// cancelled.
//
// A Replace takes a joined node out of every count (repair, drift, expiry):
// its replacement is provisioned like any shortfall, and the replaced node is
// drained once the joined nodes kept make desired without it; that drain is
// never aborted, not even by work reaching the node, and may overlap a
// provision. The protected first node is only replaced by a repair.
//
// Every event, not only Tick, re-runs the reconcile: abort drains that are no
// longer needed, scale down, scale up. A Tick additionally ends the backoff
// that follows a failed or empty provision, so retries happen once per tick
// and never on the step that reported the failure.
//
// # Guarantees
//
// These hold for every sequence of events (the randomized property test checks
// them on each step):
//
//   - No double provisioning (DESIGN invariant 4): at most one Provision is
//     outstanding; its ids count toward effective until the result arrives, and
//     booting nodes count until they join or are lost. A Provision never asks
//     for more than desired − effective nodes, and never for an id in use.
//   - Termination protection (invariant 3): a node known to run non-daemon
//     work never receives Drain, Mark or Terminate; a draining node that
//     becomes busy gets AbortDrain. The protected first node (node 0, with
//     ProtectFirstNode) is never drained or marked. Scale-down never takes the
//     joined, non-draining nodes below desired, and desired is never below min:
//     while any joined node drains, current − draining ≥ desired ≥ min; while
//     a booting node is cancelled, the joined and booting nodes kept are ≥
//     desired.
//   - Terminate follows a DrainComplete of a node this pool drained (and did
//     not un-drain), or a NodeLost of the node; nothing else terminates.
//   - Drains are abortable: when desired rises above the joined nodes kept,
//     just enough drains of joined nodes are aborted (lowest ids first, since
//     victims go highest id first); then cancelled booting nodes are put back
//     while the joined and booting nodes kept fall short; provisioning starts
//     only once none are left.
//   - Drain and provisioning never overlap, and scale-down waits while a
//     provision call is in flight.
//   - Deletion marks (seed 001): one planner action (deletion.Next) per step;
//     a marked node is drained only once its mark is ScaleDownDelay old, busy
//     nodes are never marked, and marks are removed when desired rises.
//   - desired stays within [Nodes.Min, Nodes.Max]; a request outside gets a
//     Note and is clamped; an invalid BoundsChanged is refused with a Note.
//   - An event that does not fit the state (a result without a call, a
//     DrainComplete for a node not draining, a report about an unknown node)
//     changes nothing but a Note, except a join of an unknown node, which is
//     adopted so no machine leaks.
//   - Step is deterministic: the same events at the same times give the same
//     actions and the same Describe output.
package reconcile
