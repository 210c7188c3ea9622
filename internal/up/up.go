// Package up runs tide's embedded default, `tide up`: the assembly of
// internal/assembly (a head with its SQLite store, and for every pool an
// autoscale loop, a controller and a provider) on one default pool of local
// worker processes, or on the pools of --config. It is `tide head` plus the
// default local pool: both run the same assembly.
//
// Run returns when its context ends, after draining: the head stops placing
// work, running instances are cancelled with their grace period and
// recorded CANCELLED, and every worker process it started is stopped.
package up

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/tide-project/tide/internal/assembly"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/local"
)

// Config configures `tide up`.
type Config struct {
	// ConfigPath is the pools' YAML file; a default local pool when empty.
	ConfigPath string
	// DataDir holds tide.db, the machines' data and the join token (~/.tide).
	DataDir string
	// Port is the head's port on 127.0.0.1 (8000 when zero).
	Port int
	// Addr, when set, is the head's listen address (host:port) instead:
	// beyond loopback it needs Token. A netns pool needs the head on its
	// bridge's gateway or on every address.
	Addr string
	// Token is the admin token the API requires; none when empty.
	Token string
	// TLS "auto" serves HTTPS with a CA and certificate kept under
	// DataDir/tls (see package tlsauto); TLSCertFile and TLSKeyFile serve
	// HTTPS with hand-made ones. TLSSANs are extra names for "auto".
	TLS                     string
	TLSCertFile, TLSKeyFile string
	TLSSANs                 []string
	// Binary is the tide executable the workers run (this process's when empty).
	Binary string
	// Logger receives logs; discarded when nil.
	Logger *slog.Logger
	// Registry receives every metric and is served at /metrics; a new one when nil.
	Registry head.Registry
	// OnListen is called with the head's address once it listens.
	OnListen func(net.Addr)
	// Head overrides head settings (intervals, timeouts) in tests; its
	// DataDir, Port, JoinToken, Registry, Logger and hooks are set by Run.
	Head head.Config
	// ShutdownTimeout bounds stopping the machines on exit (default 30s).
	ShutdownTimeout time.Duration
	// Reload, when set, re-reads ConfigPath on every value received
	// (SIGHUP), as `tide head --config` does.
	Reload <-chan os.Signal
}

// DefaultPool returns the pool `tide up` runs without a config file: local
// worker processes of one CPU each, from zero up to one per CPU of this
// machine, scaled by the tide policy, reconciled every 2 s.
func DefaultPool() (config.Pool, error) {
	whole, err := local.DefaultOffering()
	if err != nil {
		return config.Pool{}, err
	}
	n := runtime.NumCPU()
	off := capacity.Offering{Type: "local-1cpu", Kind: capacity.OnDemand,
		Resources: capacity.Resources{MilliCPU: 1000, Memory: whole.Resources.Memory / int64(n)}}
	return config.Pool{
		Name:      "local",
		Provider:  config.Provider{Type: "local"},
		Nodes:     capacity.Elastic(0, n),
		Offerings: []capacity.Offering{off},
		// Local machines boot in milliseconds: a short reconcile tick
		// makes them join within seconds rather than seed 000's 15 s.
		Scaling: config.Scaling{Policy: policy.Tide, ReconcileInterval: config.Duration(2 * time.Second)},
	}, nil
}

// Run runs the head and the pools until ctx ends, then drains and stops
// every worker it started. A config that fails validation is refused before
// the data dir is created; a data dir in use is refused before anything in
// it changes.
func Run(ctx context.Context, cfg Config) error {
	if cfg.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("up: --data-dir: no home directory: %w", err)
		}
		cfg.DataDir = filepath.Join(home, ".tide")
	}
	var pools []config.Pool
	if cfg.ConfigPath == "" {
		p, err := DefaultPool()
		if err != nil {
			return fmt.Errorf("up: default pool: %w", err)
		}
		pools = []config.Pool{p}
	}
	hc := cfg.Head
	hc.DataDir, hc.Port, hc.Addr, hc.Token = cfg.DataDir, cmp.Or(cfg.Port, 8000), cfg.Addr, cmp.Or(cfg.Token, hc.Token)
	switch cfg.TLS {
	case "":
		hc.TLSCertFile, hc.TLSKeyFile = cfg.TLSCertFile, cfg.TLSKeyFile
	case "auto":
		hc.TLSAuto, hc.TLSHosts = true, cfg.TLSSANs
	default:
		return &assembly.ConfigError{Err: fmt.Errorf("up: --tls %q: the only mode is auto", cfg.TLS)}
	}
	a, err := assembly.New(ctx, assembly.Config{
		ConfigPath: cfg.ConfigPath, Pools: pools, Head: hc, Binary: cfg.Binary,
		ControllerID: "tide-up", Name: "tide up", Logger: cfg.Logger, Registry: cfg.Registry,
		OnListen: cfg.OnListen, ShutdownTimeout: cfg.ShutdownTimeout,
	})
	if err != nil {
		return err
	}
	if cfg.Reload != nil {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go a.ReloadOn(rctx, cfg.Reload)
	}
	return a.Run(ctx)
}
