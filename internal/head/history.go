package head

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// History bounds: a pool keeps at most historyCap samples, and its cost in
// one-minute buckets over the last costWindow.
const (
	historyCap   = 2880
	costWindow   = 24 * time.Hour
	costBucket   = time.Minute
	costBuckets  = int(costWindow / costBucket)
	historyEvery = time.Second
	// historyQuiet is how often an unchanged pool is sampled anyway, so a
	// chart's time axis keeps moving.
	historyQuiet = 30 * time.Second
	// historyPools bounds how many pools are tracked; a pool unseen for
	// costWindow is forgotten.
	historyPools = 1024
)

// changes is a head-wide change counter: every state change a person would
// see (a submit, a placement, a status report, a cancel, a worker joining or
// leaving, a pressure report, an event, a history sample) bumps it, and
// GET /watch long-polls on it.
type changes struct {
	mu  sync.Mutex
	ver int64
	ch  chan struct{}
}

func newChanges() *changes { return &changes{ver: 1, ch: make(chan struct{})} }

func (c *changes) bump() {
	c.mu.Lock()
	c.ver++
	close(c.ch)
	c.ch = make(chan struct{})
	c.mu.Unlock()
}

func (c *changes) current() (int64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ver, c.ch
}

// Watch returns the head's change version once it differs from since, or
// the current one when maxWait passes or ctx ends first (httpapi.Watcher).
func (h *Head) Watch(ctx context.Context, since int64, maxWait time.Duration) (int64, error) {
	ver, ch := h.changes.current()
	if ver != since {
		return ver, nil
	}
	t := h.clk.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-ctx.Done():
		return ver, ctx.Err()
	}
	ver, _ = h.changes.current()
	return ver, nil
}

// poolHistory is one pool's bounded history.
type poolHistory struct {
	samples  []httpapi.PoolSample // oldest first, at most historyCap
	seq      int64
	lastSeen time.Time
	// cost holds the cost accrued per minute over the last costWindow:
	// cost[i] is the minute costStart + i·costBucket (a ring by minute).
	cost      [costBuckets]float64
	costStart time.Time // the minute of cost's oldest slot
	lastCost  time.Time // when cost was last accrued
	costNow   float64
}

// history keeps the bounded in-memory history of pool status samples that
// the dashboard's overview charts: desired, ready, pending, draining,
// queued and inflight over time, and cost. It is lost on restart.
type history struct {
	mu    sync.Mutex
	pools map[string]*poolHistory
}

func newHistory() *history { return &history{pools: map[string]*poolHistory{}} }

// record adds one sample per pool at now (when the pool changed, or
// historyQuiet passed since its last sample) and accrues its cost since the
// previous call. It reports whether a sample was added.
func (hs *history) record(now time.Time, pools []httpapi.PoolJSON, cost map[string]float64) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	added := false
	for _, p := range pools {
		ph := hs.pools[p.Name]
		if ph == nil {
			if len(hs.pools) >= historyPools {
				continue
			}
			ph = &poolHistory{}
			hs.pools[p.Name] = ph
		}
		ph.lastSeen = now
		ph.accrue(now, cost[p.Name])
		s := httpapi.PoolSample{Time: now.UTC(), Desired: p.Desired, Ready: p.Ready, Pending: p.Pending, Draining: p.Draining,
			Marked: p.Marked, Queued: p.Queued, Inflight: p.Inflight, CostPerHour: cost[p.Name]}
		if n := len(ph.samples); n > 0 {
			last := ph.samples[n-1]
			same := last.Desired == s.Desired && last.Ready == s.Ready && last.Pending == s.Pending &&
				last.Draining == s.Draining && last.Marked == s.Marked && last.Queued == s.Queued &&
				last.Inflight == s.Inflight && last.CostPerHour == s.CostPerHour
			if same && now.Sub(last.Time) < historyQuiet {
				continue
			}
		}
		ph.seq++
		s.Seq = ph.seq
		if len(ph.samples) >= historyCap {
			ph.samples = slices.Delete(ph.samples, 0, len(ph.samples)-historyCap+1)
		}
		ph.samples = append(ph.samples, s)
		added = true
	}
	for name, ph := range hs.pools {
		if now.Sub(ph.lastSeen) > costWindow {
			delete(hs.pools, name)
		}
	}
	return added
}

// accrue adds the cost at the rate of the previous call up to now.
func (ph *poolHistory) accrue(now time.Time, rate float64) {
	minute := now.Truncate(costBucket)
	if ph.lastCost.IsZero() {
		ph.costStart, ph.lastCost, ph.costNow = minute.Add(-costWindow+costBucket), now, rate
		return
	}
	t := ph.lastCost
	for t.Before(now) {
		end := t.Truncate(costBucket).Add(costBucket)
		if end.After(now) {
			end = now
		}
		ph.slot(t)[0] += ph.costNow * end.Sub(t).Hours()
		t = end
	}
	ph.lastCost, ph.costNow = now, rate
}

// slot returns the cost bucket of t, moving the window forward (and
// clearing the minutes it leaves) when t is past its end.
func (ph *poolHistory) slot(t time.Time) []float64 {
	minute := t.Truncate(costBucket)
	for minute.Sub(ph.costStart) >= costWindow {
		ph.cost[ph.index(ph.costStart)] = 0
		ph.costStart = ph.costStart.Add(costBucket)
	}
	i := ph.index(minute)
	return ph.cost[i : i+1]
}

func (ph *poolHistory) index(minute time.Time) int {
	return int(minute.Unix()/int64(costBucket/time.Second)) % costBuckets
}

// window returns the cost accrued over the last costWindow.
func (ph *poolHistory) window() float64 {
	total := 0.0
	for _, c := range ph.cost {
		total += c
	}
	return total
}

// get returns the samples of pool (every pool when pool is nil) after since.
func (hs *history) get(now time.Time, pool *string, since int64) []httpapi.PoolHistoryJSON {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	out := []httpapi.PoolHistoryJSON{}
	for name, ph := range hs.pools {
		if pool != nil && *pool != name {
			continue
		}
		i, _ := slices.BinarySearchFunc(ph.samples, since+1, func(s httpapi.PoolSample, seq int64) int {
			return int(s.Seq - seq)
		})
		h := httpapi.PoolHistoryJSON{Pool: name, CostPerHour: ph.costNow,
			Samples: append([]httpapi.PoolSample{}, ph.samples[i:]...)}
		// The cost accrued up to now at the current rate, without moving
		// the window (a read changes nothing).
		h.CostLast24h = ph.window() + ph.costNow*max(now.Sub(ph.lastCost), 0).Hours()
		if len(ph.samples) > 0 {
			h.Since = ph.samples[0].Time
			if first := ph.costStart.Add(costBucket); h.Since.Before(first) {
				h.Since = first
			}
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b httpapi.PoolHistoryJSON) int {
		switch {
		case a.Pool < b.Pool:
			return -1
		case a.Pool > b.Pool:
			return 1
		}
		return 0
	})
	return out
}

// PoolHistory returns the retained status samples of pool (of every pool
// when pool is nil) with a sequence number above since, and each pool's
// cost now and over the last 24 hours (httpapi.HistorySource).
func (h *Head) PoolHistory(ctx context.Context, pool *string, since int64) ([]httpapi.PoolHistoryJSON, error) {
	return h.history.get(h.clk.Now(), pool, since), nil
}

// SampleHistory records one history sample of every pool now: the
// autoscaled pools' own view (Config.PoolStatus) and the last pressure
// report, without reading the store, so sampling costs nothing at scale.
// The history loop calls it every second; tests call it directly.
func (h *Head) SampleHistory(ctx context.Context) error {
	pressure := h.Pressure()
	var pools []httpapi.PoolJSON
	cost := map[string]float64{}
	seen := map[string]bool{}
	for _, ps := range h.poolStatuses() {
		if seen[ps.Name] {
			continue
		}
		seen[ps.Name] = true
		p := httpapi.PoolJSON{Name: ps.Name, Desired: ps.Desired, Ready: ps.Ready, Pending: ps.Pending, Draining: ps.Draining}
		for _, m := range ps.Machines {
			cost[ps.Name] += m.PricePerHour
			if m.State == NodeMarked || !m.MarkedAt.IsZero() {
				p.Marked++
			}
		}
		pools = append(pools, p)
	}
	for name, pr := range pressure {
		if !seen[name] { // a pool only the head sees: its schedulable workers
			pools = append(pools, httpapi.PoolJSON{Name: name, Ready: len(pr.Nodes)})
		}
	}
	for i := range pools {
		pr := pressure[pools[i].Name]
		pools[i].Queued, pools[i].Inflight = pr.Queued(), pr.Inflight()
	}
	if h.history.record(h.clk.Now(), pools, cost) {
		h.changes.bump()
	}
	return ctx.Err()
}

func (h *Head) historyLoop(ctx context.Context) {
	t := h.clk.NewTicker(historyEvery)
	defer t.Stop()
	for {
		if err := h.SampleHistory(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("sampling pool history", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
