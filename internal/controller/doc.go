// Package controller is the driver of one pool: it owns the pool's pure
// reconciler (internal/reconcile), carries out its actions through a
// provider.Provider, and turns what the provider and the scheduler report
// into reconciler events. It survives provider faults and its own crashes
// without creating a machine twice or leaving one behind (DESIGN.md
// invariants 4 and 5), and every decision, non-decision and error becomes an
// Event with a reason: a pool that does not scale says why.
//
// # Driving it
//
// One goroutine owns all state (STYLE.md §3.8). In production it is Run,
// which ticks every ReconcileInterval of the injected Clock and syncs when an
// input arrives (a 1-slot poke channel coalesces wake-ups). The simulator and
// the tests call the same passes synchronously on virtual time, with no
// goroutine: Tick (a full reconcile pass) and Sync (inputs only). Inputs
// (SetDesired with a policy.Decision, SetBounds, ReportBusy) are safe from
// any goroutine; they wait in an inbox until the next pass.
//
//	SetDesired / SetBounds / ReportBusy ──► inbox ──poke──┐
//	                                                       ▼
//	Clock ticker ──► Tick ──► List pool ──► observe ──► event queue ──► reconcile.Pool.Step
//	                              │            │            ▲                  │
//	                              │     Configure Idle,     │                  ▼ actions, in order
//	                              │     NodeJoined/Lost,    │      Provision ─► journal, Create
//	                              │     DrainComplete       │      Drain ─────► Cordon, wait, Drain
//	                              ▼                         │      AbortDrain ► Uncordon
//	                   sweep: Delete doomed                 │      Terminate ─► journal, Delete
//	                   machines until NotFound              └── Provisioned / ProvisionFailed
//
// Events are fed to the reconciler one at a time and each step's actions are
// carried out in order before the next event, so a Terminate frees its
// ordinal before a Provision of the same step reuses it.
//
// # One machine per ordinal
//
// The reconciler counts nodes by ordinal; the controller maps each ordinal
// to the machine serving it. Machine ids are "<pool>-<ordinal>-<serial>",
// the serial drawn from the journal, so ids are never reused and a retried
// Create is a replay. A machine's life, as the controller drives it:
//
//	Provision(n)
//	  │ journal: id, ordinal, offering, intent create (before the call)
//	  ▼
//	Create ──ok──► launching ──Idle──► Configure ──► configuring ──Configured──► NodeJoined
//	  │ transient: still counts as launching, and     (bootstrap blob)               │
//	  │ the same Create is replayed each tick         Drain: Cordon, wait until      │
//	  │ until the provider lists the machine          the workload is empty,  ◄──────┘
//	  │ insufficient capacity, offering quota,        provider Drain ──Idle──► DrainComplete
//	  │ invalid: record removed, offering skipped,                                   │
//	  │ next-cheapest tried; total quota: no more                                    ▼
//	  │ creates until the next tick                                              Terminate
//	  ▼                                                                              │
//	gone, Failed, reclaim notice, launch timeout,                                    │
//	MaxRetries failed calls ──► NodeLost                                             │
//	                               │                                                 │
//	                               ▼                                                 │
//	                  journal: intent delete ◄───────────────────────────────────────┘
//	                               │
//	                               ▼
//	                  Delete, each tick until NotFound ──► record removed
//
// Booting machines are pending in the reconciler, so they count toward the
// effective size and are never launched twice (invariant 4). An AbortDrain
// resumes dispatch; a machine already unbound is configured again once Idle.
//
// # Crashes and takeover
//
// The Journal is written before every Create (intent create) and before
// every Delete (intent delete), so after a crash at any point the next
// controller on the same journal and provider can tell its machines from
// strangers. Its first Tick raises the epoch, which fences both the journal
// and the provider: the old controller's journal writes are refused
// (ErrStaleEpoch) and so are its provider calls once the provider has seen
// the new epoch (StaleFence); either answer makes it stop for good
// (ErrDeposed). The new controller then lists the pool and resolves every
// record:
//
//	intent create, listed, healthy     adopted (Configured: joined; otherwise launching)
//	intent create, not listed, Failed,
//	  Deleting, reclaim notice, or a
//	  lower serial than another record
//	  of the same ordinal              deleted until NotFound, record removed
//	intent delete                      deleted until NotFound, record removed
//	listed, in no record               an orphan: deleted until NotFound
//
// and sends Adopt to a fresh reconciler whose desired count is the last one
// journaled, so a restart does not drain what it adopts. Every later tick
// deletes orphans too. Nothing is created twice because no id is ever
// created under two records, and nothing leaks because every machine of the
// pool is either in a record or an orphan.
//
// # Faults
//
// Provider errors are handled by kind (provider.Kind): transient or unknown
// outcomes are retried with the same call on the next tick (a Create or
// Configure at most MaxRetries times, then the machine is replaced; a Delete
// forever); InsufficientCapacity, an offering's quota or Invalid skips the
// offering for CapacityBackoff (the ICE cache, 3 minutes by default) and
// tries the next-cheapest that fits: a Provision's launch names the
// offering the policy bought and, as fallbacks, those that host the same
// load, so pending work only ever drives offerings that can run it (when
// every candidate is skipped, the one whose skip ends first is probed once per
// tick, so capacity that returns is used within a tick); a total
// QuotaExceeded stops launching until the next tick; NotFound means the
// machine is gone; Conflict re-reads the machine with Get; StaleFence
// deposes the controller. Journal and Workload errors are retried on the
// next tick; while the journal refuses writes nothing is created. Every one
// of them is an Event.
//
// # After a node joins
//
// With RequireRegistration and a Workload that is an Inspector (the head:
// a worker of the machine's name; Kubernetes: a Ready Node), a Configured
// machine joins only once its agent registered, and is replaced after
// RegistrationTimeout otherwise; launch and registration timeouts of one
// offering TimeoutsBeforeBackoff times in a row back it off like an
// insufficient-capacity answer. Every tick the Inspector's answer feeds
// lifecycle.Decide (repair with its breaker, drift by the HashLabel each
// machine is created with, expiry, under the disruption budget); each
// replacement is a reconcile.Replace, so the replacement launches first.
// A repaired node's drain is a loss (Forget: its work handled as a lost
// worker's); a drifted or expired one is cordoned, its restartable work
// moved off (Evacuator), and drained as usual. See docs/lifecycle.md.
//
// # Observability
//
// Events go to the EventSink, to the slog.Logger (Warning at warn level) and
// to tide_controller_events_total{pool,type,reason}. The gauges
// tide_pool_{desired,current,pending,draining}_nodes{pool} are set after
// every pass, and provider calls are timed by provider.Instrument, all on the
// registry passed in Deps.
package controller
