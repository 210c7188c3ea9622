package provider

import (
	"context"
	"os"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is the go-plugin handshake between tide and a plugin process it
// starts: tide sets the magic cookie in the plugin's environment, and the
// plugin answers on stdout with one line,
// "1|<AppProtocolVersion>|tcp|127.0.0.1:PORT|grpc" (or a unix socket), before
// serving the Provider service there. AppProtocolVersion is ProtocolMajor.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolMajor,
	MagicCookieKey:   "TIDE_PROVIDER_PLUGIN",
	MagicCookieValue: "a7c1f0e4-tide-provider-v1",
}

// PluginName is the name of the provider in go-plugin's plugin map.
const PluginName = "provider"

// GRPCPlugin is the go-plugin glue: on the plugin side it serves Impl; on
// tide's side it returns a *Client.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	// Impl is the provider served (plugin side only).
	Impl Provider
	// Opts configure the server (plugin side only).
	Opts []ServerOption
	// CallTimeout bounds each call of the returned Client whose context has
	// no deadline (tide's side only; 0: DefaultCallTimeout).
	CallTimeout time.Duration
}

// GRPCServer registers the Provider service (go-plugin calls it).
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	Register(s, p.Impl, p.Opts...)
	return nil
}

// GRPCClient returns a *Client after the Info handshake (go-plugin calls it).
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(ctx, c, p.CallTimeout)
}

// IsPluginProcess reports whether this process was started by tide as a
// plugin (the handshake's magic cookie is in its environment).
func IsPluginProcess() bool {
	return os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue
}

// Serve runs p as a plugin process started by tide and returns when tide
// stops it. Call it from main; a process not started by tide gets an
// explanation on stderr and exits 1 (go-plugin's behavior).
func Serve(p Provider, opts ...ServerOption) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         goplugin.PluginSet{PluginName: &GRPCPlugin{Impl: p, Opts: opts}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}
