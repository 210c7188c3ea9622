package head

import (
	"context"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/store"
)

// elapsedClock is a clock that can also tell the time elapsed on a clock
// that is never stepped (clock.Real: the process's monotonic clock).
type elapsedClock interface {
	Elapsed() time.Duration
}

// liveness judges worker silence on a monotonic clock. The store keeps
// each worker's last heartbeat as a wall-clock time (h.clk.Now()); a step
// of the head's wall clock past offline-after made every worker look
// silent at once. The head now remembers, for every heartbeat it served,
// the stored time and the monotonic time it arrived at; a worker is
// silent when its monotonic silence exceeds the limit. A stored time the
// head did not write itself (a heartbeat before a restart, or served by
// another head) is judged by its wall-clock age once, when first seen:
// the fallback after a restart.
//
// The store's MarkSuspect and MarkOffline take a wall-clock cutoff, which
// stays the transaction's guard against a heartbeat arriving meanwhile:
// the cutoff passed is the oldest stored time among the workers that are
// not silent, so none of them is marked, whatever the wall clock did.
type liveness struct {
	clk     clock.Clock
	elapsed func() time.Duration

	mu   sync.Mutex
	seen map[string]seenAt
}

// seenAt is one worker's last heartbeat: the time stored with it (unix
// nanoseconds) and the monotonic time it arrived at.
type seenAt struct {
	stored int64
	mono   time.Duration
}

func newLiveness(clk clock.Clock) *liveness {
	l := &liveness{clk: clk, seen: map[string]seenAt{}}
	if e, ok := clk.(elapsedClock); ok {
		l.elapsed = e.Elapsed
	} else {
		// A test's fake clock is never stepped behind the test's back:
		// its own time is monotonic.
		start := clk.Now()
		l.elapsed = func() time.Duration { return clk.Now().Sub(start) }
	}
	return l
}

// heard records a heartbeat stored with the wall-clock time at.
func (l *liveness) heard(worker string, at time.Time) {
	mono := l.elapsed()
	l.mu.Lock()
	l.seen[worker] = seenAt{stored: at.UnixNano(), mono: mono}
	l.mu.Unlock()
}

// cutoffs reports whether any worker of ws (not OFFLINE; with online,
// ONLINE) has been silent for longer than limit, and the wall-clock cutoff
// to mark them with: at or below every other worker's stored time, so no
// worker that is not silent is marked, and above the silent ones' stored
// times when they are older than every other's. A silent worker whose
// stored time is not older (the head's clock went back after it was last
// heard) is marked once the others' stored times pass it.
func (l *liveness) cutoffs(ws []*store.Worker, limit time.Duration, online bool) (cutoff time.Time, any bool) {
	now, wall := l.elapsed(), l.clk.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	const none = int64(1<<63 - 1)
	minFresh, maxSilent := none, int64(-1<<63)
	for _, w := range ws {
		if w.Status == store.WorkerOffline || (online && w.Status != store.WorkerOnline) {
			continue
		}
		stored := w.LastHeartbeatAt.UnixNano()
		s, ok := l.seen[w.ID]
		if !ok || s.stored != stored {
			// Not a heartbeat this head served: its wall-clock age, once.
			s = seenAt{stored: stored, mono: now - max(0, wall.Sub(w.LastHeartbeatAt))}
			l.seen[w.ID] = s
		}
		if now-s.mono > limit {
			maxSilent = max(maxSilent, stored)
		} else {
			minFresh = min(minFresh, stored)
		}
	}
	if maxSilent == -1<<63 {
		return time.Time{}, false
	}
	if minFresh == none {
		return time.Unix(0, maxSilent+1), true
	}
	return time.Unix(0, minFresh), true
}

// forget drops the workers that are not in ws (deleted ones).
func (l *liveness) forget(ws []*store.Worker) {
	keep := make(map[string]bool, len(ws))
	for _, w := range ws {
		keep[w.ID] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.seen {
		if !keep[id] {
			delete(l.seen, id)
		}
	}
}

// CheckLiveness runs one liveness pass: ONLINE workers silent for
// SuspectAfter become SUSPECT, workers silent for OfflineAfter become
// OFFLINE with their instances UNKNOWN or requeued (held out of scheduling
// for fenceHold, while the lost worker's fence stops the old attempts).
// Silence is measured on
// the monotonic clock (see liveness), so a step of the head's wall clock
// marks no worker.
func (h *Head) CheckLiveness(ctx context.Context) error {
	ws, err := h.st.ListWorkers(ctx)
	if err != nil {
		return err
	}
	h.live.forget(ws)
	if cutoff, any := h.live.cutoffs(ws, h.cfg.SuspectAfter, true); any {
		if n, err := h.st.MarkSuspect(ctx, cutoff); err != nil {
			return err
		} else if n > 0 {
			h.log.Warn("workers suspect", "count", n)
		}
	}
	cutoff, any := h.live.cutoffs(ws, h.cfg.OfflineAfter, false)
	if !any {
		return nil
	}
	ids, err := h.st.MarkOffline(ctx, cutoff, h.clk.Now(), h.fenceHold())
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		h.m.offline.Add(float64(len(ids)))
		h.log.Warn("workers offline", "workers", ids)
		for _, id := range ids {
			h.notify.wake(id)
		}
		h.Poke()
	}
	return nil
}
