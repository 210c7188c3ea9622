package up

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/plugin"
)

// poolProvider is what a pool of tide up runs on: a provider that Shutdown
// stops with everything it started (Ctrl-C) and Close lets go.
type poolProvider interface {
	provider.Provider
	Shutdown(ctx context.Context) error
	Close() error
}

// newPoolProvider builds a pool's provider: the local provider, or for
// `provider: {type: plugin}` the plugin its options name (a subprocess that
// tide starts and restarts, or a remote plugin).
func newPoolProvider(ctx context.Context, pc config.Pool, cfg Config, plog *slog.Logger) (poolProvider, error) {
	if pc.Provider.Type != "plugin" {
		return local.New(local.Config{
			Root:      filepath.Join(cfg.DataDir, "machines", pc.Name),
			Command:   local.WorkerCommand(cfg.Binary),
			Offerings: pc.Offerings,
			Logger:    plog.With("component", "local-provider"),
		})
	}
	o, err := plugin.ParseOptions(pc.Provider.Options)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	log := plog.With("component", "provider-plugin")
	if len(o.Command) > 0 {
		s, err := plugin.StartSubprocess(plugin.SubprocessConfig{Command: o.Command, Env: o.Env, Logger: log,
			CallTimeout: time.Duration(o.CallTimeout)})
		if err != nil {
			return nil, err
		}
		return subprocessPool{Provider: plugin.FromSDK(s), s: s}, nil
	}
	p, closer, err := plugin.Open(ctx, o, log)
	if err != nil {
		return nil, err
	}
	return remotePool{Provider: p, close: closer.Close}, nil
}

// subprocessPool is a subprocess plugin: Shutdown gives it SIGTERM and time
// to stop what it started.
type subprocessPool struct {
	provider.Provider
	s *plugin.Subprocess
}

func (p subprocessPool) Shutdown(ctx context.Context) error { return p.s.Shutdown(ctx) }
func (p subprocessPool) Close() error                       { return p.s.Close() }

// remotePool is a remote plugin: its machines are not tide's processes, so
// stopping tide only closes the connection (static stability).
type remotePool struct {
	provider.Provider
	close func() error
}

func (p remotePool) Shutdown(context.Context) error { return p.close() }
func (p remotePool) Close() error                   { return p.close() }
