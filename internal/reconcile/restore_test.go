package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// TestRestoreRoundTrip drives random worlds and, after every step, replaces
// the pool by Restore(its View): the restored pool describes the same state,
// and the package guarantees keep holding when every step runs on a restored
// pool (what tide decide --steps does).
func TestRestoreRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		w, err := newWorld(seed)
		if err != nil {
			t.Fatal(err)
		}
		fail := func(err error) {
			t.Helper()
			t.Fatalf("seed %d: %v\nlast events:\n%s\npool:\n%s", seed, err, w.tail(20), w.p.Describe())
		}
		if err := w.step(Tick{}); err != nil {
			fail(err)
		}
		for range 300 {
			w.now = w.now.Add(time.Duration(w.rng.IntN(6)) * time.Second)
			ev := w.randomEvent()
			if ev == nil {
				continue
			}
			if err := w.step(ev); err != nil {
				fail(err)
			}
			if _, ok := ev.(Adopt); ok {
				if err := w.step(DesiredChanged{Desired: w.want, Reason: "after restart"}); err != nil {
					fail(err)
				}
			}
			q, err := Restore(w.p.Config(), w.p.View())
			if err != nil {
				fail(err)
			}
			if got, want := q.Describe(), w.p.Describe(); got != want {
				t.Fatalf("seed %d: restored pool differs:\n%s\nwant:\n%s", seed, got, want)
			}
			q.blocked = w.p.blocked
			w.p = q
		}
		if err := w.settle(); err != nil {
			fail(err)
		}
	}
}

func TestRestoreRefusesImpossibleViews(t *testing.T) {
	cfg := Config{Nodes: capacity.Elastic(0, 5)}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		v    View
		want string
	}{
		{View{Desired: 6}, "desired: 6 is outside the bounds"},
		{View{Desired: 1, Current: []NodeID{-1}}, "current: node id -1 is negative"},
		{View{Desired: 1, Current: []NodeID{1, 1}}, "current: node 1 is listed twice"},
		{View{Desired: 1, Current: []NodeID{1}, Pending: []NodeID{1}}, "pending: node 1 is also joined"},
		{View{Desired: 1, Draining: []NodeID{2}}, "draining: node 2 is neither joined nor booting"},
		{View{Desired: 1, Current: []NodeID{2}, Draining: []NodeID{2}, Busy: []NodeID{2}}, "draining: node 2 runs work"},
		{View{Desired: 1, Busy: []NodeID{3}}, "busy: node 3 has not joined"},
		{View{Desired: 1, Marks: map[NodeID]time.Time{3: at}}, "marks: node 3 has not joined"},
		{View{Desired: 1, Current: []NodeID{0}, Asked: []NodeID{0}}, "in_flight: node 0 is also joined or booting"},
		{View{Desired: 1, Asked: []NodeID{1}, InFlight: []NodeID{2}}, "in_flight: node 2 was not asked for"},
		{View{Desired: 1, InFlight: []NodeID{2}}, "in_flight: set without asked"},
	} {
		if _, err := Restore(cfg, tt.v); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Restore(%+v) = %v, want an error containing %q", tt.v, err, tt.want)
		}
	}
}
