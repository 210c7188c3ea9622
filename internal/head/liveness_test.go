package head

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
)

// stepClock is a fake wall clock that the test can step, over a fake
// monotonic clock that steps do not change (as clock.Real's Elapsed).
type stepClock struct {
	*clock.Fake
	off atomic.Int64
}

func (c *stepClock) Now() time.Time         { return c.Fake.Now().Add(time.Duration(c.off.Load())) }
func (c *stepClock) Elapsed() time.Duration { return c.Fake.Now().Sub(start) }
func (c *stepClock) step(d time.Duration)   { c.off.Add(int64(d)) }
func (e *env) status(id string) string {
	var w httpapi.WorkerJSON
	e.do("GET", "/workers/"+id, nil, &w)
	return w.Status
}
func (e *env) checkLiveness() { e.t.Helper(); must(e.t, e.h.CheckLiveness(context.Background())) }
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
func statuses(e *env, ids ...string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, e.status(id))
	}
	return out
}

// TestLivenessIgnoresHeadClockSteps (issue 16): the head judges worker
// silence on its monotonic clock, so a step of its wall clock by an hour,
// forward or back, marks no worker SUSPECT or OFFLINE, while a worker that
// really stops is still marked OFFLINE after offline-after of monotonic
// time. Before the fix, the +1 h step made every worker OFFLINE at the
// next check (their stored heartbeat times were an hour old).
func TestLivenessIgnoresHeadClockSteps(t *testing.T) {
	clk := &stepClock{Fake: clock.NewFake(start)}
	cfg := Config{DataDir: t.TempDir(), Clock: clk, ReserveAfter: -1}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() { srv.Close(); h.Close() })
	e := &env{t: t, h: h, srv: srv, clk: clk.Fake, cfg: h.cfg}
	tok1, tok2 := e.register("w1", 0), e.register("w2", 0)
	both := func() { e.heartbeat("w1", tok1, 0); e.heartbeat("w2", tok2, 0) }
	online := func(when string) {
		t.Helper()
		e.checkLiveness()
		if s := statuses(e, "w1", "w2"); s[0] != "ONLINE" || s[1] != "ONLINE" {
			t.Fatalf("%s: workers %v, want both ONLINE", when, s)
		}
	}
	both()
	for _, step := range []time.Duration{time.Hour, -time.Hour, -time.Hour, time.Hour} {
		clk.step(step)
		online("just after a step of " + step.String())
		clk.Advance(10 * time.Second)
		both()
		online("a heartbeat after the step")
	}

	// A real death is still seen, after a forward step too: w2 stops,
	// w1 keeps polling every 10 s.
	clk.step(time.Hour)
	for i := 0; clk.Elapsed() < h.cfg.OfflineAfter+time.Minute; i++ {
		clk.Advance(10 * time.Second)
		e.heartbeat("w1", tok1, 0)
		e.checkLiveness()
		if i == 0 {
			if s := statuses(e, "w1", "w2"); s[1] != "ONLINE" {
				t.Fatalf("10 s after w2's last heartbeat: %v", s)
			}
		}
	}
	if s := statuses(e, "w1", "w2"); s[0] != "ONLINE" || s[1] != "OFFLINE" {
		t.Fatalf("w2 silent for offline-after: workers %v, want ONLINE, OFFLINE", s)
	}
}

// TestLivenessFallsBackToStoredTimes: heartbeats this head did not serve
// (stored before a restart) are judged by their wall-clock age: a new head
// on the same data dir marks OFFLINE a worker whose stored heartbeat is
// older than offline-after, and keeps one heard a moment ago.
func TestLivenessFallsBackToStoredTimes(t *testing.T) {
	e := newEnv(t, nil)
	tok1 := e.register("w1", 0)
	e.register("w2", 0)
	e.clk.Advance(e.h.cfg.OfflineAfter - 5*time.Second)
	e.heartbeat("w1", tok1, 0)
	e.srv.Close()
	must(t, e.h.Close())
	e = openEnv(t, Config{DataDir: e.cfg.DataDir, Clock: e.clk, ReserveAfter: -1})
	e.clk.Advance(10 * time.Second)
	e.checkLiveness()
	if s := statuses(e, "w1", "w2"); s[0] != "ONLINE" || s[1] != "OFFLINE" {
		t.Fatalf("after a restart: workers %v, want ONLINE (heard 10 s ago), OFFLINE (silent for offline-after + 5 s)", s)
	}
}
