// Package shardctl is the driver of one fleet shard (BigFleet §6, tier 2):
// it owns a fleet.Shard, feeds it the capacity needs of the clusters
// assigned to the shard and what its providers report, runs its decision
// cycles on a Clock ticker, and carries out the actions through
// provider.Provider, fenced with (shard id, epoch, sequence). It is the
// impure half of internal/fleet, whose doc describes the loop it follows.
//
// # Ownership and fencing
//
// A shard has one controller at a time. Start takes the shard's ownership
// key in etcd on a lease (etcdstate.AcquireShard); the key's create revision
// is the controller's epoch, higher than every earlier holder's. Every
// provider call carries provider.Fence{Controller: "s<id>", Epoch, Seq}, and
// every etcd write of the controller is guarded by its ownership key still
// having that revision. A controller that a provider refuses with
// StaleFenceError, or that finds the shard held by another, is deposed: it
// stops acting for good (ErrDeposed). The provider pool is the shard's own
// ("fleet-s<id>" by default), so fences of different shards never meet.
//
// # One cycle
//
//		List the pool ──► Observe ──► retry calls due ──► directives ──► Decide(needs) ──► act ──► report
//
//	  - Machines the provider lists are observed into the shard; a machine
//	    with a call still to make keeps the shard's view until the call is
//	    made (the shard is ahead of the provider). Machines in the pool the
//	    shard does not know are deleted.
//	  - ActCreate: the machine record (machine → shard assignment) is written
//	    to etcd first, then Create with a fresh id ("<pool>-e<epoch>-<n>": ids
//	    are never reused). Refusals (capacity, quota, invalid, conflict) return
//	    the slot to Speculative, which backs its offering off.
//	  - ActConfigure: the cluster's bootstrap blob (Operator.Bootstrap), then
//	    Configure. ActDrain: Operator.Cordon, then Drain once the grace the
//	    engine chose has passed. ActRelease: Delete until NotFound, then the
//	    slot is quota again and the record goes.
//	  - Transient errors are retried on later cycles with the same call
//	    (idempotent by machine id and target state).
//
// # Directives
//
// The coordinator writes its directives to etcd while it leads
// (etcdstate.Directive). A donor shard acts on a pending directive naming it
// (Export of Idle machines or Speculative slots, or Preempt: drain first),
// and records what it gave up together with its reduced quota in one fenced
// transaction; Idle machines it gave up are deleted afterwards (a machine
// belongs to the pool it was created in), and arrive at the recipient as
// Speculative slots. The recipient records the directive done with its
// raised quota, then imports the slots. Each step is a transaction guarded by
// the shard's epoch and the directive's revision, so it happens once, whoever
// leads the coordinators and however often either shard restarts. A shard
// refuses a directive it sees for the first time with an id (term, sequence)
// below one it has already seen: only a deposed coordinator could have
// written it.
//
// # Static stability
//
// When etcd (or the coordinator) is unreachable, the shard keeps deciding
// with what it has: clusters keep their machines, Idle machines are still
// configured and drained in-shard, needs still arrive over the shard's own
// API. Only new provisioning pauses: a Create needs its machine record in
// etcd first. If the lease is lost, the controller keeps acting on its
// machines with its old epoch (providers refuse it if a successor has taken
// over) and takes the shard again when etcd is back, adopting its machines
// afresh under a new epoch.
//
// # Adoption
//
// Start (and a retake after a lost lease) rebuilds the shard from etcd and
// the providers: every machine listed in the pool with a record is adopted
// in its observed state; listed machines without a record, or doomed by a
// directive that has gone past pending, are deleted; records without a
// machine are removed; the rest of the quota becomes Speculative slots.
// Clusters' needs are kept in memory and fed again after a rebuild.
package shardctl
