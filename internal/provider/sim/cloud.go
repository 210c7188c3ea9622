// Package sim is a simulated cloud that implements provider.Provider on
// virtual time: offerings with prices and capacity kinds, boot latency
// distributions per offering, quotas per offering and in total, injected API
// errors (some striking after the call took effect), partial fulfilment and
// insufficient capacity per offering, boots that hang until they time out,
// spot interruptions announced before the reclaim, and a billing ledger of
// machine-seconds and cost that proves nothing was created twice or leaked.
//
// The cloud never sleeps and starts no goroutine. It reads the time from the
// clock.Clock it is given and keeps pending completions (a boot finishing, a
// timeout, a spot notice, a reclaim) in an event queue ordered by due time;
// each call first applies every event due by the clock's now, in order. With
// a clock.Fake, a test moves time with Advance and then observes the result.
// All randomness comes from the *rand.Rand it is given, drawn in call and
// event order, so the same seed and the same calls at the same times give the
// same results.
//
// Cloud is safe for concurrent use (one mutex guards everything), but
// determinism needs the caller to make its calls in a deterministic order.
package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// Cloud is the simulated cloud.
type Cloud struct {
	clock clock.Clock

	mu         sync.Mutex
	rng        *rand.Rand
	cfg        Config
	offerings  map[string]*offering
	machines   map[string]*machine
	pools      map[string]map[string]*machine // pool → id → machine
	sorted     map[string][]*machine          // pool ("" all) → machines by id, for List; kept sorted on a change
	gone       map[string]bool                // ids deleted, reclaimed or lost: never reused
	ledger     map[string]*record
	fences     provider.FenceTable
	events     eventQueue
	seq        uint64 // event tie-breaker
	alive      int    // machines not gone, for the total quota
	hosts      int    // host address counter
	interrupts []*Interruption
	// changed notes the ids of machines whose state, reclaim notice or
	// existence changed, once WatchChanges was called (TakeChanges).
	watch   bool
	changed []string
	// upd is what ListSharedUpdate needs to update the list it gave last
	// time in place: the machines changed since (once it was first
	// called), whether any was added or removed, and that list's token.
	upd struct {
		on         bool
		mods       []*machine
		membership bool
		token      uint64
		pool       string
	}
}

var _ provider.Provider = (*Cloud)(nil)

// offering is an Offering with its live count.
type offering struct {
	Offering
	alive int // machines of this offering not gone
}

// machine is the cloud's state for one machine.
type machine struct {
	provider.Machine
	off *offering
	// gen changes with every state change; completion and timeout events
	// carry the gen they were scheduled under and are dropped when stale.
	gen uint64
	// reclaim is the scheduled spot reclaim; zero when none.
	reclaim time.Time
	intr    *Interruption
}

// Interruption is one spot interruption: its notice and its reclaim.
type Interruption struct {
	MachineID string
	Pool      string
	Offering  string
	// NoticeAt is when the notice was given (Machine.ReclaimAt set).
	NoticeAt time.Time
	// ReclaimAt is when the machine is, or was, taken back.
	ReclaimAt time.Time
	// Reclaimed is true once the reclaim happened; false while the notice
	// is pending, or when the machine was deleted before the reclaim.
	Reclaimed bool
}

// New returns a cloud with the configuration cfg (validated, defaults
// applied) on clk, drawing randomness from rng.
func New(cfg Config, clk clock.Clock, rng *rand.Rand) (*Cloud, error) {
	if clk == nil || rng == nil {
		return nil, errors.New("sim: a clock and a *rand.Rand are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	c := &Cloud{
		clock:     clk,
		rng:       rng,
		cfg:       cfg,
		offerings: make(map[string]*offering, len(cfg.Offerings)),
		machines:  map[string]*machine{},
		pools:     map[string]map[string]*machine{},
		gone:      map[string]bool{},
		ledger:    map[string]*record{},
	}
	for _, o := range cfg.Offerings {
		c.offerings[o.Name()] = &offering{Offering: o}
	}
	return c, nil
}

// lock takes the lock and applies every event due by now; it returns now.
func (c *Cloud) lock() time.Time {
	c.mu.Lock()
	now := c.clock.Now()
	c.advance(now)
	return now
}

// begin starts a call: context check, lock and advance, then the draw for
// an injected API error. A read that draws one fails at once; a mutating call
// (mutating true) fails at once or, with probability APIErrorAfterCommit,
// gets failAfter: it must act and then report the error anyway. begin returns
// with the lock held unless it returns an error.
func (c *Cloud) begin(ctx context.Context, mutating bool) (now time.Time, failAfter bool, err error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	now = c.lock()
	if c.cfg.APIErrorRate > 0 && c.rng.Float64() < c.cfg.APIErrorRate {
		if mutating && c.cfg.APIErrorAfterCommit > 0 && c.rng.Float64() < c.cfg.APIErrorAfterCommit {
			return now, true, nil
		}
		c.mu.Unlock()
		return time.Time{}, false, injected()
	}
	return now, false, nil
}

func injected() error {
	return provider.NewTransient(errors.New("sim: injected API error"), 0)
}

// Offerings lists the catalog, in configuration order.
func (c *Cloud) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	if _, _, err := c.begin(ctx, false); err != nil {
		return nil, fmt.Errorf("list offerings: %w", err)
	}
	defer c.mu.Unlock()
	out := make([]capacity.Offering, len(c.cfg.Offerings))
	for i, o := range c.cfg.Offerings {
		out[i] = c.offerings[o.Name()].Offering.Offering
		out[i].Resources = out[i].Resources.Clone()
	}
	return out, nil
}

// Create accepts a machine; see provider.Provider.
func (c *Cloud) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: %w", req.MachineID, err)
	}
	now, failAfter, err := c.begin(ctx, true)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: %w", req.MachineID, err)
	}
	defer c.mu.Unlock()
	ack, err := c.create(now, &req)
	if err == nil && failAfter {
		err = injected()
	}
	if err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: %w", req.MachineID, err)
	}
	return ack, nil
}

func (c *Cloud) create(now time.Time, req *provider.CreateRequest) (provider.Ack, error) {
	off, ok := c.offerings[req.Offering]
	if !ok {
		return provider.Ack{}, provider.NewInvalid("offering", fmt.Sprintf("unknown offering %q (have %s)", req.Offering, c.offeringNames()))
	}
	if err := c.fences.Admit(req.Pool, req.Fence); err != nil {
		return provider.Ack{}, err
	}
	if m, ok := c.machines[req.MachineID]; ok {
		if m.Pool != req.Pool || m.Offering != req.Offering {
			return provider.Ack{}, provider.NewConflict(m.ID, m.State,
				fmt.Sprintf("id taken by pool %q, offering %q", m.Pool, m.Offering))
		}
		c.ledger[m.ID].CreateCalls++
		return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
	}
	if c.gone[req.MachineID] {
		return provider.Ack{}, provider.NewConflict(req.MachineID, "", "id belonged to a machine that is gone; machine ids are never reused")
	}
	if c.cfg.Quota > 0 && c.alive >= c.cfg.Quota {
		return provider.Ack{}, provider.NewQuotaExceeded("", c.cfg.Quota, nil)
	}
	if off.Quota > 0 && off.alive >= off.Quota {
		return provider.Ack{}, provider.NewQuotaExceeded(req.Offering, off.Quota, nil)
	}
	if off.OutOfCapacity {
		return provider.Ack{}, provider.NewInsufficientCapacity(req.Offering, errors.New("sim: offering is out of capacity"))
	}
	if off.Stock > 0 && off.alive >= off.Stock {
		return provider.Ack{}, provider.NewInsufficientCapacity(req.Offering,
			fmt.Errorf("sim: stock of %d machines exhausted", off.Stock))
	}
	m := &machine{
		Machine: provider.Machine{
			ID: req.MachineID, Pool: req.Pool, Offering: req.Offering, State: provider.Creating,
			Labels: maps.Clone(req.Labels), CreatedAt: now, UpdatedAt: now,
		},
		off: off,
	}
	c.machines[m.ID] = m
	pool := c.pools[m.Pool]
	if pool == nil {
		pool = map[string]*machine{}
		c.pools[m.Pool] = pool
	}
	pool[m.ID] = m
	c.resort(m, true)
	c.upd.membership = true
	off.alive++
	c.alive++
	c.ledger[m.ID] = &record{Record: Record{MachineID: m.ID, Pool: m.Pool, Offering: m.Offering,
		Provisions: 1, CreateCalls: 1, Start: now}, price: off.PricePerHour}
	hang := off.HangRate > 0 && c.rng.Float64() < off.HangRate
	c.startTransition(now, m, provider.Creating, off.Boot, c.cfg.BootTimeout, hang)
	return provider.Ack{MachineID: m.ID, State: m.State}, nil
}

// lookup finds a machine of the pool, or returns NotFound.
func (c *Cloud) lookup(pool, id string) (*machine, error) {
	m, ok := c.machines[id]
	if !ok || m.Pool != pool {
		return nil, provider.NewNotFound(id)
	}
	return m, nil
}

// Configure binds an Idle machine to a cluster; see provider.Provider.
func (c *Cloud) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	return c.mutate(ctx, tideprovider.OpConfigure, req.Pool, req.MachineID, req.Fence, req.Validate, func(now time.Time, m *machine) (provider.Ack, error) {
		switch {
		case m.State == provider.Idle:
			m.Cluster = req.Cluster
			m.Bootstrap = slices.Clone(req.Bootstrap)
			c.startTransition(now, m, provider.Configuring, m.off.Configure, c.cfg.ConfigureTimeout, false)
			return provider.Ack{MachineID: m.ID, State: m.State}, nil
		case (m.State == provider.Configuring || m.State == provider.Configured) && m.Cluster == req.Cluster:
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		case m.State == provider.Configuring || m.State == provider.Configured:
			return provider.Ack{}, provider.NewConflict(m.ID, m.State, fmt.Sprintf("bound to cluster %q; drain it first", m.Cluster))
		}
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "configure needs an idle machine")
	})
}

// Drain unbinds a machine from its cluster; see provider.Provider.
func (c *Cloud) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return c.mutate(ctx, tideprovider.OpDrain, req.Pool, req.MachineID, req.Fence, req.Validate, func(now time.Time, m *machine) (provider.Ack, error) {
		switch m.State {
		case provider.Configuring, provider.Configured:
			c.startTransition(now, m, provider.Draining, m.off.Drain, c.cfg.DrainTimeout, false)
			return provider.Ack{MachineID: m.ID, State: m.State}, nil
		case provider.Draining, provider.Idle, provider.Creating, provider.Speculative:
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		}
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "drain does not apply; delete the machine")
	})
}

// Delete releases a machine; see provider.Provider.
func (c *Cloud) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	return c.mutate(ctx, tideprovider.OpDelete, req.Pool, req.MachineID, req.Fence, req.Validate, func(now time.Time, m *machine) (provider.Ack, error) {
		if m.State == provider.Deleting {
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		}
		c.startTransition(now, m, provider.Deleting, m.off.Delete, 0, false)
		return provider.Ack{MachineID: m.ID, State: m.State}, nil
	})
}

// mutate runs the common part of Configure, Drain and Delete: validation,
// injected errors, fencing, ownership, then act.
func (c *Cloud) mutate(ctx context.Context, op tideprovider.Op, pool, id string, f provider.Fence,
	validate func() error, act func(time.Time, *machine) (provider.Ack, error)) (provider.Ack, error) {
	wrap := func(err error) error { return fmt.Errorf("%s machine %q: %w", op, id, err) }
	if err := validate(); err != nil {
		return provider.Ack{}, wrap(err)
	}
	now, failAfter, err := c.begin(ctx, true)
	if err != nil {
		return provider.Ack{}, wrap(err)
	}
	defer c.mu.Unlock()
	if err := c.fences.Admit(pool, f); err != nil {
		return provider.Ack{}, wrap(err)
	}
	m, err := c.lookup(pool, id)
	if err != nil {
		return provider.Ack{}, wrap(err)
	}
	ack, err := act(now, m)
	if err == nil && failAfter {
		err = injected()
	}
	if err != nil {
		return provider.Ack{}, wrap(err)
	}
	return ack, nil
}

// Get returns one machine; see provider.Provider.
func (c *Cloud) Get(ctx context.Context, id string) (provider.Machine, error) {
	if _, _, err := c.begin(ctx, false); err != nil {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, err)
	}
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, provider.NewNotFound(id))
	}
	return m.Machine.Clone(), nil
}

// GetShared is Get for a caller that only reads what it gets: the
// machine's labels and bootstrap data are the cloud's own, not copies. The
// same API errors are injected as by Get.
func (c *Cloud) GetShared(ctx context.Context, id string) (provider.Machine, error) {
	if _, _, err := c.begin(ctx, false); err != nil {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, err)
	}
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, provider.NewNotFound(id))
	}
	return m.Machine, nil
}

// List returns the machines passing f, sorted by id; see provider.Provider.
func (c *Cloud) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	return c.list(ctx, f, true, nil)
}

// resort adds m to (or removes it from) the sorted lists List keeps.
func (c *Cloud) resort(m *machine, add bool) {
	for _, key := range []string{"", m.Pool} {
		list, ok := c.sorted[key]
		if !ok {
			continue
		}
		i, found := slices.BinarySearchFunc(list, m.ID, func(x *machine, id string) int { return strings.Compare(x.ID, id) })
		switch {
		case add && !found:
			list = slices.Insert(list, i, m)
		case !add && found:
			list = slices.Delete(list, i, i+1)
		}
		c.sorted[key] = list
		if key == m.Pool {
			break
		}
	}
}

// ListShared is List for a caller that only reads what it gets: the
// machines' labels and bootstrap data are the cloud's own, not copies, so
// that a simulation listing thousands of machines per reconcile tick does
// not copy them each time. The same API errors are injected as by List.
func (c *Cloud) ListShared(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	return c.list(ctx, f, false, nil)
}

// ListSharedInto is ListShared appending to dst[:0], so that a caller that
// lists every tick can reuse the slice of an earlier list it no longer
// reads.
func (c *Cloud) ListSharedInto(ctx context.Context, f provider.Filter, dst []provider.Machine) ([]provider.Machine, error) {
	return c.list(ctx, f, false, dst)
}

// ListSharedUpdate is ListSharedInto for a caller that lists the same pool
// over and over and keeps what it got: prev is the list the last call
// returned and token that call's token. When no machine was added or
// removed since, the entries of the machines that changed are updated in
// prev itself and prev is returned (inPlace); otherwise (or for a filter
// on states, another caller's token, or a first call) the list is built
// into dst[:0], which must not share memory with prev. Either way the list
// is the one ListShared would return, and the same API errors are
// injected; on an error prev is untouched and token stays valid.
func (c *Cloud) ListSharedUpdate(ctx context.Context, f provider.Filter, prev []provider.Machine, token uint64,
	dst []provider.Machine) (list []provider.Machine, next uint64, inPlace bool, err error) {
	if _, _, err := c.begin(ctx, false); err != nil {
		return nil, token, false, fmt.Errorf("list machines: %w", err)
	}
	defer c.mu.Unlock()
	u := &c.upd
	inPlace = u.on && token != 0 && token == u.token && !u.membership && len(f.States) == 0 && f.Pool == u.pool
	for i := 0; inPlace && i < len(u.mods); i++ {
		m := u.mods[i]
		if !f.Matches(&m.Machine) {
			continue
		}
		j, ok := slices.BinarySearchFunc(prev, m.ID, func(x provider.Machine, id string) int { return strings.Compare(x.ID, id) })
		if !ok {
			inPlace = false // not listed last time: build it anew
			break
		}
		prev[j] = m.Machine
	}
	if inPlace {
		list = prev
	} else {
		list = c.listLocked(f, false, dst)
	}
	u.on, u.membership, u.pool = true, false, f.Pool
	clear(u.mods)
	u.mods = u.mods[:0]
	u.token++
	return list, u.token, inPlace, nil
}

func (c *Cloud) list(ctx context.Context, f provider.Filter, clone bool, dst []provider.Machine) ([]provider.Machine, error) {
	if _, _, err := c.begin(ctx, false); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	defer c.mu.Unlock()
	return c.listLocked(f, clone, dst), nil
}

// listLocked is list with the lock held and the API error drawn.
func (c *Cloud) listLocked(f provider.Filter, clone bool, dst []provider.Machine) []provider.Machine {
	src, ok := c.sorted[f.Pool]
	if !ok {
		all := c.machines
		if f.Pool != "" {
			all = c.pools[f.Pool]
		}
		src = slices.SortedFunc(maps.Values(all), func(a, b *machine) int { return strings.Compare(a.ID, b.ID) })
		if c.sorted == nil {
			c.sorted = map[string][]*machine{}
		}
		c.sorted[f.Pool] = src
	}
	out := dst[:0]
	if cap(out) < len(src) {
		out = make([]provider.Machine, 0, len(src))
	}
	for _, m := range src {
		if f.Matches(&m.Machine) {
			if clone {
				out = append(out, m.Machine.Clone())
			} else {
				out = append(out, m.Machine)
			}
		}
	}
	return out
}

// startTransition moves m into a transitional state at now and schedules its
// completion after a latency drawn from lat, or its failure at timeout when
// the draw exceeds it or the transition hangs. A zero timeout never fails.
func (c *Cloud) startTransition(now time.Time, m *machine, state provider.State, lat Latency, timeout time.Duration, hang bool) {
	c.setState(now, m, state)
	d := lat.Sample(c.rng)
	if timeout > 0 && (hang || d > timeout) {
		c.schedule(event{at: now.Add(timeout), kind: evTimeout, id: m.ID, gen: m.gen})
		return
	}
	c.schedule(event{at: now.Add(d), kind: evDone, id: m.ID, gen: m.gen})
}

func (c *Cloud) setState(now time.Time, m *machine, s provider.State) {
	c.note(m)
	m.State = s
	m.UpdatedAt = now
	m.gen++
}

// advance applies, in order, every event due by now.
func (c *Cloud) advance(now time.Time) {
	for len(c.events) > 0 && !c.events[0].at.After(now) {
		ev := heap.Pop(&c.events).(event)
		c.apply(ev)
	}
}

// stale reports whether ev would do nothing: its machine is gone, changed
// state since it was scheduled, or had its reclaim rescheduled.
func (c *Cloud) stale(ev event) bool {
	m, ok := c.machines[ev.id]
	if !ok {
		return true
	}
	switch ev.kind {
	case evDone, evTimeout:
		return m.gen != ev.gen
	case evNotice:
		c.note(m)
		return !m.reclaim.Equal(ev.reclaim)
	default:
		return !m.reclaim.Equal(ev.at)
	}
}

func (c *Cloud) apply(ev event) {
	if c.stale(ev) {
		return
	}
	m := c.machines[ev.id]
	switch ev.kind {
	case evDone:
		switch m.State {
		case provider.Creating:
			c.hosts++
			m.Host = fmt.Sprintf("10.%d.%d.%d", c.hosts>>16&0xff, c.hosts>>8&0xff, c.hosts&0xff)
			c.setState(ev.at, m, provider.Idle)
			c.scheduleInterruption(ev.at, m)
		case provider.Configuring:
			c.setState(ev.at, m, provider.Configured)
		case provider.Draining:
			m.Cluster, m.Bootstrap = "", nil
			c.setState(ev.at, m, provider.Idle)
		case provider.Deleting:
			c.remove(ev.at, m, EndDeleted)
		}
	case evTimeout:
		m.Reason = fmt.Sprintf("%s did not finish within %s", m.State, ev.at.Sub(m.UpdatedAt))
		c.setState(ev.at, m, provider.Failed)
	case evNotice:
		c.note(m)
		m.ReclaimAt = m.reclaim
		m.intr = &Interruption{MachineID: m.ID, Pool: m.Pool, Offering: m.Offering, NoticeAt: ev.at, ReclaimAt: m.reclaim}
		c.interrupts = append(c.interrupts, m.intr)
	case evReclaim:
		if m.intr != nil {
			m.intr.Reclaimed = true
		}
		c.remove(ev.at, m, EndInterrupted)
	}
}

// scheduleInterruption draws when a spot machine that just got its hardware
// will be reclaimed: exponential with the offering's hourly probability.
func (c *Cloud) scheduleInterruption(now time.Time, m *machine) {
	p := m.off.InterruptionProbability
	if p <= 0 {
		return
	}
	after := time.Duration(c.rng.ExpFloat64() / p * float64(time.Hour))
	if after < 0 || after > 100*365*24*time.Hour { // overflow guard for tiny p
		return
	}
	c.interruptAt(now, m, now.Add(after))
}

// interruptAt schedules the reclaim of m at reclaim, with the notice
// InterruptionNotice earlier (but not before now).
func (c *Cloud) interruptAt(now time.Time, m *machine, reclaim time.Time) {
	m.reclaim = reclaim
	notice := reclaim.Add(-c.cfg.InterruptionNotice)
	if notice.Before(now) {
		notice = now
	}
	c.schedule(event{at: notice, kind: evNotice, id: m.ID, reclaim: reclaim})
	c.schedule(event{at: reclaim, kind: evReclaim, id: m.ID})
}

// remove makes m disappear at now: billing stops and its id is retired.
func (c *Cloud) remove(now time.Time, m *machine, why string) {
	c.note(m)
	delete(c.machines, m.ID)
	delete(c.pools[m.Pool], m.ID)
	c.resort(m, false)
	c.upd.membership = true
	if len(c.pools[m.Pool]) == 0 {
		delete(c.pools, m.Pool)
	}
	c.gone[m.ID] = true
	m.off.alive--
	c.alive--
	m.gen++
	if r := c.ledger[m.ID]; r != nil {
		r.End, r.Ended = now, why
	}
}

// note records a change of m for TakeChanges.
func (c *Cloud) note(m *machine) {
	if c.watch {
		c.changed = append(c.changed, m.ID)
	}
	if c.upd.on {
		c.upd.mods = append(c.upd.mods, m)
	}
}

func (c *Cloud) schedule(ev event) {
	c.seq++
	ev.seq = c.seq
	heap.Push(&c.events, ev)
}

func (c *Cloud) offeringNames() string {
	names := make([]string, len(c.cfg.Offerings))
	for i, o := range c.cfg.Offerings {
		names[i] = o.Name()
	}
	return strings.Join(names, ", ")
}
