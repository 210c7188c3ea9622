// Package up runs tide's embedded default: a head with its SQLite store, and
// for every configured pool an autoscale loop, a controller and a provider,
// wired as seed 000's "How they interact" describes:
//
//	head scheduler ──pressure──► autoscale.Pool ──decision──► controller ──► provider
//	     ▲                                                        │            │
//	     │                 NodeJoined / NodeLost, drains ◄────────┘            ▼
//	     └──────────── tide worker joins with the bootstrap blob ◄──── machine boots
//
// Each piece knows only its messages: the head publishes pressure per pool,
// the policy turns it into a desired count, the controller makes the pool
// match through its provider, and the machines it starts run `tide worker`,
// which registers with the head under the machine's id and pool.
//
// Run returns when its context ends, after draining: every worker process it
// started is stopped and nothing is left running.
package up

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/autoscale"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/reconcile"
)

// Config configures `tide up`.
type Config struct {
	// ConfigPath is the pools' YAML file; a default local pool when empty.
	ConfigPath string
	// DataDir holds tide.db, the machines' data and the join token (~/.tide).
	DataDir string
	// Port is the head's port on 127.0.0.1 (8000 when zero).
	Port int
	// Binary is the tide executable the workers run (this process's when empty).
	Binary string
	// Logger receives logs; discarded when nil.
	Logger *slog.Logger
	// Registry receives every metric and is served at /metrics; a new one when nil.
	Registry *prometheus.Registry
	// OnListen is called with the head's address once it listens.
	OnListen func(net.Addr)
	// Head overrides head settings (intervals, timeouts) in tests; its
	// DataDir, Port, JoinToken, Registry, Logger and hooks are set by Run.
	Head head.Config
	// ShutdownTimeout bounds the drain on exit (default 30s).
	ShutdownTimeout time.Duration
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

// pool is one running pool.
type pool struct {
	cfg  config.Pool
	pol  policy.Policy
	ctl  *controller.Controller
	loop *autoscale.Pool
	prov *local.Provider
}

// Run runs the head and the pools until ctx ends, then drains and stops
// every worker it started.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("up: --data-dir: no home directory: %w", err)
		}
		cfg.DataDir = filepath.Join(home, ".tide")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("up: finding the tide binary for workers: %w", err)
		}
		cfg.Binary = exe
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("up: --data-dir: %w", err)
	}
	pools, err := loadPools(cfg.ConfigPath)
	if err != nil {
		return err
	}
	token, err := joinToken(cfg.DataDir)
	if err != nil {
		return err
	}

	// The head: its scheduler's pressure goes to each pool's loop.
	var byName sync.Map // pool name -> *pool, filled before the head schedules
	hc := cfg.Head
	hc.DataDir, hc.Port, hc.JoinToken, hc.Registry, hc.Logger = cfg.DataDir, cmp.Or(cfg.Port, 8000), token, cfg.Registry, log.With("component", "head")
	hc.Addr = ""
	hc.OnPressure = func(reports map[string]capacity.Pressure) {
		// A pool absent from the report has no worker and nothing queued: it
		// observes an empty report rather than keep replaying its last one.
		byName.Range(func(name, p any) bool {
			p.(*pool).loop.Observe(reports[name.(string)])
			return true
		})
	}
	hc.Route = func(labels map[string]string, req capacity.Resources) string { return route(pools, labels, req) }
	h, err := head.New(ctx, hc)
	if err != nil {
		return err
	}
	defer h.Close()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", hc.Port))
	if err != nil {
		return fmt.Errorf("up: listen on 127.0.0.1:%d: %w (is another head running? use --port)", hc.Port, err)
	}
	headURL := "http://" + ln.Addr().String()
	boot, err := provider.Bootstrap{Head: headURL, Token: token}.Marshal()
	if err != nil {
		return err
	}

	// The pools.
	var running []*pool
	defer func() {
		shutdown(running, cmp.Or(cfg.ShutdownTimeout, 30*time.Second), log)
	}()
	for _, pc := range pools {
		p, err := startPool(ctx, pc, cfg, h, boot, log)
		if err != nil {
			return err
		}
		running = append(running, p)
		byName.Store(pc.Name, p)
	}
	h.SetPoolStatus(func() []head.PoolStatus { return poolStatus(running) })
	if cfg.OnListen != nil {
		cfg.OnListen(ln.Addr())
	}
	log.Info("tide up", "head", headURL, "data_dir", cfg.DataDir, "pools", len(running))

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(running)+1)
	wg.Go(func() { errs <- h.Serve(runCtx, ln) })
	for _, p := range running {
		wg.Go(func() { errs <- p.ctl.Run(runCtx) })
		wg.Go(func() { errs <- p.loop.Run(runCtx) })
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		if runErr != nil {
			log.Error("tide up: a component stopped", "err", runErr)
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			runErr = cmp.Or(runErr, err)
		}
	}
	return runErr
}

// loadPools reads the config, or returns the default pool.
func loadPools(path string) ([]config.Pool, error) {
	if path == "" {
		p, err := DefaultPool()
		if err != nil {
			return nil, fmt.Errorf("up: default pool: %w", err)
		}
		return []config.Pool{p}, nil
	}
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	for _, p := range f.Pools {
		if p.Provider.Type != "local" {
			return nil, fmt.Errorf("%s: pool %q: provider.type: tide up runs local pools only, got %q", path, p.Name, p.Provider.Type)
		}
	}
	return f.Pools, nil
}

// joinToken returns the workers' join token kept in the data dir, making one
// on first use.
func joinToken(dir string) (string, error) {
	path := filepath.Join(dir, "join-token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("up: writing the join token: %w", err)
	}
	return tok, nil
}

// route picks the pool of an instance that names none: the first whose
// selector labels all match and one of whose offerings fits the request.
// "" (no pool) when none does: the instance waits, and `tide pools` shows it
// as queued nowhere.
func route(pools []config.Pool, labels map[string]string, req capacity.Resources) string {
	for _, p := range pools {
		match := true
		for k, v := range p.Selector.Labels {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		for _, o := range p.Offerings {
			if req.Fits(o.Resources) {
				return p.Name
			}
		}
	}
	return ""
}

func startPool(ctx context.Context, pc config.Pool, cfg Config, h *head.Head, boot []byte, log *slog.Logger) (*pool, error) {
	plog := log.With("pool", pc.Name)
	pcfg := pc.PolicyConfig()
	pol, err := policy.New(pcfg)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	prov, err := local.New(local.Config{
		Root:      filepath.Join(cfg.DataDir, "machines", pc.Name),
		Command:   local.WorkerCommand(cfg.Binary),
		Offerings: pc.Offerings,
		Logger:    plog.With("component", "local-provider"),
	})
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	journal, err := h.Store().Journal(pc.Name)
	if err != nil {
		prov.Close()
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	p := &pool{cfg: pc, pol: pol, prov: prov}
	emit := func(e controller.Event) {
		if err := h.RecordEvent(context.WithoutCancel(ctx), head.FromController(e)); err != nil {
			plog.Warn("recording an event", "err", err, "event", e.String())
		}
	}
	ctl, err := controller.New(controller.Config{
		Pool:              pc.Name,
		Reconcile:         reconcile.Config{Nodes: pc.Nodes, ProtectFirstNode: pc.Scaling.ProtectFirstNode, ScaleDownDelay: scaleDownDelay(pcfg)},
		Offerings:         pc.Offerings,
		Bootstrap:         boot,
		ControllerID:      "tide-up",
		ReconcileInterval: pc.ReconcileEvery(),
	}, controller.Deps{
		Provider: provider.Instrument(prov, cfg.Registry, provider.WithName("local")),
		Journal:  journal,
		Workload: h.Workload(),
		Clock:    clock.Real{},
		Logger:   plog.With("component", "controller"),
		Metrics:  cfg.Registry,
		Events:   controller.EventFunc(emit),
	})
	if err != nil {
		prov.Close()
		return nil, fmt.Errorf("pool %q: %w", pc.Name, err)
	}
	p.ctl = ctl
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_autoscaler_decisions_total",
		Help: "Policy evaluations by pool, policy and reason code (changed says whether the desired count moved)."},
		[]string{"pool", "policy", "reason", "changed"})
	if err := cfg.Registry.Register(decisions); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		decisions = are.ExistingCollector.(*prometheus.CounterVec)
	}
	loop, err := autoscale.New(autoscale.Config{
		Pool:     pc.Name,
		Policy:   pol,
		Desired:  pc.Nodes.Initial(),
		Interval: cmp.Or(min(pcfg.Cooldown, pc.ReconcileEvery()), 5*time.Second),
		Ordinal:  func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID(pc.Name, id) },
	}, ctl, clock.Real{}, func(e autoscale.Event) {
		decisions.WithLabelValues(e.Pool, pol.Name(), e.Reason, fmt.Sprint(e.Changed)).Inc()
		typ := controller.TypeNormal
		if e.Reason == policy.CodeAtMax {
			typ = controller.TypeWarning
		}
		reason := "Desired" + strings.ToUpper(e.Reason[:1]) + e.Reason[1:]
		if !e.Changed {
			reason = "NotScaling"
		}
		emit(controller.Event{Time: e.Time, Pool: e.Pool, Type: typ, Reason: reason, Message: e.Message})
	})
	if err != nil {
		return nil, err
	}
	p.loop = loop
	return p, nil
}

// scaleDownDelay turns on the reconciler's deletion marks for the policy
// that scales down through them.
func scaleDownDelay(c policy.Config) time.Duration {
	if c.Policy == policy.Utilization {
		return c.ScaleDownDelay
	}
	return 0
}

// shutdown drains the pools: every worker is stopped gracefully, then killed
// after the timeout, so nothing this process started keeps running.
func shutdown(pools []*pool, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() {
			if err := p.prov.Shutdown(ctx); err != nil {
				log.Error("stopping workers", "pool", p.cfg.Name, "err", err)
			}
		})
	}
	wg.Wait()
}

// poolStatus is what `tide pools` and `tide nodes` show.
func poolStatus(pools []*pool) []head.PoolStatus {
	out := make([]head.PoolStatus, 0, len(pools))
	for _, p := range pools {
		cs, as := p.ctl.Status(), p.loop.Status()
		ps := head.PoolStatus{Name: p.cfg.Name, Provider: p.cfg.Provider.Type, Policy: p.pol.Name(), Nodes: p.cfg.Nodes,
			Desired: cs.Desired, Ready: cs.Current, Pending: cs.Pending, Draining: cs.Draining,
			Reason: as.Reason, DecidedAt: as.At}
		for _, n := range cs.Nodes {
			state := head.NodePending
			switch {
			case n.Draining:
				state = head.NodeDraining
			case n.Joined:
				state = head.NodeReady
			}
			ps.Machines = append(ps.Machines, head.MachineStatus{Ordinal: int(n.ID), MachineID: n.MachineID,
				Offering: n.Offering, State: state, Resources: offeringResources(p.cfg.Offerings, n.Offering),
				PricePerHour: offeringPrice(p.cfg.Offerings, n.Offering)})
		}
		out = append(out, ps)
	}
	return out
}

// offeringPrice returns the price per hour of the named offering.
func offeringPrice(offs []capacity.Offering, name string) float64 {
	for _, o := range offs {
		if o.Name() == name {
			return o.PricePerHour
		}
	}
	return 0
}

// offeringResources returns the resources of the named offering.
func offeringResources(offs []capacity.Offering, name string) capacity.Resources {
	for _, o := range offs {
		if o.Name() == name {
			return o.Resources
		}
	}
	return capacity.Resources{}
}
