package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
)

// ErrNotLeader is returned by Cycle when this replica does not lead (or has
// just been deposed: its guarded write was refused).
var ErrNotLeader = errors.New("coordinator is not the leader")

// Defaults of Config.
const (
	DefaultInterval = 2 * time.Second
	DefaultLeaseTTL = 10 * time.Second
)

// Config configures one coordinator replica.
type Config struct {
	// ID names the replica (its value in the election). Required.
	ID string
	// Address is where the replica's Fleet API listens.
	Address string
	// Interval is the planning period. Default 2s.
	Interval time.Duration
	// LeaseTTL is the election session's time to live (whole seconds, at
	// least 1): how long a dead leader blocks the next. Default 10s.
	LeaseTTL time.Duration
	// Plan tunes fleet.PlanShortfalls (cross-shard preemption is off unless
	// enabled there).
	Plan fleet.CoordinatorConfig
}

// Validate checks the fields; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("id: must be set"))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval: must be positive, got %s", c.Interval))
	}
	if c.LeaseTTL != 0 && (c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0) {
		errs = append(errs, fmt.Errorf("lease_ttl: must be whole seconds, at least 1s, got %s", c.LeaseTTL))
	}
	if _, err := c.Plan.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("plan: %w", err))
	}
	return errors.Join(errs...)
}

// Deps are the coordinator's collaborators.
type Deps struct {
	// Store is the fleet's state in etcd. Required.
	Store *etcdstate.Store
	// Clock drives the planning cycles; default the wall clock.
	Clock clock.Clock
	// Logger; default discards.
	Logger *slog.Logger
}

// Coordinator is one replica. Campaign, Cycle and Run are for one
// goroutine; AssignCluster, Status and the Fleet API are safe from any.
type Coordinator struct {
	cfg   Config
	plan  fleet.CoordinatorConfig
	store *etcdstate.Store
	clock clock.Clock
	log   *slog.Logger

	// Owned by the campaigning goroutine.
	session  *concurrency.Session
	lease    clientv3.LeaseID
	election *concurrency.Election
	seq      uint64
	wanted   []string
	runCtx   context.Context
	stopRun  context.CancelFunc

	mu       sync.Mutex
	leading  bool
	term     int64
	cycles   uint64
	inFlight int
	cat      *fleet.Catalog
	counts   map[uint16]int // clusters per shard
	countsOK bool
	ids      *etcdstate.ClusterIDs
	last     CycleReport
}

// New returns a replica. It does no I/O.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	errs := []error{cfg.Validate()}
	if deps.Store == nil {
		errs = append(errs, errors.New("store: must be set"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	plan, _ := cfg.Plan.Validate()
	clk := deps.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, plan: plan, store: deps.Store, clock: clk, log: logger.With("coordinator", cfg.ID),
		counts: map[uint16]int{}, ids: deps.Store.NewClusterIDs()}
	c.runCtx, c.stopRun = context.WithCancel(context.Background())
	return c, nil
}

// Campaign blocks until this replica leads (or ctx is done). On winning it
// takes a new term: the election key's create revision.
func (c *Coordinator) Campaign(ctx context.Context) error {
	if c.Leading() {
		return nil
	}
	if c.session == nil {
		gctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
		g, err := c.store.Client().Grant(gctx, int64(c.cfg.LeaseTTL/time.Second))
		cancel()
		if err != nil {
			return fmt.Errorf("campaign: lease: %w", err)
		}
		s, err := concurrency.NewSession(c.store.Client(), concurrency.WithLease(g.ID), concurrency.WithContext(c.runCtx))
		if err != nil {
			return fmt.Errorf("campaign: session: %w", err)
		}
		c.session, c.lease = s, g.ID
	}
	e := concurrency.NewElection(c.session, c.store.ElectionPrefix())
	if err := e.Campaign(ctx, c.cfg.ID); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	c.election, c.seq = e, 0
	c.mu.Lock()
	c.leading, c.term = true, e.Rev()
	c.mu.Unlock()
	c.log.Info("leading", "term", e.Rev())
	return nil
}

// Leading reports whether this replica believes it leads.
func (c *Coordinator) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// Term returns the replica's last term (0 before it first led).
func (c *Coordinator) Term() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

func (c *Coordinator) depose(why string) {
	c.mu.Lock()
	was := c.leading
	c.leading = false
	c.mu.Unlock()
	if was {
		c.log.Warn("no longer leading", "why", why)
	}
}

// guard is the leader's write guard.
func (c *Coordinator) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(c.election.Key()), "=", c.election.Rev())
}

// Resign gives up leadership (the next replica takes over at once).
func (c *Coordinator) Resign(ctx context.Context) error {
	if c.election == nil || !c.Leading() {
		return nil
	}
	c.depose("resigned")
	rctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
	defer cancel()
	return c.election.Resign(rctx)
}

// Close resigns and releases the session.
func (c *Coordinator) Close() {
	if c.session != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.store.Timeout())
		_ = c.Resign(ctx)
		_, _ = c.store.Client().Revoke(ctx, c.lease)
		cancel()
		c.session.Orphan()
		c.session = nil
	}
	c.depose("closed")
	c.stopRun()
}

// Run campaigns, plans every Interval while it leads, and campaigns again
// when it loses the lead, until ctx is done (it then resigns).
func (c *Coordinator) Run(ctx context.Context) error {
	defer c.Close()
	t := c.clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if !c.Leading() {
			if err := c.Campaign(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				c.log.Warn("campaign failed", "err", err)
				c.dropSession()
				select {
				case <-ctx.Done():
					return nil
				case <-t.C():
				}
				continue
			}
		}
		if _, err := c.Cycle(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("planning cycle failed", "err", err)
		}
		var done <-chan struct{}
		if c.session != nil {
			done = c.session.Done()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			c.depose("session expired")
			c.dropSession()
		case <-t.C():
		}
	}
	return nil
}

func (c *Coordinator) dropSession() {
	if c.session != nil {
		c.session.Orphan()
		c.session = nil
	}
}

// CycleReport says what one planning cycle saw and did.
type CycleReport struct {
	Term        int64
	Shards      int
	Escalations int
	InFlight    int
	Directives  []etcdstate.Directive // written
	Unanswered  []fleet.Unanswered
	Deleted     int // done directives removed
	Took        time.Duration
}

func (c *Coordinator) catalog(ctx context.Context) (*fleet.Catalog, error) {
	c.mu.Lock()
	cat := c.cat
	c.mu.Unlock()
	if cat != nil {
		return cat, nil
	}
	conf, err := c.store.LoadConfig(ctx)
	if err != nil {
		return nil, err
	}
	if cat, err = conf.Catalog(); err != nil {
		return nil, fmt.Errorf("fleet config: %w", err)
	}
	c.mu.Lock()
	c.cat = cat
	c.mu.Unlock()
	return cat, nil
}

type flightKey struct {
	shard    uint16
	profile  string
	priority int32
}

// Cycle runs one planning cycle as the leader (see the package doc).
func (c *Coordinator) Cycle(ctx context.Context) (CycleReport, error) {
	if !c.Leading() {
		return CycleReport{}, ErrNotLeader
	}
	if c.session != nil {
		select {
		case <-c.session.Done():
			c.depose("session expired")
			c.dropSession()
			return CycleReport{}, ErrNotLeader
		default:
		}
	}
	start := c.clock.Now()
	cat, err := c.catalog(ctx)
	if err != nil {
		return CycleReport{}, err
	}
	reports, err := c.store.LoadReports(ctx)
	if err != nil {
		return CycleReport{}, err
	}
	state, err := c.store.LoadCoord(ctx)
	if err != nil {
		return CycleReport{}, err
	}
	rep, ds, done := Plan(c.plan, cat, reports, state.Directives)
	rep.Term = c.Term()
	if len(done) > 0 {
		if err := c.store.DeleteDirectives(ctx, c.guard(), done); err != nil {
			return rep, c.writeFailed(err)
		}
		rep.Deleted = len(done)
	}
	for i := range ds {
		c.seq++
		ds[i].Term, ds[i].Seq = rep.Term, c.seq
		ds[i].ID = etcdstate.DirectiveID(rep.Term, c.seq)
		ds[i].Created = start
	}
	if len(ds) > 0 {
		if err := c.store.WriteDirectives(ctx, c.guard(), ds); err != nil {
			return rep, c.writeFailed(err)
		}
		rep.Directives = ds
		for _, d := range ds {
			c.log.Info("directive", "id", d.ID, "kind", d.Kind, "from", d.From, "to", d.To, "profile", d.Profile,
				"count", d.Count)
		}
	}
	wanted := wantedProfiles(cat, reports)
	if !slices.Equal(wanted, state.Wanted) {
		if err := c.store.PutWanted(ctx, c.guard(), wanted); err != nil {
			return rep, c.writeFailed(err)
		}
	}
	rep.Took = c.clock.Now().Sub(start)
	c.mu.Lock()
	c.cycles++
	c.inFlight = rep.InFlight + len(ds)
	c.last = rep
	c.mu.Unlock()
	return rep, nil
}

func (c *Coordinator) writeFailed(err error) error {
	if errors.Is(err, etcdstate.ErrFenced) {
		c.depose("a guarded write was refused")
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// Plan is the pure part of a planning cycle: from the shards' reports and
// the directives in etcd it computes the new directives (without term,
// sequence or id) and the done directives to delete. A directive counts as
// in flight until it is done and its recipient has reported after that; its
// count is taken off the recipient's escalation of the same profile and
// priority, and, until its donor has reported after its last step, off the
// donor's spare capacity.
func Plan(cfg fleet.CoordinatorConfig, cat *fleet.Catalog, reports map[uint16]etcdstate.Report,
	directives []etcdstate.Directive) (CycleReport, []etcdstate.Directive, []string) {
	rep := CycleReport{Shards: len(reports)}
	flight := map[flightKey]int32{}
	type donorKey struct {
		shard   uint16
		profile fleet.ProfileID
		kind    string
	}
	donated := map[donorKey]uint32{}
	var done []string
	for _, d := range directives {
		to, toOK := reports[d.To]
		if d.State == etcdstate.StateDone && toOK && to.Revision > d.ModRevision {
			done = append(done, d.ID)
			continue
		}
		rep.InFlight++
		flight[flightKey{d.To, d.Profile, d.Priority}] += int32(min(d.Count, 1<<30))
		from, fromOK := reports[d.From]
		if p, ok := cat.Profile(d.Profile); ok && (!fromOK || d.State == etcdstate.StatePending ||
			from.Revision < d.ModRevision) {
			donated[donorKey{d.From, p, d.Kind}] += d.Count
		}
	}
	shards := slices.Sorted(maps.Keys(reports))
	summaries := make([]fleet.ShardSummary, 0, len(shards))
	var escalations []fleet.Escalation
	for _, id := range shards {
		r := reports[id]
		sum := r.Summary
		sum.Shard = fleet.ShardID(id)
		for i := range sum.Spares() {
			sp := &sum.Spare[i]
			sp.Idle -= min(sp.Idle, donated[donorKey{id, sp.Profile, fleet.ReassignIdle.String()}])
			sp.Speculative -= min(sp.Speculative, donated[donorKey{id, sp.Profile, fleet.ReassignQuota.String()}])
			sp.Configured -= min(sp.Configured, donated[donorKey{id, sp.Profile, fleet.Preempt.String()}])
		}
		summaries = append(summaries, sum)
		for _, sf := range r.Escalated() {
			k := flightKey{id, cat.ProfileName(sf.Profile), sf.Priority}
			covered := min(flight[k], sf.Count)
			flight[k] -= covered
			sf.Count -= covered
			if sf.Count > 0 {
				escalations = append(escalations, fleet.Escalation{Shard: fleet.ShardID(id), Shortfall: sf})
			}
		}
	}
	rep.Escalations = len(escalations)
	plan, err := fleet.PlanShortfalls(cfg, summaries, escalations)
	if err != nil { // the reports are the shards' own summaries: not expected
		return rep, nil, done
	}
	rep.Unanswered = plan.Unanswered
	ds := make([]etcdstate.Directive, 0, len(plan.Directives))
	for _, d := range plan.Directives {
		ds = append(ds, etcdstate.Directive{Kind: d.Kind.String(), From: uint16(d.From), To: uint16(d.To),
			Profile: cat.ProfileName(d.Profile), Count: d.Count, Priority: d.Priority, MinGap: cfg.MinPreemptGap,
			State: etcdstate.StatePending})
	}
	return rep, ds, done
}

// wantedProfiles are the profiles with escalations, sorted: shards put them
// first in their summaries.
func wantedProfiles(cat *fleet.Catalog, reports map[uint16]etcdstate.Report) []string {
	set := map[string]bool{}
	for _, r := range reports {
		for _, sf := range r.Escalated() {
			set[cat.ProfileName(sf.Profile)] = true
		}
	}
	out := slices.Sorted(maps.Keys(set))
	if out == nil {
		out = []string{}
	}
	return out
}

// AssignCluster returns the cluster's shard, assigning it on first contact
// to the live shard with the fewest clusters (lowest id on ties). Safe for
// concurrent use, by any replica.
func (c *Coordinator) AssignCluster(ctx context.Context, name string) (etcdstate.ClusterRecord, bool, error) {
	picked, ok := uint16(0), false
	rec, first, err := c.store.AssignCluster(ctx, name, func() (uint16, error) {
		s, err := c.pick(ctx)
		picked, ok = s, err == nil
		return s, err
	}, c.ids)
	if ok && (err != nil || !first) { // the tentative count of the pick was not used
		c.mu.Lock()
		c.counts[picked]--
		c.mu.Unlock()
	}
	return rec, first, err
}

func (c *Coordinator) pick(ctx context.Context) (uint16, error) {
	owners, err := c.store.LoadOwners(ctx)
	if err != nil {
		return 0, err
	}
	if len(owners) == 0 {
		return 0, errors.New("cluster: no live shard to assign it to")
	}
	c.mu.Lock()
	ok := c.countsOK
	c.mu.Unlock()
	if !ok {
		all, err := c.store.LoadClusters(ctx)
		if err != nil {
			return 0, err
		}
		counts := map[uint16]int{}
		for _, r := range all {
			counts[r.Shard]++
		}
		c.mu.Lock()
		if !c.countsOK { // another first contact may have loaded them meanwhile and counted picks since
			c.counts, c.countsOK = counts, true
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	live := slices.Sorted(maps.Keys(owners))
	s := slices.MinFunc(live, func(a, b uint16) int {
		return cmp.Or(cmp.Compare(c.counts[a], c.counts[b]), cmp.Compare(a, b))
	})
	c.counts[s]++ // tentatively: concurrent first contacts spread out
	return s, nil
}

// firstCreated selects the oldest key of a prefix: the election's leader.
func firstCreated() []clientv3.OpOption {
	return clientv3.WithFirstCreate()
}
