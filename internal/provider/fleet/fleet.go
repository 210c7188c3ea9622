package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/atomicfile"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/sdk/provider"
)

// Defaults of Config.
const (
	DefaultPeriod      = 2 * time.Second
	DefaultCallTimeout = 5 * time.Second
)

// Joiner is the cluster side of the pool's machines.
type Joiner interface {
	// Blob makes the blob that joins one of the pool's machines to the
	// cluster (for a tide head, a credential that registers only that worker).
	Blob(ctx context.Context, pool, machine, offering string) ([]byte, error)
	// Preempt tells the cluster the fleet takes the machine back after
	// grace: stop placing work there and move what may move (why is for
	// its events).
	Preempt(ctx context.Context, pool, machine, why string, grace time.Duration) error
}

// Config configures a fleet-backed pool's provider.
type Config struct {
	// Coordinator is the Fleet API address (host:port) of a coordinator
	// (or of the cluster's shard) that first receives the needs.
	Coordinator string
	// Cluster is the cluster's name in the fleet.
	Cluster string
	// Pool is the pool's name (its machines' credentials name it).
	Pool string
	// Priority of the cluster's needs (higher first; decides preemption).
	Priority int32
	// InterruptionPenalty is what interrupting one machine costs, in dollars.
	InterruptionPenalty float64
	// Profile names the fleet profile of every offering; empty: each
	// offering's type is its profile.
	Profile string
	// Offerings are the pool's offerings (what one machine of a profile
	// provides, for the policy).
	Offerings []capacity.Offering
	// StateDir holds the claims file; required.
	StateDir string
	// Period is how often the needs are sent with no change; default 2s.
	Period time.Duration
	// Joiner makes the machines' blobs; required.
	Joiner Joiner
	// Clock; default the wall clock.
	Clock clock.Clock
	// Logger; default discards.
	Logger *slog.Logger
}

// claim is one machine the pool asked for.
type claim struct {
	ID       string            `json:"id"`
	Offering string            `json:"offering"`
	Profile  string            `json:"profile"`
	Labels   map[string]string `json:"labels,omitempty"`
	Created  time.Time         `json:"created"`
	Updated  time.Time         `json:"updated"`
	// Machine is the fleet machine bound to the claim; empty while waiting.
	Machine string `json:"machine,omitempty"`
	// Joined is set once the shard lists the machine as configured.
	Joined bool `json:"joined,omitempty"`
	// Leaving is set by Drain: the machine is given back.
	Leaving bool `json:"leaving,omitempty"`
	// Deleted is set by Delete.
	Deleted bool `json:"deleted,omitempty"`
	// Preempted is set once the fleet takes the machine back for a need
	// of higher priority (Reason says which); the claim no longer counts
	// in the needs, and is gone once the fleet has drained the machine.
	Preempted bool   `json:"preempted,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// stateFile is the provider's durable state.
type stateFile struct {
	Version int                       `json:"version"`
	Claims  map[string]*claim         `json:"claims"`
	Gone    map[string]bool           `json:"gone,omitempty"`
	Fences  map[string]provider.Fence `json:"fences,omitempty"`
}

// Provider is a pool's view of the fleet: see the package doc.
type Provider struct {
	cfg  Config
	clk  clock.Clock
	log  *slog.Logger
	offs map[string]capacity.Offering
	conn *grpc.ClientConn // to the coordinator
	poke chan struct{}
	stop context.CancelFunc
	done chan struct{}
	path string

	mu        sync.Mutex
	st        stateFile
	fences    provider.FenceTable
	answers   []*fleetv1.BootstrapAnswer // for the next needs
	unknown   []string                   // machines listed for the cluster that no claim holds
	shardAddr string
	shardConn *grpc.ClientConn
	status    Status
}

// Status is what the pool asked of the fleet and what it was granted.
type Status struct {
	// Cluster is the cluster's name in the fleet.
	Cluster string
	// Asked counts the machines the needs ask for, per profile.
	Asked map[string]int32
	// Granted counts the machines bound to the cluster, per profile.
	Granted map[string]int32
	// LastSend is when the needs last reached the fleet; LastError why the
	// last send failed ("" when it did not).
	LastSend  time.Time
	LastError string
	// Shard is the cluster's shard.
	Shard uint32
	// Short counts the machines asked for and not granted; Why says what
	// the shard lacks (its shortfall at the pool's priority), or that
	// machines are on their way.
	Short int32
	Why   string
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider and starts sending the cluster's needs.
func New(cfg Config) (*Provider, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{{"coordinator", cfg.Coordinator}, {"cluster", cfg.Cluster},
		{"pool", cfg.Pool}, {"state_dir", cfg.StateDir}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s: must be set", f.name))
		}
	}
	if cfg.Joiner == nil {
		errs = append(errs, errors.New("joiner: must be set"))
	}
	if len(cfg.Offerings) == 0 {
		errs = append(errs, errors.New("offerings: at least one is needed"))
	}
	if cfg.Priority < 0 {
		errs = append(errs, fmt.Errorf("priority: must not be negative, got %d", cfg.Priority))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	conn, err := grpc.NewClient(cfg.Coordinator, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	p := &Provider{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, offs: map[string]capacity.Offering{}, conn: conn,
		poke: make(chan struct{}, 1), done: make(chan struct{}), path: filepath.Join(cfg.StateDir, "fleet-claims.json"),
		st: stateFile{Version: 1, Claims: map[string]*claim{}, Gone: map[string]bool{}}}
	for _, o := range cfg.Offerings {
		p.offs[o.Name()] = o
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		conn.Close()
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	data, err := os.ReadFile(p.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		conn.Close()
		return nil, fmt.Errorf("state_dir: %w", err)
	default:
		if err := json.Unmarshal(data, &p.st); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: %w", p.path, err)
		}
		for pool, f := range p.st.Fences {
			_ = p.fences.Admit(pool, f)
		}
		if p.st.Gone == nil {
			p.st.Gone = map[string]bool{}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go p.run(ctx)
	return p, nil
}

// Close stops sending needs; the claims stay in the state file for the
// next provider on the same directory.
func (p *Provider) Close() error {
	p.stop()
	<-p.done
	p.mu.Lock()
	if p.shardConn != nil {
		p.shardConn.Close()
	}
	p.mu.Unlock()
	return p.conn.Close()
}

// Status returns what was asked and granted.
func (p *Provider) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.status
	s.Cluster = p.cfg.Cluster
	s.Asked, s.Granted = maps.Clone(s.Asked), maps.Clone(s.Granted)
	return s
}

// Offerings returns the pool's offerings.
func (p *Provider) Offerings(context.Context) ([]provider.Offering, error) {
	return slices.Clone(p.cfg.Offerings), nil
}

func (p *Provider) profileOf(offering string) string {
	if p.cfg.Profile != "" {
		return p.cfg.Profile
	}
	return p.offs[offering].Type
}

// save writes the state; called with p.mu held.
func (p *Provider) save() error {
	p.st.Fences = map[string]provider.Fence{}
	if f, ok := p.fences.Highest(p.cfg.Pool); ok {
		p.st.Fences[p.cfg.Pool] = f
	}
	data, err := json.MarshalIndent(&p.st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p.path, data); err != nil {
		return provider.NewTransient(fmt.Errorf("fleet provider: save claims: %w", err), 0)
	}
	return nil
}

func (p *Provider) wake() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// admit checks the pool and the fence of a mutating call; p.mu held.
func (p *Provider) admit(pool string, f provider.Fence) error {
	if pool != p.cfg.Pool {
		return provider.NewInvalid("pool", fmt.Sprintf("this provider serves pool %q, not %q", p.cfg.Pool, pool))
	}
	return p.fences.Admit(pool, f)
}

// Create claims a machine from the fleet.
func (p *Provider) Create(_ context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	if _, ok := p.offs[req.Offering]; !ok {
		return provider.Ack{}, provider.NewInvalid("offering", fmt.Sprintf("unknown offering %q", req.Offering))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(req.Pool, req.Fence); err != nil {
		return provider.Ack{}, err
	}
	if c, ok := p.st.Claims[req.MachineID]; ok {
		if c.Offering != req.Offering {
			return provider.Ack{}, provider.NewConflict(req.MachineID, p.stateOf(c), "exists with another offering")
		}
		return provider.Ack{MachineID: c.ID, State: p.stateOf(c), Replayed: true}, nil
	}
	if p.st.Gone[req.MachineID] {
		return provider.Ack{}, provider.NewConflict(req.MachineID, "", "was deleted; ids are never reused")
	}
	now := p.clk.Now()
	c := &claim{ID: req.MachineID, Offering: req.Offering, Profile: p.profileOf(req.Offering),
		Labels: maps.Clone(req.Labels), Created: now, Updated: now}
	p.st.Claims[c.ID] = c
	if err := p.save(); err != nil {
		delete(p.st.Claims, c.ID)
		return provider.Ack{}, err
	}
	p.wake()
	return provider.Ack{MachineID: c.ID, State: provider.Creating}, nil
}

// Configure is a replay: a claim joins the cluster as soon as the fleet
// binds a machine to it (the provider is the cluster's operator).
func (p *Provider) Configure(_ context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(req.Pool, req.Fence); err != nil {
		return provider.Ack{}, err
	}
	c, ok := p.st.Claims[req.MachineID]
	if !ok || c.Deleted {
		return provider.Ack{}, provider.NewNotFound(req.MachineID)
	}
	return provider.Ack{MachineID: c.ID, State: p.stateOf(c), Replayed: true}, nil
}

// Drain gives the claim's machine back to the fleet.
func (p *Provider) Drain(_ context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return p.leave(req.Pool, req.MachineID, req.Fence, req.Validate(), false)
}

// Delete drops the claim; its machine, if any, goes back to the fleet, and
// the claim is NotFound once the machine has left the cluster.
func (p *Provider) Delete(_ context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	return p.leave(req.Pool, req.MachineID, req.Fence, req.Validate(), true)
}

func (p *Provider) leave(pool, id string, f provider.Fence, invalid error, del bool) (provider.Ack, error) {
	if invalid != nil {
		return provider.Ack{}, invalid
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.admit(pool, f); err != nil {
		return provider.Ack{}, err
	}
	c, ok := p.st.Claims[id]
	if !ok {
		return provider.Ack{}, provider.NewNotFound(id)
	}
	replay := c.Leaving && (!del || c.Deleted)
	c.Leaving = true
	c.Deleted = c.Deleted || del
	if c.Machine == "" && c.Deleted {
		delete(p.st.Claims, id)
		p.st.Gone[id] = true
	}
	c.Updated = p.clk.Now()
	if err := p.save(); err != nil {
		return provider.Ack{}, err
	}
	p.wake()
	if _, still := p.st.Claims[id]; !still {
		return provider.Ack{}, provider.NewNotFound(id)
	}
	return provider.Ack{MachineID: id, State: p.stateOf(c), Replayed: replay}, nil
}

// stateOf maps a claim to the machine model; p.mu held.
func (p *Provider) stateOf(c *claim) provider.State {
	switch {
	case c.Deleted:
		return provider.Deleting
	case c.Leaving && c.Machine == "":
		return provider.Idle
	case c.Leaving:
		return provider.Draining
	case c.Machine == "":
		return provider.Creating
	case c.Joined:
		return provider.Configured
	}
	return provider.Configuring
}

func (p *Provider) machineOf(c *claim) provider.Machine {
	m := provider.Machine{ID: c.ID, Pool: p.cfg.Pool, Offering: c.Offering, State: p.stateOf(c),
		Labels: maps.Clone(c.Labels), CreatedAt: c.Created, UpdatedAt: c.Updated}
	switch m.State {
	case provider.Configuring, provider.Configured, provider.Draining:
		m.Host, m.Cluster = c.Machine, p.cfg.Cluster
	case provider.Idle:
		m.Host = "fleet"
	}
	return m
}

// Get returns one claim as a machine.
func (p *Provider) Get(_ context.Context, id string) (provider.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.st.Claims[id]
	if !ok {
		return provider.Machine{}, provider.NewNotFound(id)
	}
	return p.machineOf(c), nil
}

// List returns the claims that pass the filter, sorted by id.
func (p *Provider) List(_ context.Context, f provider.Filter) ([]provider.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Machine
	for _, id := range slices.Sorted(maps.Keys(p.st.Claims)) {
		if m := p.machineOf(p.st.Claims[id]); f.Matches(&m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// run sends the needs every Period and on every change.
func (p *Provider) run(ctx context.Context) {
	defer close(p.done)
	t := p.clk.NewTicker(p.cfg.Period)
	defer t.Stop()
	for {
		again := p.send(ctx)
		if again {
			continue // answers are waiting: send them at once
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-p.poke:
		}
	}
}

// needs builds the cluster's needs; p.mu held.
func (p *Provider) needs() *fleetv1.ClusterCapacityNeeds {
	count := map[string]int32{}
	for _, c := range p.st.Claims {
		if _, ok := count[c.Profile]; !ok {
			count[c.Profile] = 0
		}
		if !c.Leaving && !c.Preempted {
			count[c.Profile]++
		}
	}
	for _, o := range p.cfg.Offerings {
		if _, ok := count[p.profileOf(o.Name())]; !ok {
			count[p.profileOf(o.Name())] = 0
		}
	}
	m := &fleetv1.ClusterCapacityNeeds{Cluster: p.cfg.Cluster, Operator: true, Bootstraps: p.answers}
	for _, prof := range slices.Sorted(maps.Keys(count)) {
		m.Needs = append(m.Needs, &fleetv1.Need{Profile: prof, Count: count[prof], Priority: p.cfg.Priority,
			InterruptionPenalty: p.cfg.InterruptionPenalty})
	}
	for _, id := range slices.Sorted(maps.Keys(p.st.Claims)) {
		if c := p.st.Claims[id]; c.Leaving && c.Machine != "" {
			m.Release = append(m.Release, c.Machine)
		}
	}
	m.Release = append(m.Release, p.unknown...)
	p.status.Asked = count
	return m
}

// send delivers the needs once and handles the answer; it reports whether
// the answer asked for something to be sent back at once.
func (p *Provider) send(ctx context.Context) bool {
	p.mu.Lock()
	msg := p.needs()
	sent := len(msg.Bootstraps)
	client := fleetv1.NewFleetClient(p.conn)
	if p.shardConn != nil {
		client = fleetv1.NewFleetClient(p.shardConn)
	}
	p.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	resp, err := client.SendNeeds(cctx, &fleetv1.SendNeedsRequest{Needs: msg})
	cancel()
	if err != nil {
		p.mu.Lock()
		p.status.LastError = err.Error()
		if p.shardConn != nil { // the shard moved or is down: back to the coordinator
			p.shardConn.Close()
			p.shardConn, p.shardAddr = nil, ""
		}
		p.mu.Unlock()
		if ctx.Err() == nil {
			p.log.Warn("fleet: needs not delivered; machines keep running, new ones wait", "err", err)
		}
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers = p.answers[sent:]
	p.status.LastSend, p.status.LastError, p.status.Shard = p.clk.Now(), "", resp.GetShard()
	if a := resp.GetShardAddress(); a != "" && a != p.shardAddr {
		if cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			if p.shardConn != nil {
				p.shardConn.Close()
			}
			p.shardConn, p.shardAddr = cc, a
		}
	}
	changed := false
	if resp.GetMachinesListed() {
		changed = p.observe(resp.GetMachines())
	}
	p.explain(resp.GetShortfalls())
	for _, r := range resp.GetRequests() {
		changed = p.handle(ctx, r) || changed
	}
	if changed {
		if err := p.save(); err != nil {
			p.log.Error("fleet: saving claims", "err", err)
		}
	}
	return len(p.answers) > 0 || changed
}

// observe reconciles the claims with the machines the shard lists for the
// cluster; p.mu held. It reports whether a claim changed.
func (p *Provider) observe(ms []*fleetv1.ClusterMachine) bool {
	listed := map[string]string{}
	granted := map[string]int32{}
	for _, m := range ms {
		listed[m.GetMachine()] = m.GetState()
		granted[m.GetProfile()]++
	}
	p.status.Granted = granted
	held := map[string]bool{}
	changed := false
	now := p.clk.Now()
	for _, id := range slices.Sorted(maps.Keys(p.st.Claims)) {
		c := p.st.Claims[id]
		if c.Machine == "" {
			continue
		}
		held[c.Machine] = true
		st, ok := listed[c.Machine]
		was := *c
		switch {
		case !ok && c.Leaving && !c.Deleted:
			// Given back and gone from the cluster: the claim is Idle.
			c.Machine = ""
			changed = true
		case !ok:
			// Deleted, taken back (a preemption), given up while joining,
			// or lost: the claim is gone. It is never bound to another
			// machine: that machine would join with a second credential of
			// the same worker while the first may still run.
			delete(p.st.Claims, id)
			p.st.Gone[id] = true
			if !c.Deleted && !c.Preempted {
				p.log.Warn("fleet: a machine left the cluster without being given back", "claim", id, "machine", c.Machine,
					"joined", c.Joined)
			}
			changed = true
		case st == "configured" && !c.Joined:
			c.Joined = true
			changed = true
		}
		if c.Machine != was.Machine || c.Joined != was.Joined {
			c.Updated = now
		}
	}
	p.unknown = p.unknown[:0]
	for _, m := range ms {
		if !held[m.GetMachine()] && m.GetState() != "draining" {
			if pending := slices.ContainsFunc(p.answers, func(a *fleetv1.BootstrapAnswer) bool {
				return a.GetMachine() == m.GetMachine()
			}); !pending {
				p.unknown = append(p.unknown, m.GetMachine())
			}
		}
	}
	return changed
}

// handle answers one of the shard's requests; p.mu held.
func (p *Provider) handle(ctx context.Context, r *fleetv1.OperatorRequest) bool {
	now := p.clk.Now()
	switch r.GetKind() {
	case "bootstrap":
		for _, a := range p.answers {
			if a.GetMachine() == r.GetMachine() {
				return false
			}
		}
		var c *claim
		for _, id := range slices.Sorted(maps.Keys(p.st.Claims)) {
			x := p.st.Claims[id]
			if x.Machine == r.GetMachine() {
				c = x // asked again (an answer was lost): the same claim
				break
			}
			if c == nil && x.Machine == "" && !x.Leaving && !x.Preempted && x.Profile == r.GetProfile() {
				c = x
			}
		}
		if c == nil {
			p.answers = append(p.answers, &fleetv1.BootstrapAnswer{Machine: r.GetMachine(),
				Error: fmt.Sprintf("pool %s waits for no machine of profile %q", p.cfg.Pool, r.GetProfile())})
			return false
		}
		blob, err := p.cfg.Joiner.Blob(ctx, p.cfg.Pool, c.ID, c.Offering)
		if err != nil {
			p.log.Warn("fleet: cannot make a bootstrap blob yet", "claim", c.ID, "err", err)
			return false // asked again next time
		}
		changed := c.Machine != r.GetMachine()
		c.Machine, c.Updated = r.GetMachine(), now
		p.answers = append(p.answers, &fleetv1.BootstrapAnswer{Machine: r.GetMachine(), Blob: blob})
		return changed
	case "cordon":
		for _, c := range p.st.Claims {
			if c.Machine != r.GetMachine() || c.Leaving || c.Preempted {
				continue
			}
			why := r.GetReason()
			if why == "" {
				why = "taken back by the fleet"
			}
			grace := time.Duration(r.GetGraceMs()) * time.Millisecond
			if err := p.cfg.Joiner.Preempt(ctx, p.cfg.Pool, c.ID, why, grace); err != nil {
				p.log.Warn("fleet: telling the cluster of a preemption", "claim", c.ID, "err", err)
				return false // told again with the next answer
			}
			c.Preempted, c.Reason, c.Updated = true, why, now
			return true
		}
	}
	return false
}

// explain sets the status's shortfall and why; p.mu held.
func (p *Provider) explain(sfs []*fleetv1.Shortfall) {
	short, why := int32(0), ""
	for _, prof := range slices.Sorted(maps.Keys(p.status.Asked)) {
		d := p.status.Asked[prof] - p.status.Granted[prof]
		if d <= 0 {
			continue
		}
		short += d
		reason := fmt.Sprintf("%d of profile %s on their way", d, prof)
		for _, sf := range sfs {
			if sf.GetProfile() == prof && sf.GetPriority() == p.cfg.Priority {
				reason = fmt.Sprintf("shard %d is short of %d machine(s) of profile %s at priority %d for %d cycle(s)",
					sf.GetShard(), sf.GetCount(), prof, sf.GetPriority(), sf.GetAge())
				if sf.GetEscalated() {
					reason += ", escalated to the coordinator"
				}
			}
		}
		why = strings.TrimPrefix(why+"; "+reason, "; ")
	}
	p.status.Short, p.status.Why = short, why
}
