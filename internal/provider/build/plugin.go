package build

import (
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/sdk/provider"
)

// pluginProvider is a provider plugin over gRPC (docs/provider-protocol.md):
// a subprocess that tide starts, supervises and restarts
// (options.command), or a remote service (options.address, with tls or
// token_file).
func pluginProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	o, err := plugin.ParseOptions(pc.Provider.Options)
	if err != nil {
		return nil, err
	}
	return func() (provider.Provider, error) {
		log := env.Logger.With("component", "provider-plugin")
		if len(o.Command) > 0 {
			s, err := plugin.StartSubprocess(plugin.SubprocessConfig{Command: o.Command, Env: o.Env, Logger: log,
				CallTimeout: time.Duration(o.CallTimeout)})
			if err != nil {
				return nil, err // it names the plugin's command
			}
			return subprocessPlugin{Provider: s, s: s}, nil
		}
		p, closer, err := plugin.Open(context.Background(), o, log)
		if err != nil {
			return nil, fmt.Errorf("provider plugin at %s: %w", o.Address, err)
		}
		return remotePlugin{Provider: p, close: closer.Close}, nil
	}, nil
}

// subprocessPlugin is a subprocess plugin: its machines stop with it
// (Shutdown gives it SIGTERM and time to stop what it started), as the
// local provider's do.
type subprocessPlugin struct {
	provider.Provider
	s *plugin.Subprocess
}

// Shutdown stops the plugin for good, letting it stop its machines.
func (p subprocessPlugin) Shutdown(ctx context.Context) error { return p.s.Shutdown(ctx) }

// Close stops the plugin; machines that outlive it are adopted next time.
func (p subprocessPlugin) Close() error { return p.s.Close() }

// remotePlugin is a remote plugin: its machines are not this process's, so
// stopping tide only closes the connection and leaves them, and
// their work, running (static stability); the next start adopts them.
type remotePlugin struct {
	provider.Provider
	close func() error
}

// Close closes the connection; the remote machines keep running.
func (p remotePlugin) Close() error { return p.close() }
