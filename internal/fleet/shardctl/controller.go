package shardctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/sdk/provider"
)

// ErrDeposed is returned (wrapped) once another controller holds the shard:
// a provider refused a call with a stale fence, etcd refused a guarded write,
// or the shard was taken while this controller's lease was lost.
var ErrDeposed = errors.New("shard controller deposed: another controller holds the shard")

// ErrNotStarted is returned by calls that need the shard taken over first.
var ErrNotStarted = errors.New("shard controller not started")

// Defaults of Config.
const (
	DefaultInterval   = time.Second
	DefaultLeaseTTL   = 10 * time.Second
	DefaultMaxRetries = 5
)

// Config configures one shard controller.
type Config struct {
	// Shard is the shard's id, 1 or more.
	Shard fleet.ShardID
	// Holder names this controller (process) in the ownership key; it
	// defaults to "s<shard>".
	Holder string
	// Address is where this controller's Fleet API listens, published for
	// the coordinator and clients.
	Address string
	// Pool is the provider pool of the shard's machines; default
	// "fleet-s<shard>".
	Pool string
	// Interval is the decision cycle's period. Default 1s.
	Interval time.Duration
	// LeaseTTL is the ownership lease's time to live (whole seconds, at
	// least 1). Default 10s.
	LeaseTTL time.Duration
	// MaxRetries bounds the attempts of a Create or Configure that keeps
	// failing with transient errors before the machine is given up. Default 5.
	MaxRetries int
	// BootstrapTimeout bounds the wait for a cluster's answer to a bootstrap
	// request; then the machine returns to Idle. Default 2m.
	BootstrapTimeout time.Duration
	// Engine configures the shard's decision engine.
	Engine fleet.Config
}

func (c Config) withDefaults() Config {
	if c.Holder == "" {
		c.Holder = c.Shard.String()
	}
	if c.Pool == "" {
		c.Pool = fmt.Sprintf("fleet-s%d", uint16(c.Shard))
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.BootstrapTimeout == 0 {
		c.BootstrapTimeout = DefaultBootstrapTimeout
	}
	return c
}

// Validate checks the fields; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if c.Shard == 0 {
		errs = append(errs, errors.New("shard: must be 1 or more"))
	}
	if err := (&provider.DrainRequest{Fence: provider.Fence{Controller: "x", Epoch: 1}, Pool: c.Pool,
		MachineID: "x"}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pool: %w", err))
	}
	if len(c.Pool) > 40 {
		errs = append(errs, fmt.Errorf("pool: %q is longer than 40 characters (machine ids add to it)", c.Pool))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval: must be positive, got %s", c.Interval))
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease_ttl: must be whole seconds, at least 1s, got %s", c.LeaseTTL))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("max_retries: must be positive, got %d", c.MaxRetries))
	}
	if _, err := c.Engine.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("engine: %w", err))
	}
	return errors.Join(errs...)
}

// Operator is the cluster side of Configure and Drain (BigFleet §13,
// ClusterOperator).
type Operator interface {
	// Bootstrap returns the opaque blob that joins one machine (the
	// provider's id) of profile to the cluster: GenerateBootstrap, on
	// demand. ErrBootstrapPending: asked, not answered yet (Configure is
	// tried again next cycle); ErrBootstrapRefused: the machine goes back
	// to Idle.
	Bootstrap(ctx context.Context, cluster, machine, profile string) ([]byte, error)
	// Cordon asks the cluster to stop placing work on the machine and to
	// move its work away within grace; the controller calls the provider's
	// Drain once grace has passed. reason is for the cluster's events.
	Cordon(ctx context.Context, cluster, machine string, grace time.Duration, reason string) error
}

// Deps are the controller's collaborators.
type Deps struct {
	// Store is the fleet's state in etcd. Required.
	Store *etcdstate.Store
	// Providers by name (the names of the fleet's provider registry).
	// Required: every provider the shard's quota or machines name.
	Providers map[string]provider.Provider
	// Clock drives the cycles; default the wall clock.
	Clock clock.Clock
	// Logger; default discards.
	Logger *slog.Logger
	// Operator; default: a cluster that is its own operator is asked for
	// each machine's blob and told of cordons through its SendNeeds
	// answers; for other clusters, the static blob sent with their needs.
	Operator Operator
}

// opKind is a provider call the controller still has to make (or finish)
// for a machine.
type opKind uint8

const (
	opNone opKind = iota
	opCreate
	opConfigure
	opDrain
	opDelete
)

// mach is the controller's side of one shard slot.
type mach struct {
	id      string // provider machine id; "" for a Speculative slot
	prov    string // provider name
	op      opKind
	issued  bool      // the provider accepted the call
	due     time.Time // opDrain: when to call Drain; opConfigure: until when to wait for the blob
	cluster fleet.ClusterID
	tries   int
}

// doomed is a machine to delete until NotFound; it is no longer in the shard.
type doomed struct {
	prov, id string
	record   bool // its machine record is removed once it is gone
}

// Controller drives one shard. Cycle, Start and Run must not be called
// concurrently with each other (one goroutine owns the shard); SubmitNeeds,
// Status and Shortfalls are safe from any goroutine.
type Controller struct {
	cfg   Config
	store *etcdstate.Store
	provs map[string]provider.Provider
	clock clock.Clock
	log   *slog.Logger
	op    Operator
	poke  chan struct{}

	// Owned by the cycle goroutine.
	started    bool
	deposed    bool
	session    *concurrency.Session
	lease      clientv3.LeaseID
	lost       bool // the lease is gone: detached until retaken
	epoch      int64
	seq        uint64
	cat        *fleet.Catalog
	shard      *fleet.Shard
	machs      []mach
	byID       map[string]fleet.MachineID
	next       uint64 // machine id counter within the epoch
	quota      []etcdstate.QuotaEntry
	doomed     map[string]doomed
	unrecord   []string // machine records to delete
	pending    *pendingCommit
	preempts   map[string]*preemptRun
	held       map[string]bool // machines exported but not yet recorded so
	known      map[string]bool // directive ids seen
	seenMax    string
	inFlight   []etcdstate.Directive
	wanted     []fleet.ProfileID
	refusedSet map[string]bool
	refused    uint64
	paused     string
	cycleErr   error
	runCtx     context.Context
	stopRun    context.CancelFunc

	mu        sync.Mutex
	inbox     map[fleet.ClusterID]fleet.ClusterCapacityNeeds
	releases  map[fleet.ClusterID][]string // inbox needs' released machines, by provider id
	operators map[fleet.ClusterID]*opCluster
	// clusterStatus is refreshed by the cycle at most once per clusterEvery
	// (clustersAt, owned by the cycle goroutine).
	clusterStatus []*fleetv1.ClusterStatus
	clustersAt    time.Time
	needs         map[fleet.ClusterID]fleet.ClusterCapacityNeeds // latest, fed again after a rebuild
	blobs         map[fleet.ClusterID][]byte
	names         map[fleet.ClusterID]string
	clusters      map[string]fleet.ClusterID
	catalog       *fleet.Catalog
	status        Status
	sfs           []fleet.Shortfall
}

// New returns the controller of cfg.Shard. It does no I/O: Start (or the
// first Cycle) takes the shard over.
func New(cfg Config, deps Deps) (*Controller, error) {
	cfg = cfg.withDefaults()
	errs := []error{cfg.Validate()}
	if deps.Store == nil {
		errs = append(errs, errors.New("store: must be set"))
	}
	if len(deps.Providers) == 0 {
		errs = append(errs, errors.New("providers: at least one is needed"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("shard controller %s: %w", cfg.Shard, err)
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, store: deps.Store, provs: deps.Providers, clock: clk,
		log: logger.With("shard", cfg.Shard.String()), poke: make(chan struct{}, 1),
		inbox: map[fleet.ClusterID]fleet.ClusterCapacityNeeds{}, needs: map[fleet.ClusterID]fleet.ClusterCapacityNeeds{},
		blobs: map[fleet.ClusterID][]byte{}, names: map[fleet.ClusterID]string{}, clusters: map[string]fleet.ClusterID{},
		known: map[string]bool{}, releases: map[fleet.ClusterID][]string{}, operators: map[fleet.ClusterID]*opCluster{}}
	c.op = deps.Operator
	if c.op == nil {
		c.op = clusterOperator{c}
	}
	c.runCtx, c.stopRun = context.WithCancel(context.Background())
	c.status = Status{Shard: cfg.Shard, Address: cfg.Address, Paused: "not started"}
	return c, nil
}

// Epoch returns the controller's fencing epoch (0 before Start).
func (c *Controller) Epoch() int64 { return c.epoch }

// Config returns the configuration with defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Run drives the controller until ctx is done (it then releases the shard
// and returns nil) or it is deposed (ErrDeposed). It cycles at once, then
// every Interval of the Clock, and when needs arrive. Errors of single
// cycles (etcd or providers unreachable) are logged and retried.
func (c *Controller) Run(ctx context.Context) error {
	t := c.clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	defer c.Close()
	for {
		if err := c.Cycle(ctx); err != nil {
			if errors.Is(err, ErrDeposed) {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("cycle failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-c.poke:
		}
	}
}

// Close releases the shard (revokes the lease, so a successor need not wait
// for it to expire) and stops the session.
func (c *Controller) Close() {
	if c.session != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.store.Timeout())
		_, _ = c.store.Client().Revoke(ctx, c.lease)
		cancel()
		c.session.Orphan()
		c.session = nil
	}
	c.stopRun()
}

// Cycle runs one decision cycle at the Clock's now (see the package doc). It
// takes the shard over first if it has not yet. It returns an error when it
// could not take the shard (retried on the next cycle), ErrDeposed, or the
// first failure it met (the cycle carries on past failures).
func (c *Controller) Cycle(ctx context.Context) error {
	if c.deposed {
		return ErrDeposed
	}
	now := c.clock.Now()
	c.cycleErr = nil
	c.paused = ""
	if !c.started {
		if err := c.Start(ctx); err != nil {
			c.setPaused("not started: " + err.Error())
			return err
		}
	}
	c.checkLease(ctx)
	if c.deposed {
		return ErrDeposed
	}
	if c.lost {
		c.pause("lease lost: retaking the shard")
	}
	c.observe(ctx, now)
	c.retry(ctx, now)
	c.directives(ctx, now)
	acts, err := c.shard.Decide(now, c.takeInbox()...)
	if err != nil { // needs are validated on arrival: a bug
		c.fail(fmt.Errorf("decide: %w", err))
	}
	c.act(ctx, now, acts)
	if c.deposed {
		return ErrDeposed
	}
	c.publish(ctx, now)
	return c.cycleErr
}

func (c *Controller) fail(err error) {
	if errors.Is(err, ErrDeposed) {
		c.deposed = true
	}
	if c.cycleErr == nil {
		c.cycleErr = err
	}
	c.log.Warn("cycle", "err", err)
}

// pause records why new provisioning waits (the first reason of a cycle).
func (c *Controller) pause(why string) {
	if c.paused == "" {
		c.paused = why
	}
}

func (c *Controller) setPaused(why string) {
	c.mu.Lock()
	c.status.Paused = why
	c.mu.Unlock()
}

func (c *Controller) fence() provider.Fence {
	c.seq++
	return provider.Fence{Controller: c.cfg.Shard.String(), Epoch: uint64(c.epoch), Seq: c.seq}
}

// checkLease notices a lost lease and tries to take the shard again: the
// old lease is revoked (it is ours) and Start rebuilds the shard under a new
// lease and epoch. Until then the controller keeps acting on its machines
// with its old epoch, without provisioning. If another controller holds the
// shard, this one is deposed.
func (c *Controller) checkLease(ctx context.Context) {
	if c.session != nil {
		select {
		case <-c.session.Done():
			c.lost = true
			c.session = nil
			c.log.Warn("lease lost; acting with the old epoch, without provisioning, until the shard is retaken")
		default:
			return
		}
	}
	if !c.lost {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
	_, err := c.store.Client().Revoke(rctx, c.lease)
	cancel()
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		c.pause("lease lost, etcd unreachable: " + err.Error())
		return
	}
	switch err := c.Start(ctx); {
	case errors.Is(err, etcdstate.ErrShardHeld):
		c.deposed = true
		c.log.Error("shard taken by another controller while the lease was lost", "err", err)
	case err != nil:
		c.pause("lease lost: " + err.Error())
	default:
		c.log.Info("shard retaken and rebuilt under a new epoch", "epoch", c.epoch)
	}
}

func (c *Controller) owner() etcdstate.Owner {
	return etcdstate.Owner{Shard: uint16(c.cfg.Shard), Holder: c.cfg.Holder, Address: c.cfg.Address}
}

// newSession grants a lease (bounded by the store's timeout) and keeps it
// alive until the controller closes.
func (c *Controller) newSession(ctx context.Context) (*concurrency.Session, clientv3.LeaseID, error) {
	gctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
	defer cancel()
	g, err := c.store.Client().Grant(gctx, int64(c.cfg.LeaseTTL/time.Second))
	if err != nil {
		return nil, 0, fmt.Errorf("lease: %w", err)
	}
	s, err := concurrency.NewSession(c.store.Client(), concurrency.WithLease(g.ID), concurrency.WithContext(c.runCtx))
	if err != nil {
		return nil, 0, fmt.Errorf("lease: %w", err)
	}
	return s, g.ID, nil
}

// Status is what a shard controller says about itself.
type Status struct {
	// Shard and Address identify the shard and its API.
	Shard   fleet.ShardID
	Address string
	// Epoch is the fencing epoch; Started is set once the shard is taken.
	Epoch   int64
	Started bool
	// Cycle counts the decision cycles of the current epoch's shard.
	Cycle uint64
	// Summary is the shard's summary as the coordinator sees it.
	Summary fleet.ShardSummary
	// Clusters counts the clusters that have sent needs; Escalated the
	// shortfalls escalated to the coordinator.
	Clusters  int
	Escalated int
	// Refused counts directives refused as stale (a deposed coordinator's).
	Refused uint64
	// Paused says why new provisioning waits; empty when it does not.
	Paused string
	// Deposed is set once another controller holds the shard.
	Deposed bool
	// Updated is the time of the last cycle.
	Updated time.Time
	// Directives are the coordinator's directives naming this shard.
	Directives []etcdstate.Directive
}

// Status returns the controller's last status (as of its last cycle).
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Shortfalls returns the shard's shortfalls as of its last cycle, highest
// priority first, and the engine's escalation age.
func (c *Controller) Shortfalls() (sfs []fleet.Shortfall, escalateAfter int) {
	cfg, _ := c.cfg.Engine.Validate()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]fleet.Shortfall(nil), c.sfs...), cfg.EscalateAfter
}

// Catalog returns the fleet's catalog once the shard is started (nil before).
func (c *Controller) Catalog() *fleet.Catalog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.catalog
}

// clampCount converts a count for the engine.
func clampCount(n uint32) int { return int(min(n, math.MaxInt32)) }
