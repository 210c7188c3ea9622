package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// MarkerEnv is the environment variable that marks every process of a local
// machine: "<root uid>/<machine id>". Worker processes get it from the
// provider and their children inherit it.
const MarkerEnv = "TIDE_LOCAL_MACHINE"

// ErrClosed is wrapped by the errors of every call on a Provider after Close
// or Shutdown.
var ErrClosed = errors.New("local provider is closed")

var errRootInUse = errors.New("in use by another local provider")

// Provider is the local provider; see the package doc. It is safe for
// concurrent use.
type Provider struct {
	cfg       Config
	clock     clock.Clock
	log       *slog.Logger
	root      string
	uid       string
	offerings map[string]capacity.Offering
	lock      *os.File
	// gate, when set (tests), holds every actuator step until it opens.
	gate *gate

	// ctx ends when Close or Shutdown starts: actuators stop where they are.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	machines map[string]*machine
	tombs    map[string]bool // deleted ids
	fences   provider.FenceTable
	// persisted is the fence table as written in fences.json.
	persisted map[string]provider.Fence
	closing   bool // Close or Shutdown started: calls are refused
	closed    bool // the root is released: nothing may be written
	acting    int  // actuators running
	changed   chan struct{}
}

var _ provider.Provider = (*Provider)(nil)

// machine is the provider's state for one machine, guarded by Provider.mu.
type machine struct {
	provider.Machine
	dir  string
	proc *proc // the worker process; nil when none was started
	// cmd is the worker command Configure built, for the actuator to start.
	cmd *exec.Cmd
	// acting is set while the machine's actuator runs; stuck holds the
	// error that stopped it (the next call on the machine retries).
	acting bool
	stuck  error
	gone   bool
	// stopReady cancels the Ready call or the start delay in progress.
	stopReady context.CancelFunc
}

// proc is a worker process.
type proc struct {
	pid   int
	start uint64 // clock ticks since boot (/proc/<pid>/stat)
	boot  string
	// done is closed once this Provider reaped the process (its own
	// child); exit then says how it ended. nil for an adopted process.
	done chan struct{}
	exit string
}

// New opens the provider on cfg.Root, creating the root if needed, and
// adopts the machines a previous Provider left there (see the package doc).
// It fails when another Provider holds the root.
func New(cfg Config) (*Provider, error) { return newProvider(cfg, nil) }

func newProvider(cfg Config, g *gate) (*Provider, error) {
	if !supported {
		return nil, errors.New("local provider: needs Linux (/proc and process groups)")
	}
	cfg, err := cfg.withDefaults()
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("local provider config: %w", err)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("local provider config: root: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, machinesName), 0o700); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(root, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("local provider: root %s: %w", root, err)
	}
	p := &Provider{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger.With("provider", "local"), root: root, lock: lock, gate: g,
		offerings: make(map[string]capacity.Offering, len(cfg.Offerings)),
		machines:  map[string]*machine{}, tombs: map[string]bool{}, changed: make(chan struct{}),
	}
	for _, o := range cfg.Offerings {
		p.offerings[o.Name()] = o
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if err := p.load(); err != nil {
		p.cancel()
		lock.Close()
		return nil, fmt.Errorf("local provider: root %s: %w", root, err)
	}
	return p, nil
}

// load reads the root's identity, fences and machines, and adopts them.
func (p *Provider) load() error {
	uid, err := loadIdentity(p.root)
	if err != nil {
		return err
	}
	p.uid = uid
	if p.persisted, err = loadFences(p.root, &p.fences); err != nil {
		return err
	}
	dir := filepath.Join(p.root, machinesName)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	boot := bootID()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		mdir := filepath.Join(dir, e.Name())
		rec, err := loadRecord(filepath.Join(mdir, recordName), e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			// A Create that crashed before its record was written was
			// never acknowledged: nothing to adopt.
			p.log.Warn("ignoring a machine directory without a record", "dir", mdir)
			continue
		}
		if err != nil {
			return err
		}
		if rec.Deleted {
			p.tombs[rec.ID] = true
			continue
		}
		m := &machine{Machine: rec.Machine, dir: mdir}
		if rec.PID > 0 {
			m.proc = &proc{pid: rec.PID, start: rec.StartTicks, boot: rec.BootID}
		}
		p.machines[m.ID] = m
		p.adopt(m, boot)
	}
	return nil
}

// adopt decides what a loaded machine needs: a worker whose process is
// gone fails, an interrupted transition is finished.
func (p *Provider) adopt(m *machine, boot string) {
	alive := m.proc != nil && m.proc.boot == boot && procAlive(m.proc.pid, m.proc.start)
	switch m.State {
	case provider.Configuring, provider.Configured:
		switch {
		case m.proc == nil && m.State == provider.Configuring:
			p.log.Info("resuming an interrupted configure", "machine", m.ID)
			p.kick(m)
		case !alive:
			p.fail(m, fmt.Sprintf("worker process %d is gone (found when the provider started)", m.proc.pid))
		default:
			p.log.Info("adopted a running worker", "machine", m.ID, "pid", m.proc.pid, "state", m.State)
			if m.State == provider.Configuring {
				p.kick(m)
			}
		}
	case provider.Draining, provider.Deleting:
		p.log.Info("resuming an interrupted transition", "machine", m.ID, "state", m.State)
		p.kick(m)
	}
}

// Offerings lists the configured offerings, in configuration order.
func (p *Provider) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	if err := p.begin(ctx); err != nil {
		return nil, fmt.Errorf("list offerings: %w", err)
	}
	defer p.mu.Unlock()
	out := make([]capacity.Offering, len(p.cfg.Offerings))
	for i, o := range p.cfg.Offerings {
		out[i] = o
		out[i].Resources = o.Resources.Clone()
	}
	return out, nil
}

// begin starts a call: the context check, then the lock. It returns with
// the lock held unless it returns an error.
func (p *Provider) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// admit checks a mutating call's fence, and writes the fence table when
// the call raises the pool's epoch or hands it to another controller, so a
// restarted provider still refuses the deposed one.
func (p *Provider) admit(pool string, f provider.Fence) error {
	before, had := p.fences.Highest(pool)
	if err := p.fences.Admit(pool, f); err != nil {
		return err
	}
	if had && before.Epoch == f.Epoch && before.Controller == f.Controller {
		return nil
	}
	pools := maps.Clone(p.persisted)
	pools[pool], _ = p.fences.Highest(pool)
	if err := writeJSON(filepath.Join(p.root, fencesName), fencesFile{Version: recordVersion, Pools: pools}); err != nil {
		return provider.NewTransient(fmt.Errorf("write fences: %w", err), 0)
	}
	p.persisted = pools
	return nil
}

// Create makes the machine's directory and record; the machine is Idle when
// Create returns. See provider.Provider.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	wrap := func(err error) error { return fmt.Errorf("create machine %q: %w", req.MachineID, err) }
	if err := req.Validate(); err != nil {
		return provider.Ack{}, wrap(err)
	}
	if err := p.begin(ctx); err != nil {
		return provider.Ack{}, wrap(err)
	}
	defer p.mu.Unlock()
	if _, ok := p.offerings[req.Offering]; !ok {
		return provider.Ack{}, wrap(provider.NewInvalid("offering",
			fmt.Sprintf("unknown offering %q (have %s)", req.Offering, strings.Join(slices.Sorted(maps.Keys(p.offerings)), ", "))))
	}
	if err := p.admit(req.Pool, req.Fence); err != nil {
		return provider.Ack{}, wrap(err)
	}
	if m, ok := p.machines[req.MachineID]; ok {
		if m.Pool != req.Pool || m.Offering != req.Offering {
			return provider.Ack{}, wrap(provider.NewConflict(m.ID, m.State,
				fmt.Sprintf("id taken by pool %q, offering %q", m.Pool, m.Offering)))
		}
		p.kick(m)
		return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
	}
	if p.tombs[req.MachineID] {
		return provider.Ack{}, wrap(provider.NewConflict(req.MachineID, "", "id belonged to a deleted machine; machine ids are never reused"))
	}
	now := p.clock.Now()
	m := &machine{
		Machine: provider.Machine{ID: req.MachineID, Pool: req.Pool, Offering: req.Offering, State: provider.Idle,
			Host: p.cfg.Host, Labels: maps.Clone(req.Labels), CreatedAt: now, UpdatedAt: now},
		dir: filepath.Join(p.root, machinesName, req.MachineID),
	}
	err := os.MkdirAll(filepath.Join(m.dir, dataName), 0o700)
	if err == nil {
		err = p.save(m)
	}
	if err != nil {
		os.RemoveAll(m.dir)
		return provider.Ack{}, wrap(provider.NewTransient(err, 0))
	}
	p.machines[m.ID] = m
	p.log.Info("machine created", "machine", m.ID, "pool", m.Pool, "offering", m.Offering)
	return provider.Ack{MachineID: m.ID, State: m.State}, nil
}

// Configure records the binding and has the actuator start the worker;
// see provider.Provider.
func (p *Provider) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpConfigure, req.Pool, req.MachineID, req.Fence, req.Validate, func(m *machine) (provider.Ack, error) {
		switch {
		case m.State == provider.Idle:
			off, ok := p.offerings[m.Offering]
			if !ok {
				return provider.Ack{}, provider.NewConflict(m.ID, m.State,
					fmt.Sprintf("offering %q is no longer offered; delete the machine", m.Offering))
			}
			w := p.worker(m)
			w.Cluster, w.Bootstrap, w.Offering = req.Cluster, slices.Clone(req.Bootstrap), off
			cmd, err := p.cfg.Command(w)
			if err != nil {
				return provider.Ack{}, provider.NewInvalid("bootstrap", fmt.Sprintf("worker command: %v", err))
			}
			if cmd == nil {
				return provider.Ack{}, provider.NewInvalid("bootstrap", "worker command: Command returned no command")
			}
			prev := m.Machine
			m.Cluster, m.Bootstrap = req.Cluster, slices.Clone(req.Bootstrap)
			p.setState(m, provider.Configuring)
			m.proc = nil
			if err := p.save(m); err != nil {
				m.Machine = prev
				return provider.Ack{}, provider.NewTransient(err, 0)
			}
			m.cmd = cmd
			p.kick(m)
			return provider.Ack{MachineID: m.ID, State: m.State}, nil
		case (m.State == provider.Configuring || m.State == provider.Configured) && m.Cluster == req.Cluster:
			p.kick(m)
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		case m.State == provider.Configuring || m.State == provider.Configured:
			return provider.Ack{}, provider.NewConflict(m.ID, m.State, fmt.Sprintf("bound to cluster %q; drain it first", m.Cluster))
		}
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "configure needs an idle machine")
	})
}

// Drain has the actuator stop the worker gracefully; see provider.Provider.
func (p *Provider) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpDrain, req.Pool, req.MachineID, req.Fence, req.Validate, func(m *machine) (provider.Ack, error) {
		switch m.State {
		case provider.Configuring, provider.Configured:
			if err := p.transition(m, provider.Draining); err != nil {
				return provider.Ack{}, err
			}
			return provider.Ack{MachineID: m.ID, State: m.State}, nil
		case provider.Draining, provider.Idle, provider.Creating, provider.Speculative:
			p.kick(m)
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		}
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "drain does not apply; delete the machine")
	})
}

// Delete has the actuator kill every process of the machine, remove its
// files and leave a tombstone; see provider.Provider.
func (p *Provider) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpDelete, req.Pool, req.MachineID, req.Fence, req.Validate, func(m *machine) (provider.Ack, error) {
		if m.State == provider.Deleting {
			p.kick(m)
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		}
		if err := p.transition(m, provider.Deleting); err != nil {
			return provider.Ack{}, err
		}
		return provider.Ack{MachineID: m.ID, State: m.State}, nil
	})
}

// transition moves m into a transitional state, records it and kicks the
// actuator; on a write error m is left as it was.
func (p *Provider) transition(m *machine, to provider.State) error {
	prev := m.Machine
	p.setState(m, to)
	if err := p.save(m); err != nil {
		m.Machine = prev
		return provider.NewTransient(err, 0)
	}
	m.cmd = nil
	if m.stopReady != nil {
		m.stopReady()
	}
	p.kick(m)
	return nil
}

// mutate runs the common part of Configure, Drain and Delete: validation,
// the context, fencing, ownership, then act (with the lock held).
func (p *Provider) mutate(ctx context.Context, op tideprovider.Op, pool, id string, f provider.Fence,
	validate func() error, act func(*machine) (provider.Ack, error)) (provider.Ack, error) {
	wrap := func(err error) error { return fmt.Errorf("%s machine %q: %w", op, id, err) }
	if err := validate(); err != nil {
		return provider.Ack{}, wrap(err)
	}
	if err := p.begin(ctx); err != nil {
		return provider.Ack{}, wrap(err)
	}
	defer p.mu.Unlock()
	if err := p.admit(pool, f); err != nil {
		return provider.Ack{}, wrap(err)
	}
	m, ok := p.machines[id]
	if !ok || m.Pool != pool {
		return provider.Ack{}, wrap(provider.NewNotFound(id))
	}
	p.refresh(m)
	ack, err := act(m)
	if err != nil {
		return provider.Ack{}, wrap(err)
	}
	return ack, nil
}

// Get returns one machine; see provider.Provider. A worker whose process
// has exited shows as Failed.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	if err := p.begin(ctx); err != nil {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, err)
	}
	defer p.mu.Unlock()
	m, ok := p.machines[id]
	if !ok {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, provider.NewNotFound(id))
	}
	p.refresh(m)
	return m.Machine.Clone(), nil
}

// List returns the machines passing f, sorted by id; see provider.Provider.
// Workers whose process has exited show as Failed.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	if err := p.begin(ctx); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	defer p.mu.Unlock()
	out := make([]provider.Machine, 0, len(p.machines))
	for _, id := range slices.Sorted(maps.Keys(p.machines)) {
		m := p.machines[id]
		if f.Pool != "" && m.Pool != f.Pool {
			continue
		}
		p.refresh(m)
		if f.Matches(&m.Machine) {
			out = append(out, m.Machine.Clone())
		}
	}
	return out, nil
}

// refresh fails a Configuring or Configured machine whose worker process
// is gone. Called with the lock held.
func (p *Provider) refresh(m *machine) {
	if (m.State == provider.Configuring || m.State == provider.Configured) && m.proc != nil && !p.alive(m.proc) {
		p.fail(m, exitReason(m.proc))
	}
}

func exitReason(pr *proc) string {
	if pr.done != nil {
		return fmt.Sprintf("worker process %d exited: %s", pr.pid, pr.exit)
	}
	return fmt.Sprintf("worker process %d is gone", pr.pid)
}

// fail moves m to Failed with reason and records it. Called with the lock held.
func (p *Provider) fail(m *machine, reason string) {
	m.Reason = reason
	p.setState(m, provider.Failed)
	m.cmd = nil
	if m.stopReady != nil {
		m.stopReady()
	}
	p.log.Warn("machine failed", "machine", m.ID, "reason", reason)
	if err := p.save(m); err != nil {
		p.log.Warn("record a failed machine", "machine", m.ID, "err", err)
	}
}

func (p *Provider) setState(m *machine, s provider.State) {
	if s != provider.Failed {
		m.Reason = ""
	}
	m.State = s
	m.UpdatedAt = p.clock.Now()
}

// save writes m's record. Called with the lock held.
func (p *Provider) save(m *machine) error {
	if p.closed {
		return ErrClosed
	}
	rec := record{Version: recordVersion, Machine: m.Machine}
	if m.proc != nil {
		rec.PID, rec.StartTicks, rec.BootID = m.proc.pid, m.proc.start, m.proc.boot
	}
	if err := writeJSON(filepath.Join(m.dir, recordName), rec); err != nil {
		return fmt.Errorf("write record of machine %q: %w", m.ID, err)
	}
	return nil
}

// worker describes m for Command and Ready. Called with the lock held.
func (p *Provider) worker(m *machine) Worker {
	return Worker{MachineID: m.ID, Pool: m.Pool, Cluster: m.Cluster, Offering: p.offerings[m.Offering],
		DataDir: filepath.Join(m.dir, dataName), Bootstrap: slices.Clone(m.Bootstrap)}
}

// marker is the value of MarkerEnv for machine id.
func (p *Provider) marker(id string) string { return MarkerEnv + "=" + p.uid + "/" + id }

// Root returns the provider's root directory (absolute).
func (p *Provider) Root() string { return p.root }

// DataDir returns the data directory of machine id (whether or not it exists).
func (p *Provider) DataDir(id string) string {
	return filepath.Join(p.root, machinesName, id, dataName)
}

// Wait blocks until every accepted transition has finished (or stopped on
// an error that the machine's next call retries), or ctx ends.
func (p *Provider) Wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		n, ch := p.acting, p.changed
		p.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for the local provider: %w", ctx.Err())
		}
	}
}

// notify wakes the waiters of Wait. Called with the lock held.
func (p *Provider) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}
