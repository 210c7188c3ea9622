// Package provider is tide's public SDK for capacity provider plugins: the
// Provider interface a plugin implements, Serve to run it as a plugin
// process that tide starts, ListenAndServe to run it as a remote service,
// and Client, which is itself a Provider, to call a plugin over the wire.
// The same interface thus runs in-process and over gRPC (the protocol of
// api/provider/v1, documented in docs/provider-protocol.md).
//
// This package is where the provider contract is defined, once: tide's own
// providers (local, sim, netns, aws), its pool controller, its conformance
// suite and its plugin client and server all use these types. Run
// `tide provider test --plugin CMD` to check a plugin against the suite.
//
// # The machine model
//
// A machine is in one of three stable states or on its way between them:
//
//	                Create               Configure(cluster, bootstrap)
//	Speculative ──► Creating ──► Idle ──► Configuring ──► Configured
//	 (no host)                  (host)  ◄── Draining ◄──── (host, cluster)
//	                                 Drain
//
//	any state ──Delete──► Deleting ──► gone (Get and Delete return NotFound)
//	Creating, Configuring, Draining ──timeout──► Failed ──Delete──► Deleting
//
// Speculative is a quota slot without hardware, Idle is booted hardware bound
// to no cluster, and Configured is hardware joined to a cluster. Idle is the
// hub: moving a machine to another cluster is Drain → Idle → Configure. A
// machine with no host never has a cluster binding (see Machine.Check). A
// provider may also lose a machine at any time (spot reclaim, hardware
// failure): it then disappears, and a spot reclaim is announced beforehand
// through Machine.ReclaimAt.
//
// # The contract
//
// Asynchronous: Create, Configure, Drain and Delete return an Ack as soon as
// the provider has accepted the transition; progress is observed with Get and
// List. An Ack never means the transition has finished.
//
// Idempotent, keyed by (machine id, target state): a call whose target the
// machine already has or is already moving to is a replay. It returns an Ack
// with Replayed set and changes nothing; in particular a replayed Create never
// provisions a second machine. Machine ids are chosen by the caller, so a
// retried Create (after a timeout, a transient error or a crash of the caller)
// is a replay, not a new machine. Ids are never reused: a Create for an id the
// provider has deleted is refused with a ConflictError.
//
// Ownership: a machine belongs to the pool it was created in. Mutating calls
// name the pool, and a call naming another pool gets NotFound, so one pool's
// controller can never touch another pool's machines. Ids are unique within a
// provider across pools. Returned Machines and slices belong to the caller.
//
// Fencing: every mutating call carries a Fence (controller id, epoch,
// sequence). A provider remembers, per pool, the highest epoch it has seen and
// the controller that holds it, and refuses a call from an older epoch, or
// from another controller at the same epoch, with a StaleFenceError: a deposed
// controller can never act. Reads (Get, List, Offerings) are not fenced.
//
// Errors are typed, and the caller reacts to each kind differently (see
// errors.go): InsufficientCapacityError (try another offering for a while),
// QuotaExceededError (stop creating until quota frees), NotFoundError (the
// machine is gone: the end state of Delete), StaleFenceError (this controller
// is deposed: stop), TransientError (retry the same call, it is safe),
// ConflictError (the machine is in a state where the call does not apply:
// re-read it) and InvalidError (a bad request: a bug or bad config).
//
// Typed errors cross the wire: a plugin returning NewNotFound(id) makes the
// caller's errors.As(err, &*NotFoundError) succeed.
package provider
