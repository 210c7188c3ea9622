// Package provider is tide's public SDK for capacity provider plugins: the
// Provider interface a plugin implements, Serve to run it as a plugin
// process that tide starts, ListenAndServe to run it as a remote service,
// and Client, which is itself a Provider, to call a plugin over the wire.
// The same interface thus runs in-process and over gRPC (the protocol of
// api/provider/v1, documented in docs/provider-protocol.md).
//
// The contract every Provider keeps (asynchronous transitions, idempotence
// keyed by (machine id, target state), pool ownership, fencing, typed
// errors) is tide's own: see the Provider methods, and run
// `tide provider test --plugin CMD` to check a plugin against tide's
// conformance suite.
//
// Typed errors cross the wire: a plugin returning NewNotFound(id) makes the
// caller's errors.As(err, &*NotFoundError) succeed.
package provider
