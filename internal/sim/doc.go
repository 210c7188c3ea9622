// Package sim replays a workload trace against a simulated cloud under a
// scaling policy, on virtual time, and measures what it cost: the engine
// behind `tide simulate` and the benchmark tide's policies are judged by
// (DESIGN.md, "The benchmark is part of the product").
//
// # What runs
//
// The live system's own code, driven synchronously on a clock.Fake, with
// no goroutine and no sleep:
//
//	trace jobs ──arrive──► queue ──scheduler.Place──► nodes ──complete──►
//	                          │                          ▲
//	                 pressure report                     │ join (machine Configured)
//	                          ▼                          │ leave (Drain, Delete, reclaim)
//	              policy.Decide ──SetDesired──► controller.Controller ──► provider/sim.Cloud
//	                                            (reconcile.Pool inside)   (boot latency, prices,
//	                                                                       spot interruptions, ledger)
//
// The engine is the world around them: it plays the scheduler side of the
// controller (controller.Workload: cordon, uncordon, busy), reports busy
// and idle nodes (ReportBusy), and watches the provider calls that take a
// node out of the cluster.
//
// # Time
//
// An event heap holds job arrivals, instance completions, the controller's
// reconcile ticks and policy wake-ups; the simulated cloud keeps its own
// (boots, drains, deletes, notices, reclaims) and the engine advances to
// whichever comes first (Cloud.NextEvent). Everything due at one instant
// is one step: the events, then the cloud's changes, a controller tick if
// due, placement, busy reports, one policy evaluation, and a controller
// Sync when its inputs changed. The policy is evaluated when the pressure
// changed and when its state says a decision may change with time alone
// (the end of a batch window, a cooldown, an idle timeout, a metric
// period). Ticks fall on the grid of the pool's reconcile interval, as in
// `tide up`, but only while the controller has something in flight or the
// cloud changed: a settled pool's tick changes nothing, and skipping it is
// what lets 109 days of Philly replay in seconds.
//
// # Faithful, and fast
//
// The work is kept in counted groups, not instances: the replicas of one
// job share shape, submit time and duration, so they are queued, placed,
// started, ended and billed as one group for as long as their fate is the
// same. A group splits only when its members' fates part: the part placed
// on one node runs as a group of its own, the rest waits; a node that
// leaves requeues its groups whole. Memory and time follow the live groups
// and nodes, not the instances of the trace (11.9 million in
// alibaba2017_batch_tasks.csv).
//
// Placement is the head's scheduler through scheduler.Index, which keeps
// the schedulable nodes in the order scheduler.Place ranks them (free
// GPUs, CPU, memory, ordinal) and places a group on the best node as many
// at a time as fit: the decisions of Place for the same instances handed
// one by one (scheduler's TestIndexPlacesLikePlace), without looking at
// every node per instance. Only shapes that fit the largest free space of
// some node are handed over, as before groups.
//
// The pressure report the policy reads is kept as the engine goes, in the
// shape Place reports it: the nodes by ordinal with what runs on them, the
// pending instances grouped by shape in order of arrival. What runs on a
// node is one entry per group for policies that read sums of requests, one
// per instance for skyward, which counts them. TestGoldenFigures holds
// every figure of every policy on a sample of every shipped trace to those
// of the engine that kept one record per instance; TestGroupsMatchInstances
// compares groups with one instance per group where spot reclaims requeue
// them.
//
// --policy all runs the policies side by side (RunAll), each on its own
// cloud with the same seed: the same report as one by one.
//
// # Figures
//
// Node-hours and cost come from the cloud's billing ledger (boot, idle,
// drain and delete time included). Waits are per instance, from the job's
// submit to the instance's first start; an instance that never starts
// waits until the run ends. Utilization is requested over billed
// resource-time in the busiest dimension. Scale events count the policy's
// changes of the desired count. The offline lower bound is
// trace.LowerBound of the same jobs on the pool's offerings.
//
// # Invariants
//
// Checked on every step (on what the step touched; on everything with
// Options.Check): no node allocates more than its capacity, a node's
// allocation is what runs on it, the instance counts add up, and no node
// leaves the cluster by scale-down while it runs work (Disrupted must be
// 0); at the end, no machine was provisioned twice. A violation fails Run
// with ErrInvariant. Work on a spot machine that is reclaimed is
// interrupted, queued again and restarted: that is the cloud's doing and
// is counted apart (Interrupted).
package sim
