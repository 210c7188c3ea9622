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
// Placement is scheduler.Place itself. Two things keep it cheap without
// changing its answer: the instances on a node are handed to it as one
// exclusive instance holding the same CPU, memory and GPU indices, and of
// each pending shape only one more instance than the free capacity could
// hold is handed over (Place places a shape's instances in FIFO order and,
// once one does not fit, none after it). The pressure report the policy
// reads is kept as the engine goes, in the shape Place reports it: the
// nodes by ordinal with their running instances, the pending instances
// grouped by shape in order of arrival.
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
