// Package assembly runs a head with its pools: the head and its SQLite
// store, and for every configured pool a provider, a controller and an
// autoscale loop, wired as seed 000's "How they interact" describes:
//
//	head scheduler ──pressure──► autoscale.Pool ──decision──► controller ──► provider
//	     ▲                                                        │            │
//	     │                 NodeJoined / NodeLost, drains ◄────────┘            ▼
//	     └──────────── tide worker joins with the bootstrap blob ◄──── machine boots
//
// It is the one assembly behind both faces (DESIGN.md "One assembly, two
// faces"): `tide head --config pools.yaml` runs it on the file's pools, and
// `tide up` runs it on the default local pool (or its --config). Pools show
// in GET /pools, /nodes, /events and /metrics the same way under both.
//
// Lifecycle. New refuses a bad config before anything is created, then
// takes the data dir (the head's lock), opens the head, listens and builds
// the pools. Run serves until its context ends, then stops: the head stops
// placing work, the pools' loops and controllers stop, the running
// instances on machines that stopping will stop are cancelled with their
// grace period and recorded CANCELLED, the providers shut down, and the
// head stops serving. Reload applies a new config to the running pools
// (added, changed, removed), or refuses it as a whole.
package assembly

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/internal/provider/netns"
	"github.com/tide-project/tide/sdk/provider"
)

// Config configures an assembly.
type Config struct {
	// ConfigPath is the pools' YAML file, read by New and re-read by
	// ReloadFile. Empty: Pools is used and ReloadFile refuses.
	ConfigPath string
	// Pools are the pools to run when ConfigPath is empty (tide up's
	// default pool); none is allowed (a head without pools).
	Pools []config.Pool
	// Head configures the head: its listen address (Addr, or Port on
	// 127.0.0.1), tokens, TLS and timings. DataDir is required. The
	// assembly sets its Registry, Logger, OnPressure, Route and PoolStatus,
	// and its JoinToken when empty (one kept in DataDir/join-token).
	Head head.Config
	// Binary is the tide executable machines on this host run (this
	// process's when empty).
	Binary string
	// ControllerID names the controllers in provider fences ("tide").
	ControllerID string
	// Name names the assembly in logs ("tide head", "tide up").
	Name string
	// Logger receives logs; discarded when nil.
	Logger *slog.Logger
	// Registry receives every metric and is served at /metrics; a new one
	// when nil.
	Registry head.Registry
	// OnListen is called with the head's address once it listens.
	OnListen func(net.Addr)
	// ShutdownTimeout bounds each stopping step after the cancels (stopping
	// the machines); 30s when zero.
	ShutdownTimeout time.Duration
}

// ConfigError is New's error for a refused configuration (the pools' file
// or the head's settings): bad input, nothing was started or changed.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Assembly is a head with its pools. Its methods are safe for concurrent
// use.
type Assembly struct {
	cfg Config
	log *slog.Logger
	h   *head.Head
	ln  net.Listener
	// listening is the head's address once it listens, for blobs minted
	// from other goroutines (fleet-backed pools).
	listening atomic.Pointer[net.Addr]
	boot      []byte
	env       build.Env
	// errs receives the error of a component that stopped by itself.
	errs chan error
	// led is set once this head has led (heads on etcd): a later term
	// builds fresh controllers, since the last term's may be deposed.
	led bool

	mu sync.Mutex
	// pools holds the running pools by name, retiring ones included;
	// order is the config's order, then the retiring ones.
	pools  map[string]*pool
	order  []string
	routes []config.Pool // the config's pools, for routing
	// strategy is the config's capacity-provider strategy (none: nil).
	strategy config.Strategy
	// reports are the scheduler's last pressure reports, by pool: routing
	// asks whether a pool at a limit still has room on a node.
	reports map[string]capacity.Pressure
	// lastRoute is the last routing choice recorded as an event.
	lastRoute atomic.Pointer[string]
	runCtx    context.Context
	// ha is set when the head shares etcd with others: pools run only while
	// it leads, under leadCtx (nil when it does not lead).
	ha       bool
	leadCtx  context.Context
	stopping bool
	wg       sync.WaitGroup
}

// New checks the config, takes the data dir, opens the head, listens and
// builds the pools; nothing runs until Run. A config that fails its checks
// is refused before the data dir is created; a data dir in use is refused
// before anything in it changes.
func New(ctx context.Context, cfg Config) (*Assembly, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Name = cmp.Or(cfg.Name, "tide head")
	cfg.ControllerID = cmp.Or(cfg.ControllerID, "tide")
	if cfg.Head.DataDir == "" {
		return nil, errors.New("assembly: head data dir: must be set")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the tide binary for workers: %w", err)
		}
		cfg.Binary = exe
	}
	a := &Assembly{cfg: cfg, log: log, pools: map[string]*pool{}, errs: make(chan error, 16)}
	a.env = build.Env{MachinesDir: filepath.Join(cfg.Head.DataDir, "machines"), Binary: cfg.Binary, Logger: log, Clock: clock.Real{},
		Join: a.joinBlob, Preempt: a.preempt}
	pools := cfg.Pools
	source := "pools"
	if cfg.ConfigPath != "" {
		f, err := config.Load(cfg.ConfigPath)
		if err != nil {
			return nil, &ConfigError{err}
		}
		pools, source = f.Pools, cfg.ConfigPath
		a.strategy = f.Strategy
	}
	builds, err := a.check(source, pools, nil)
	if err != nil {
		return nil, &ConfigError{err}
	}

	hc := cfg.Head
	hc.Registry, hc.Logger = cfg.Registry, log.With("component", "head")
	hc.OnPressure = a.observe
	hc.OnWithdraw = a.withdraw
	hc.Route = a.route
	hc.MaxQueued = a.maxQueued
	hc.MaxWait = a.maxWait
	hc.PoolStatus = a.status
	hc.OnListen = nil
	gws, err := a.netnsGateways(source, pools, listenHost(hc.Addr))
	if err != nil {
		return nil, &ConfigError{err}
	}
	if hc.TLSAuto {
		// The certificate the head makes names the bridges of netns pools,
		// which exist only once their providers start.
		hc.TLSHosts = append(slices.Clip(hc.TLSHosts), gws...)
	}
	// The head's settings are checked first: refused, they leave the data
	// dir alone.
	if err := head.CheckConfig(hc); err != nil {
		return nil, &ConfigError{err}
	}
	// The join token is read before the head starts and, when new,
	// written once the head holds the data dir.
	freshToken := false
	if hc.JoinToken == "" {
		if hc.JoinToken, freshToken, err = joinToken(hc.DataDir); err != nil {
			return nil, err
		}
	}
	// New takes the data dir's lock before it opens the store: a data dir
	// in use is refused before anything in it changes.
	h, err := head.New(ctx, hc)
	if err != nil {
		return nil, err
	}
	a.h = h
	if freshToken {
		if err := writeJoinToken(hc.DataDir, hc.JoinToken); err != nil {
			a.closeEarly()
			return nil, err
		}
	}
	// The providers start before the head listens: a netns pool's bridge is
	// an address the head may listen on.
	provs := make([]provider.Provider, len(pools))
	releaseProviders := func() {
		for _, p := range provs {
			if c, ok := p.(closer); ok {
				c.Close() // nothing ran: leave their machines to the next start
			}
		}
	}
	for i, pc := range pools {
		if provs[i], err = builds[i](); err != nil {
			releaseProviders()
			a.closeEarly()
			return nil, fmt.Errorf("%s: pool %q: provider: %w", source, pc.Name, err)
		}
	}
	if a.ln, err = head.Listen(hc); err == nil {
		addr := a.ln.Addr()
		a.listening.Store(&addr)
	}
	if err != nil {
		releaseProviders()
		a.closeEarly()
		return nil, err
	}
	// The controllers' blob names the head only: each machine's own blob,
	// with a credential scoped to it, is minted when it is configured
	// (joining).
	boot, err := tideprovider.Bootstrap{Head: headURL(h.Scheme(), a.ln.Addr()), Token: "minted-per-machine"}.Marshal()
	if err != nil {
		releaseProviders()
		a.closeEarly()
		return nil, err
	}
	a.boot = boot
	a.routes = pools
	for i, pc := range pools {
		p, err := a.newPool(ctx, pc, builds[i], provs[i])
		if err != nil {
			releaseProviders()
			a.closeEarly()
			return nil, fmt.Errorf("%s: pool %q: %w", source, pc.Name, err)
		}
		a.pools[pc.Name] = p
		a.order = append(a.order, pc.Name)
	}
	return a, nil
}

func (a *Assembly) closeEarly() {
	if a.ln != nil {
		a.ln.Close()
	}
	if a.h != nil {
		a.h.Close()
	}
}

// Head returns the assembly's head.
func (a *Assembly) Head() *head.Head { return a.h }

// Addr returns the address the head listens on.
func (a *Assembly) Addr() net.Addr { return a.ln.Addr() }

// headURL is the head's URL as machines of this host reach it: a listener
// on every address is reached on loopback.
func headURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// Run serves the head and runs the pools until ctx ends, then stops (see
// the package doc) and closes the head. It returns the error of a
// component that stopped by itself, if any.
func (a *Assembly) Run(ctx context.Context) error {
	defer a.h.Close()
	poolCtx, stopPools := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPools()
	ha := a.h.Leader().HA
	if ha {
		// Several heads share etcd: the pools run on the leader only,
		// from each takeover until the lead is lost (ha.go in head).
		a.h.WhileLeading(func(lead context.Context) { a.leadPools(poolCtx, lead) })
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.h.Serve(serveCtx, a.ln) }()

	a.mu.Lock()
	a.runCtx, a.ha = poolCtx, ha
	if !ha {
		for _, name := range a.order {
			a.pools[name].start(poolCtx, a)
		}
	}
	n := len(a.order)
	a.mu.Unlock()
	if a.cfg.OnListen != nil {
		a.cfg.OnListen(a.ln.Addr())
	}
	a.log.Info(a.cfg.Name+" running", "head", a.ln.Addr().String(), "data_dir", a.cfg.Head.DataDir, "pools", n)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-a.errs:
		a.log.Error(a.cfg.Name+": a component stopped", "err", runErr)
	case err := <-serveErr:
		runErr = cmp.Or(err, errors.New("head stopped serving"))
		serveErr <- nil
	}
	a.stop(stopPools)
	stopServing()
	if err := <-serveErr; err != nil && !errors.Is(err, context.Canceled) {
		runErr = cmp.Or(runErr, err)
	}
	return runErr
}

// stop is the draining shutdown: no more placements, the pools' loops and
// controllers stop, running work on machines that will be stopped is
// cancelled and waited for, then the machines stop.
func (a *Assembly) stop(stopPools context.CancelFunc) {
	a.mu.Lock()
	a.stopping = true
	pools := make([]*pool, 0, len(a.order))
	for _, name := range a.order {
		pools = append(pools, a.pools[name])
	}
	a.mu.Unlock()
	a.log.Info(a.cfg.Name + " stopping: no more placements, running work is cancelled, machines are released (Ctrl-C again to exit at once)")
	a.h.StopPlacing()
	stopPools()
	a.wg.Wait()
	timeout := cmp.Or(a.cfg.ShutdownTimeout, 30*time.Second)
	a.cancelWork(pools)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	busy := func(machine string) bool {
		b, err := a.h.WorkerBusy(ctx, machine)
		return err != nil || b
	}
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() {
			p.releaseMachines(ctx, busy)
			sctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			p.shutdown(sctx, a.log)
		})
	}
	wg.Wait()
}

// joinToken returns the workers' join token kept in the data dir, or a new
// one (fresh) to be written with writeJoinToken once the data dir is held.
func joinToken(dir string) (tok string, fresh bool, err error) {
	if b, err := os.ReadFile(filepath.Join(dir, "join-token")); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), false, nil
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", false, err
	}
	return hex.EncodeToString(buf), true, nil
}

func writeJoinToken(dir, tok string) error {
	if err := os.WriteFile(filepath.Join(dir, "join-token"), []byte(tok+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the join token: %w", err)
	}
	return nil
}

// observe hands the scheduler's reports to the pools' loops. A pool absent
// from the report has no worker and nothing queued: it observes an empty
// report rather than keep replaying its last one.
func (a *Assembly) observe(reports map[string]capacity.Pressure) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reports = reports
	for name, p := range a.pools {
		if p.loop != nil {
			p.loop.Observe(reports[name])
		}
	}
}

// withdraw tells the loops of pools that waiting work there was given up
// on (autoscale.Pool.Withdraw), then replays the last report to them: the
// report that no longer holds that work may have come before the call.
func (a *Assembly) withdraw(pools []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range pools {
		if p := a.pools[name]; p != nil && p.loop != nil {
			p.loop.Withdraw()
			if a.reports != nil {
				p.loop.Observe(a.reports[name])
			}
		}
	}
}

// maxQueued is pool name's max_queued in the current config (0: no cap).
func (a *Assembly) maxQueued(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.routes {
		if a.routes[i].Name == name {
			return a.routes[i].MaxQueued
		}
	}
	return 0
}

// maxWait is pool name's max_wait in the current config (0: none).
func (a *Assembly) maxWait(name string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.routes {
		if a.routes[i].Name == name {
			return time.Duration(a.routes[i].MaxWait)
		}
	}
	return 0
}

// status is what `tide pools` and `tide nodes` show.
func (a *Assembly) status() []head.PoolStatus {
	a.mu.Lock()
	pools := make([]*pool, 0, len(a.order))
	retiring := make([]bool, 0, len(a.order))
	for _, name := range a.order {
		pools = append(pools, a.pools[name])
		retiring = append(retiring, a.pools[name].retiring)
	}
	a.mu.Unlock()
	out := make([]head.PoolStatus, 0, len(pools))
	for i, p := range pools {
		out = append(out, p.status(retiring[i]))
	}
	return out
}

// event records an assembly event.
func (a *Assembly) event(pool, typ, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if err := a.h.RecordEvent(context.Background(), head.Event{Pool: pool, Type: typ, Reason: reason, Message: msg}); err != nil {
		a.log.Warn("recording an event", "err", err, "reason", reason, "message", msg)
	}
}

// leadPools runs every pool while this head leads (heads on etcd): their
// controllers start, raising their journal epochs, so the previous
// leader's controllers are fenced off; when the lead ends they halt,
// leaving their machines to the next leader.
func (a *Assembly) leadPools(run, lead context.Context) {
	ctx, cancel := context.WithCancel(run)
	defer cancel()
	stop := context.AfterFunc(lead, cancel)
	defer stop()
	a.mu.Lock()
	a.leadCtx = ctx
	n := 0
	for _, name := range a.order {
		p := a.pools[name]
		if a.led {
			np, err := a.newPool(ctx, p.cfg, nil, p.prov)
			if err != nil {
				a.log.Error("leading again: rebuilding a pool's controller failed; the pool stays stopped", "pool", name, "err", err)
				continue
			}
			np.retiring = p.retiring
			a.pools[name], p = np, np
		}
		p.start(ctx, a)
		if p.retiring {
			// Removed by a reload while another head led (or before this
			// term): drained now.
			a.retire(p)
		}
		n++
	}
	a.led = true
	a.mu.Unlock()
	a.log.Info("leading: pools started", "pools", n)
	<-ctx.Done()
	// The pools running now, those a reload started during the term too.
	a.mu.Lock()
	a.leadCtx = nil
	pools := make([]*pool, 0, len(a.pools))
	for _, p := range a.pools {
		pools = append(pools, p)
	}
	a.mu.Unlock()
	for _, p := range pools {
		p.halt()
	}
}

// poolsCtx is what pools run under: the run's context, or on a head that
// shares etcd the current term's (nil when it does not lead, or before
// Run). Called with a.mu held.
func (a *Assembly) poolsCtx() context.Context {
	if a.ha {
		return a.leadCtx
	}
	return a.runCtx
}

// netnsGateways returns the bridge addresses the netns pools among pools
// will give their machines the head at: what a --tls auto certificate must
// name for those machines to verify it. It refuses such a pool, before its
// provider makes anything, when the head listens on host and host is a
// loopback address: a namespace cannot reach it there.
func (a *Assembly) netnsGateways(source string, pools []config.Pool, host string) ([]string, error) {
	var out []string
	for _, pc := range pools {
		if pc.Provider.Type != "netns" {
			continue
		}
		nc, err := build.NetnsConfig(pc, a.env)
		if err == nil {
			var g netip.Addr
			if g, err = netns.PlanGateway(nc); err == nil {
				out = append(out, g.String())
				if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
					err = fmt.Errorf("its machines cannot reach a head on %s: listen on %s or every address (--addr)", host, g)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: pool %q: provider: %w", source, pc.Name, err)
		}
	}
	return out, nil
}

// listenHost is the host part of a head's listen address (Config.Addr);
// the loopback address when it is empty, as the head does.
func listenHost(addr string) string {
	if addr == "" {
		return "127.0.0.1"
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
