// Package plugin runs tide's providers over the plugin protocol
// (api/provider/v1, served and called by the public SDK in sdk/provider):
// a Subprocess plugin that tide starts over hashicorp/go-plugin and
// restarts with backoff when it dies, a Remote plugin reached over mutual
// TLS or a bearer token, the adapters between the SDK's public types and
// internal/provider's (FromSDK, ToSDK), Open for a config's
// `provider: {type: plugin}`, and the harness that runs the conformance
// suite against any plugin (for `tide provider test`).
//
// Why a public mirror and adapters rather than moving internal/provider:
// the SDK must be importable by other modules, so it cannot live under
// internal/, and internal/provider is imported across the tree (and its
// Offerings use internal/capacity). The SDK therefore declares the same
// contract with its own types, and this package converts between the two
// at the edge: the rest of the tree keeps using internal/provider unchanged.
package plugin
