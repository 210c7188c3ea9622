// Package coord is the fleet's coordinator (BigFleet §6, tier 1) over etcd.
// It makes no provisioning decisions: it owns the fleet's shared state and
// answers the shortfalls shards escalate.
//
// # State in etcd (internal/fleet/etcdstate)
//
// The fleet configuration (catalog of offerings, provider registry, shards
// and their initial quota), each shard's current quota, shard membership and
// liveness (ownership keys on the shard controllers' leases), the permanent
// cluster → shard map, the machine → shard records, the shards' reports and
// the coordinator's directives.
//
// # Leadership and fencing
//
// Any number of replicas run; they campaign in a concurrency.Election and
// one leads. The leader's term is its election key's create revision (higher
// than every earlier leader's); each directive it issues carries (term,
// sequence), and is written in a transaction guarded by the leader's key
// still being there with that revision: a deposed leader, even one that has
// not noticed yet, can write nothing (ErrNotLeader). Shards refuse a
// directive whose (term, sequence) is lower than one they have already seen.
//
// # A planning cycle (leader only)
//
//	reports (summaries, escalated shortfalls) ─┐
//	directives in etcd ────────────────────────┼─► fleet.PlanShortfalls ─► new directives (pending)
//	                                           │
//	in flight: a directive not done, or done but newer than its recipient's
//	last report, still counts: its shortfall is not answered twice, and its
//	donor's spare capacity is not offered twice
//
// Directives are carried out by the shards themselves (internal/fleet/shardctl):
// the donor gives up capacity and records it, the recipient takes it and
// records it done. So when the leader dies, nothing it started is lost (the
// directive is in etcd and the shards go on with it) or repeated (the new
// leader counts it as in flight, and each step is a guarded transaction of
// one shard). Done directives are deleted once their recipient has reported
// after them.
//
// # First contact
//
// Any replica, leader or not, assigns a cluster on first contact
// (etcdstate.AssignCluster): the live shard with the fewest clusters, in a
// transaction that creates the assignment only if none exists, so concurrent
// first contacts agree. The Fleet API's SendNeeds assigns and forwards the
// needs to the cluster's shard.
package coord
