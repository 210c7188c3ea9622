// Package clock is the time source that drivers take as an argument, so the
// same code runs on the wall clock, on a test's fake clock and on the
// simulator's virtual time. Pure packages never use it: they take time as a
// plain argument.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
}

// Timer is a one-shot timer.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset re-arms the timer to fire after d.
	Reset(d time.Duration)
}

// Ticker fires periodically.
type Ticker interface {
	// C delivers the time at each tick.
	C() <-chan time.Time
	// Stop turns the ticker off.
	Stop()
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// processStart anchors Real.Elapsed.
var processStart = time.Now()

// Elapsed returns the time since the process started, on the monotonic
// clock: a step of the wall clock does not change it.
func (Real) Elapsed() time.Duration { return time.Since(processStart) }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Fake is a manual clock for tests: time moves only when Advance is called,
// and timers and tickers due by then fire (in order of their due time).
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeWaiter struct {
	clock  *Fake
	due    time.Time
	period time.Duration // 0 for timers
	ch     chan time.Time
	active bool
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, 0) }

// NewTicker returns a ticker that fires every d of fake time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	return fakeTicker{f.add(d, d)}
}

func (f *Fake) add(d, period time.Duration) *fakeWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{clock: f, due: f.now.Add(d), period: period, ch: make(chan time.Time, 1), active: true}
	f.waiters = append(f.waiters, w)
	return w
}

// Advance moves the fake time forward by d, firing what comes due. A tick
// whose channel is still full is dropped, like time.Ticker does.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		var next *fakeWaiter
		for _, w := range f.waiters {
			if w.active && !w.due.After(end) && (next == nil || w.due.Before(next.due)) {
				next = w
			}
		}
		if next == nil {
			break
		}
		f.now = next.due
		select {
		case next.ch <- next.due:
		default:
		}
		if next.period > 0 {
			next.due = next.due.Add(next.period)
		} else {
			next.active = false
		}
	}
	f.now = end
}

// Waiters returns the number of armed timers and tickers, so a test can wait
// until the code under test is blocked on one.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if w.active {
			n++
		}
	}
	return n
}

func (w *fakeWaiter) C() <-chan time.Time { return w.ch }

func (w *fakeWaiter) Stop() bool {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	was := w.active
	w.active = false
	return was
}

func (w *fakeWaiter) Reset(d time.Duration) {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	w.due = w.clock.now.Add(d)
	w.active = true
}

type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t fakeTicker) Stop()               { t.w.Stop() }
