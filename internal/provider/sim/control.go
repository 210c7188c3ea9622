package sim

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/tide-project/tide/sdk/provider"
)

// This file holds what tests and the simulator use beyond provider.Provider:
// fault knobs to turn while the cloud runs, forced interruptions and losses,
// and the ledger.

// SetAPIErrorRate changes Config.APIErrorRate and Config.APIErrorAfterCommit
// from now on; both must be within [0, 1].
func (c *Cloud) SetAPIErrorRate(rate, afterCommit float64) error {
	if !validRate(rate) || !validRate(afterCommit) {
		return fmt.Errorf("sim: api error rates must be within [0, 1], got %v and %v", rate, afterCommit)
	}
	c.lock()
	defer c.mu.Unlock()
	c.cfg.APIErrorRate, c.cfg.APIErrorAfterCommit = rate, afterCommit
	return nil
}

// SetQuota changes the total quota (0: no limit). Machines above a lowered
// quota keep running; only new Creates are refused.
func (c *Cloud) SetQuota(n int) error {
	if n < 0 {
		return fmt.Errorf("sim: quota must not be negative, got %d", n)
	}
	c.lock()
	defer c.mu.Unlock()
	c.cfg.Quota = n
	return nil
}

// Tune changes an offering's behaviour from now on: its latencies, quota,
// stock, OutOfCapacity and HangRate, and its price and interruption
// probability. Its name (type, zone, kind) cannot change. The result is
// validated; on error nothing changes. Transitions already under way keep
// the latency they drew.
func (c *Cloud) Tune(name string, change func(*Offering)) error {
	c.lock()
	defer c.mu.Unlock()
	off, ok := c.offerings[name]
	if !ok {
		return fmt.Errorf("sim: tune: unknown offering %q (have %s)", name, c.offeringNames())
	}
	next := off.Offering
	next.Resources = next.Resources.Clone()
	change(&next)
	if next.Name() != name {
		return fmt.Errorf("sim: tune: offering %q cannot be renamed to %q", name, next.Name())
	}
	if err := next.validate(); err != nil {
		return fmt.Errorf("sim: tune: %w", err)
	}
	off.Offering = next
	for i := range c.cfg.Offerings {
		if c.cfg.Offerings[i].Name() == name {
			c.cfg.Offerings[i] = next
		}
	}
	return nil
}

// Interrupt gives machine id a spot interruption notice now and reclaims it
// after Config.InterruptionNotice, whatever its offering; a machine already
// due to be reclaimed sooner is left alone. A machine without a host (still
// creating) cannot be interrupted.
func (c *Cloud) Interrupt(id string) error {
	now := c.lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return fmt.Errorf("sim: interrupt: %w", provider.NewNotFound(id))
	}
	if m.Host == "" {
		return fmt.Errorf("sim: interrupt machine %q: it has no host yet (%s)", id, m.State)
	}
	reclaim := now.Add(c.cfg.InterruptionNotice)
	if !m.reclaim.IsZero() && !m.reclaim.After(reclaim) {
		return nil // already to be reclaimed as soon or sooner
	}
	c.interruptAt(now, m, reclaim)
	c.advance(now) // the notice is due now
	return nil
}

// Lose makes machine id disappear now without notice, as a hardware failure
// would. Billing stops and its id is retired.
func (c *Cloud) Lose(id string) error {
	now := c.lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return fmt.Errorf("sim: lose: %w", provider.NewNotFound(id))
	}
	c.remove(now, m, EndLost)
	return nil
}

// Interruptions returns every interruption noticed so far, in notice order.
func (c *Cloud) Interruptions() []Interruption {
	c.lock()
	defer c.mu.Unlock()
	out := make([]Interruption, len(c.interrupts))
	for i, in := range c.interrupts {
		out[i] = *in
	}
	return out
}

// Ledger returns the billing as of the clock's now.
func (c *Cloud) Ledger() Ledger {
	now := c.lock()
	defer c.mu.Unlock()
	return buildLedger(now, c.ledger)
}

// Provisions returns how many times hardware was provisioned for machine id
// (0 if never): the count the conformance suite checks.
func (c *Cloud) Provisions(id string) int {
	c.lock()
	defer c.mu.Unlock()
	if r := c.ledger[id]; r != nil {
		return r.Provisions
	}
	return 0
}

// WatchChanges makes the cloud note, from now on, the id of every machine
// that is created, changes state, gets a reclaim notice or disappears, for
// TakeChanges: a caller watching machines with Get can then look at those
// that changed only.
func (c *Cloud) WatchChanges() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch = true
}

// TakeChanges applies the events due by the clock's now and returns the
// ids noted since the last TakeChanges or ResetChanges, in order (an id
// changed twice is there twice), appended to dst[:0]. A machine whose id
// is not among them would be returned by Get as it was the last time.
func (c *Cloud) TakeChanges(dst []string) []string {
	c.lock()
	defer c.mu.Unlock()
	dst = append(dst[:0], c.changed...)
	clear(c.changed)
	c.changed = c.changed[:0]
	return dst
}

// ResetChanges forgets the ids noted so far, without applying events.
func (c *Cloud) ResetChanges() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.changed)
	c.changed = c.changed[:0]
}

// NextEvent returns when the next pending event (a transition finishing or
// timing out, a notice, a reclaim) is due, and false when none is pending. A
// discrete-event simulator advances its clock straight to it.
func (c *Cloud) NextEvent() (time.Time, bool) {
	c.lock()
	defer c.mu.Unlock()
	for len(c.events) > 0 && c.stale(c.events[0]) {
		heap.Pop(&c.events)
	}
	if len(c.events) == 0 {
		return time.Time{}, false
	}
	return c.events[0].at, true
}
