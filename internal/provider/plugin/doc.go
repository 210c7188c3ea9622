// Package plugin runs providers over the plugin protocol (api/provider/v1,
// served and called by sdk/provider, where the one provider contract is
// defined): a Subprocess plugin that tide starts over hashicorp/go-plugin and
// restarts with backoff when it dies, a Remote plugin reached over mutual TLS
// or a bearer token, Open for a config's `provider: {type: plugin}`, and the
// harness that runs the conformance suite against any plugin (for
// `tide provider test`). A plugin client is a provider.Provider like any
// other: nothing converts between two copies of the contract.
package plugin
