// Package provider holds what tide adds around the provider contract, which
// is defined once in the public package sdk/provider (the interface, machine
// states, requests and typed errors every provider, the controller, the
// conformance suite and plugins share): Bootstrap, the blob Configure carries
// to a tide worker (head address and a credential scoped to one machine),
// BootScript, the boot script or cloud-init user data that joins a machine
// with it, and Instrument, which wraps any provider.Provider with Prometheus
// metrics. The providers themselves live in the folders below: sim, local,
// netns, aws and plugin; build constructs any of them from a config, and
// providertest is the conformance suite.
package provider
