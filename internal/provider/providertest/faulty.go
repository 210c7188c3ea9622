package providertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// Faults are what a Faulty provider injects; the zero value injects
// nothing.
type Faults struct {
	// ErrorRate is the share of calls answered with a TransientError.
	ErrorRate float64
	// HangRate is the share of calls that hang until their context ends
	// (past the caller's deadline), then answer a TransientError.
	HangRate float64
	// AfterRate is the share of failed or hung calls that reached the
	// wrapped provider first: the call took effect and its answer was
	// lost, the case that tempts a caller to provision twice.
	AfterRate float64
	// Stock, when positive, is how many fresh machines Creates may still
	// get; the next are refused with InsufficientCapacity (partial
	// provisioning: some of a scale-up's machines come, the rest do not).
	Stock int
	// Quota, when positive, is how many machines a pool may hold (all
	// but Deleting ones); a fresh Create beyond it is refused with
	// QuotaExceeded.
	Quota int
}

// FaultCounts counts what a Faulty provider did.
type FaultCounts struct {
	// Calls is every call; Errors and Hangs those failed or hung, After
	// those of them that reached the wrapped provider first.
	Calls, Errors, Hangs, After int
	// CapacityRefused and QuotaRefused count refused fresh Creates.
	CapacityRefused, QuotaRefused int
	// Noticed counts interruption notices given; Reclaimed the machines
	// then taken back.
	Noticed, Reclaimed int
	// Provisioned counts fresh machines the wrapped provider accepted (not
	// replays), by machine id; a count above 1 is a double provisioning.
	Provisioned map[string]int
}

// Faulty wraps any Provider and injects the faults of issue 16: transient
// errors, calls that hang past the caller's deadline (before or after the
// call took effect), partial provisioning, a quota, and spot interruptions
// with a notice (Get and List show ReclaimAt; at that time the machine is
// deleted behind the caller's back). Random choices come from a seeded
// generator, so a run replays; time from the clock given. It is safe for
// concurrent use.
type Faulty struct {
	next provider.Provider
	clk  clock.Clock

	mu      sync.Mutex
	rng     *rand.Rand
	f       Faults
	stock   int
	notices map[string]time.Time      // machine id → reclaim time
	fences  map[string]provider.Fence // pool → the highest fence seen, to reclaim with
	pools   map[string]string         // machine id → pool
	n       FaultCounts
}

var _ provider.Provider = (*Faulty)(nil)

// NewFaulty wraps p; it injects nothing until Set.
func NewFaulty(p provider.Provider, clk clock.Clock, seed uint64) *Faulty {
	return &Faulty{next: p, clk: clk, rng: rand.New(rand.NewPCG(seed, 0xfa17)), notices: map[string]time.Time{},
		fences: map[string]provider.Fence{}, pools: map[string]string{}, n: FaultCounts{Provisioned: map[string]int{}}}
}

// Set replaces the faults injected from now on (and refills the stock).
func (f *Faulty) Set(x Faults) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.f, f.stock = x, x.Stock
}

// Counts returns what the provider did so far.
func (f *Faulty) Counts() FaultCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.n
	out.Provisioned = make(map[string]int, len(f.n.Provisioned))
	for k, v := range f.n.Provisioned {
		out.Provisioned[k] = v
	}
	return out
}

// Interrupt gives machine id a spot interruption notice: Get and List show
// it reclaimed at now+notice, and the first call at or after that time
// deletes it from the wrapped provider (with the highest fence its pool's
// controller used).
func (f *Faulty) Interrupt(id string, notice time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.notices[id]; !ok {
		f.notices[id] = f.clk.Now().Add(notice)
		f.n.Noticed++
	}
}

// reclaim deletes the machines whose notice has run out.
func (f *Faulty) reclaim(ctx context.Context) {
	now := f.clk.Now()
	f.mu.Lock()
	var due []provider.DeleteRequest
	for id, at := range f.notices {
		if !now.Before(at) {
			if fence, ok := f.fences[f.pools[id]]; ok {
				due = append(due, provider.DeleteRequest{Fence: fence, Pool: f.pools[id], MachineID: id})
			}
		}
	}
	f.mu.Unlock()
	for _, req := range due {
		_, err := f.next.Delete(ctx, req)
		if err == nil || provider.IsNotFound(err) {
			f.mu.Lock()
			if _, ok := f.notices[req.MachineID]; ok {
				delete(f.notices, req.MachineID)
				f.n.Reclaimed++
			}
			f.mu.Unlock()
		}
	}
}

// outcome decides one call's fault: fail or hang, and whether it reaches
// the wrapped provider first.
type outcome struct{ fail, hang, after bool }

func (f *Faulty) roll(fence provider.Fence, pool string) outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n.Calls++
	if pool != "" && fence.Epoch > 0 {
		if cur, ok := f.fences[pool]; !ok || cur.Epoch < fence.Epoch || cur.Epoch == fence.Epoch && cur.Seq < fence.Seq {
			f.fences[pool] = fence
		}
	}
	var o outcome
	switch r := f.rng.Float64(); {
	case r < f.f.ErrorRate:
		o.fail = true
		f.n.Errors++
	case r < f.f.ErrorRate+f.f.HangRate:
		o.hang = true
		f.n.Hangs++
	}
	if (o.fail || o.hang) && f.rng.Float64() < f.f.AfterRate {
		o.after = true
		f.n.After++
	}
	return o
}

// run applies o around call.
func run[T any](ctx context.Context, o outcome, op tideprovider.Op, call func() (T, error)) (T, error) {
	var zero T
	if o.after {
		v, err := call()
		if !o.fail && !o.hang {
			return v, err
		}
	}
	if o.hang {
		<-ctx.Done()
		return zero, provider.NewTransient(fmt.Errorf("injected: %s hung: %w", op, ctx.Err()), 0)
	}
	if o.fail {
		return zero, provider.NewTransient(fmt.Errorf("injected: %s failed", op), 0)
	}
	return call()
}

// Offerings forwards (with faults).
func (f *Faulty) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	f.reclaim(ctx)
	return run(ctx, f.roll(provider.Fence{}, ""), tideprovider.OpOfferings, func() ([]capacity.Offering, error) { return f.next.Offerings(ctx) })
}

// Create forwards (with faults); a fresh machine may be refused by the
// stock or the quota. Replays are never refused.
func (f *Faulty) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	f.reclaim(ctx)
	o := f.roll(req.Fence, req.Pool)
	return run(ctx, o, tideprovider.OpCreate, func() (provider.Ack, error) {
		if _, err := f.next.Get(ctx, req.MachineID); provider.IsNotFound(err) {
			if err := f.refuse(ctx, req); err != nil {
				return provider.Ack{}, err
			}
		}
		ack, err := f.next.Create(ctx, req)
		if err == nil && !ack.Replayed {
			f.mu.Lock()
			f.n.Provisioned[req.MachineID]++
			f.pools[req.MachineID] = req.Pool
			f.mu.Unlock()
		}
		return ack, err
	})
}

// refuse applies the stock and the quota to a fresh Create.
func (f *Faulty) refuse(ctx context.Context, req provider.CreateRequest) error {
	f.mu.Lock()
	stock, quota := f.f.Stock, f.f.Quota
	if stock > 0 {
		if f.stock == 0 {
			f.n.CapacityRefused++
			f.mu.Unlock()
			return provider.NewInsufficientCapacity(req.Offering, errors.New("injected: out of stock"))
		}
		f.stock--
	}
	f.mu.Unlock()
	if quota <= 0 {
		return nil
	}
	ms, err := f.next.List(ctx, provider.Filter{Pool: req.Pool})
	if err != nil {
		return err
	}
	held := 0
	for _, m := range ms {
		if m.State != provider.Deleting {
			held++
		}
	}
	if held >= quota {
		f.mu.Lock()
		f.n.QuotaRefused++
		f.mu.Unlock()
		return provider.NewQuotaExceeded("", quota, errors.New("injected: pool quota"))
	}
	return nil
}

// Configure forwards (with faults).
func (f *Faulty) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	f.reclaim(ctx)
	return run(ctx, f.roll(req.Fence, req.Pool), tideprovider.OpConfigure, func() (provider.Ack, error) { return f.next.Configure(ctx, req) })
}

// Drain forwards (with faults).
func (f *Faulty) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	f.reclaim(ctx)
	return run(ctx, f.roll(req.Fence, req.Pool), tideprovider.OpDrain, func() (provider.Ack, error) { return f.next.Drain(ctx, req) })
}

// Delete forwards (with faults).
func (f *Faulty) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	f.reclaim(ctx)
	return run(ctx, f.roll(req.Fence, req.Pool), tideprovider.OpDelete, func() (provider.Ack, error) { return f.next.Delete(ctx, req) })
}

// noticed returns m with its interruption notice, if any.
func (f *Faulty) noticed(m provider.Machine) provider.Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.notices[m.ID]; ok && m.ReclaimAt.IsZero() {
		m.ReclaimAt = at
	}
	if m.Pool != "" {
		f.pools[m.ID] = m.Pool
	}
	return m
}

// Get forwards (with faults) and shows interruption notices.
func (f *Faulty) Get(ctx context.Context, id string) (provider.Machine, error) {
	f.reclaim(ctx)
	m, err := run(ctx, f.roll(provider.Fence{}, ""), tideprovider.OpGet, func() (provider.Machine, error) { return f.next.Get(ctx, id) })
	if err != nil {
		return m, err
	}
	return f.noticed(m), nil
}

// List forwards (with faults) and shows interruption notices.
func (f *Faulty) List(ctx context.Context, flt provider.Filter) ([]provider.Machine, error) {
	f.reclaim(ctx)
	ms, err := run(ctx, f.roll(provider.Fence{}, flt.Pool), tideprovider.OpList, func() ([]provider.Machine, error) { return f.next.List(ctx, flt) })
	for i := range ms {
		ms[i] = f.noticed(ms[i])
	}
	return ms, err
}
