// Package fleet is the fleet tier's decision core (BigFleet, seed 003): a
// shard's compact inventory of machines and its declarative decision engine,
// plus the coordinator's pure logic for the shortfalls shards cannot meet.
// It does no I/O, reads no clock (time is an argument) and starts no
// goroutines; a shard controller (a later step, over etcd and gRPC) drives it.
//
// # Model
//
// A Catalog interns profiles (the machine classes needs ask for), providers
// and offerings (capacity.Offering: price, interruption probability and
// penalty, capacity kind) as 16-bit ids shared by every shard. Clusters are
// 32-bit ids (0 = none). A cluster sends ClusterCapacityNeeds: per profile a
// count, a priority, an interruption penalty, a drain time and an optional
// topology constraint. A machine is in one of the states of BigFleet §5, with
// the names of provider.State:
//
//	                Create               Configure (bootstrap)
//	Speculative ──► Creating ──► Idle ──► Configuring ──► Configured
//	 (quota slot)               (host)  ◄── Draining ◄──── (host, cluster)
//	      ▲                        │         Drain
//	      └──── Deleting ◄─────────┘ Release (provider Delete)
//	any ──► Failed ──Release──► Deleting;  a lost machine returns to Speculative
//
// Invariant: host = nil ⇒ cluster = 0. Idle is the hub: a machine changes
// cluster only through Configured → Drain → Idle → Bootstrap → Configured.
//
// # Inventory layout
//
// A Shard keeps its machines as a struct of arrays indexed by MachineID: a
// state byte (state, host flag, reservation flag), a 16-bit group (the pair
// offering × reclamation penalty, interned per shard), the 32-bit cluster,
// the second the machine entered its state (since the shard's epoch), and two
// 32-bit links: 19 bytes. The links thread every machine onto exactly one
// intrusive list: its group's Speculative, Idle or "arriving" (unreserved
// Creating or Draining) list, its allocation's bound list (one per group),
// an allocation's incoming list (reserved, on its way), the failed list or
// the free list. An allocation is one (cluster, profile) line of needs. The
// only per-machine map, cluster reservations, holds machines in flight, so
// it is empty at rest. TestShardMemoryPerMachine measures the total heap of
// a 500,000-machine, 2,500-cluster shard with runtime.MemStats (≤ 24 bytes
// per machine).
//
// # The decision cycle
//
// Shard.Decide(now, needs...) applies the needs that changed (each message
// replaces its cluster's needs), then evaluates only the allocations whose
// needs or machines changed, plus those left short by the previous cycle
// (Reevaluate forces a full evaluation). Phases, following BigFleet §8:
//
//   - Diff: an allocation over its count gives back reservations.
//   - Phase 1, by priority, highest first: Idle machines (highest
//     reclamation penalty first: the machines worth keeping are put to work,
//     the cheap ones are left for release), then machines already on their
//     way to Idle, then Speculative slots (Create + bootstrap; lowest
//     effective cost first; an offering whose Create was refused backs off).
//   - Phase 2, priority inversions: take over machines reserved for lower
//     priorities, then surplus of clusters that need fewer, then preempt
//     victims by highest score (see Weights: priority gap, drain time,
//     interruption and reclamation penalties), draining with a grace set by the gap
//     (> 900K → 10s, > 500K → 30s, > 100K → 2m, else 10m). The drained
//     machine is reserved for the need, and bootstrapped once Idle.
//   - Phase 3: excess drains back to Idle; Idle machines are released to
//     Speculative after their kind's delay (bare metal and reserved never,
//     on-demand 10m, spot 1m by default); Failed machines are released.
//   - Shortfalls: unmet demand summed by (profile, priority, topology), aged
//     in cycles, at most 100 reported, escalated past 5 cycles (ActShortfall).
//
// Every action moves its machine to the transitional state at once, so a
// repeated message, or a cycle while machines boot or drain, asks for
// nothing twice (static diffing), and no machine gets two actions in a
// cycle. Adopted machines of a cluster that has never sent needs are left
// alone until it does.
//
// # Driving a shard
//
// A shard controller owns one Shard and runs, once per cycle:
//
//  1. At start: provider.List on each provider (the shard's pool), Reserve,
//     then Add every machine in its observed state (Speculative slots for
//     unused quota). Machine ids are the driver's: it maps MachineID to the
//     provider's machine id (e.g. "<shard>-<slot>" for machines it creates)
//     and persists the map before calling Create.
//  2. Observe what the providers reported since the last cycle (Acks, Get
//     or List), converting provider.State with ParseState(string(st)).
//  3. acts := Decide(now, needs received since the last cycle...), then carry
//     out each action through internal/provider, fenced with
//     provider.Fence{Controller: shard id, Epoch: shard epoch, Seq}:
//     ActCreate → Provider.Create{MachineID, Offering: Catalog.OfferingName};
//     ActConfigure → the cluster operator's bootstrap blob for Cluster, then
//     Provider.Configure; ActDrain → cordon and evict in Cluster within
//     Grace, then Provider.Drain; ActRelease → Provider.Delete until
//     NotFound; ActShortfall → the coordinator; ActExport → the shard the
//     coordinator named (Shard.Import), with the provider machine id.
//  4. Outcomes become observations: an Ack's state; a Create refused with
//     InsufficientCapacityError or QuotaExceededError → Speculative (the
//     offering backs off); NotFound after Delete, or a machine gone →
//     Speculative; a timeout → Failed; TransientError → retry the same call
//     (idempotent by machine id and target state); StaleFenceError → stop,
//     this controller is deposed.
//
// The coordinator gathers escalations and Summary (about 240 bytes per
// shard), calls PlanShortfalls, and sends each directive's shards
// Export/Import (Idle machines, Speculative quota) or Preempt (drain first;
// the drained machines come out of Decide as ActExport).
//
// All of Shard's methods are for one goroutine; the Catalog is immutable and
// may be shared. Time must not go backwards; machine timestamps have
// one-second resolution.
package fleet
