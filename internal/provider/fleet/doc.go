// Package fleet is the provider of a pool whose machines come from the fleet
// tier (BigFleet, seed 003): the pool's policy still decides how many
// machines it wants; the fleet decides which ones.
//
// The pool controller's Create of machine X is a claim: the provider rolls
// its claims up into the cluster's ClusterCapacityNeeds (one need per
// profile, at the pool's priority) and sends them to the fleet on every
// change and every Period. The provider is also the cluster's
// ClusterOperator: when the fleet's shard configures one of its machines F
// into the cluster it asks, through the answer to SendNeeds, for F's
// bootstrap blob; the provider binds F to its oldest waiting claim X and
// answers, in its next needs, with a blob scoped to X alone (Joiner: for a
// tide head, a credential that registers only the worker X). F then joins
// the cluster as X, and X is Configured once the shard lists F as
// configured.
//
//	Create(X) ──► claim, need+1 ──► shard picks F (Idle first) ──► request "bootstrap F"
//	     ──► bind F→X, blob for X ──► shard Configures F ──► F listed configured ──► X Configured
//	Drain(X) ──► need-1, release F ──► shard drains F at once ──► F gone ──► X Idle
//	Delete(X) ──► release F (if bound) ──► F gone ──► NotFound
//	shard cordons F (preemption) ──► cluster cordons X, moves restartable work ──► F drained after grace ──► X gone
//
// A cluster's pool never holds a machine it did not ask for: a machine the
// shard lists for the cluster that no claim holds is released at once, and
// a bootstrap request with no waiting claim is refused. A machine leaves the
// cluster only when the pool drains or deletes its claim, or by the fleet's
// priority preemption: the shard's cordon request reaches the cluster
// (Joiner.Preempt: no new work there, restartable work moves off at once,
// the rest runs until the shard drains the machine after the grace its
// priority gap sets), and the claim is gone once the machine has left.
//
// Static stability: the claims and their bindings are kept in a file under
// the pool's state directory, so a restarted head adopts its machines; when
// the fleet cannot be reached, configured machines stay Configured and keep
// their work, and only new claims wait.
package fleet
