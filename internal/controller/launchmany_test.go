package controller_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// gate holds every Create until `limit` of them are in flight (or every
// Create the test expects has started), so a test sees how many a
// controller keeps in flight without sleeping; it can also refuse an
// offering for lack of capacity.
type gate struct {
	provider.Provider
	limit, expect int
	full          string // offering answering InsufficientCapacity

	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	started  int
	peak     int
	stuck    bool
}

func newGate(p provider.Provider, limit, expect int) *gate {
	g := &gate{Provider: p, limit: limit, expect: expect}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if req.Offering == g.full {
		return provider.Ack{}, provider.NewInsufficientCapacity(req.Offering, errors.New("zone out of m8 spot"))
	}
	g.mu.Lock()
	g.inflight++
	g.started++
	g.peak = max(g.peak, g.inflight)
	g.cond.Broadcast()
	deadline := time.Now().Add(10 * time.Second) // a controller that creates one at a time never fills the gate
	for g.inflight < g.limit && g.started < g.expect && time.Now().Before(deadline) {
		waitCond(g.cond, 50*time.Millisecond)
	}
	if g.inflight < g.limit && g.started < g.expect {
		g.stuck = true
	}
	g.mu.Unlock()
	ack, err := g.Provider.Create(ctx, req)
	g.mu.Lock()
	g.inflight--
	g.cond.Broadcast()
	g.mu.Unlock()
	return ack, err
}

// waitCond waits on c (whose lock is held) for at most d.
func waitCond(c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, c.Broadcast)
	c.Wait()
	t.Stop()
}

// TestConcurrentCreates: with CreateConcurrency, a Provision of many nodes
// keeps exactly that many Creates in flight, journals every record before
// its Create, falls back past an offering out of capacity as the one-at-a-
// time path does, and the pool converges with nothing created twice.
func TestConcurrentCreates(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		nodes       int
		full        string
		wantPeak    int
	}{
		{name: "three in flight", concurrency: 3, nodes: 8, wantPeak: 3},
		{name: "more slots than nodes", concurrency: 16, nodes: 6, wantPeak: 6},
		{name: "spot out of capacity falls back to on-demand", concurrency: 4, nodes: 8, full: spot, wantPeak: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, setup{nodes: capacity.Elastic(0, 16), cfg: func(c *controller.Config) { c.CreateConcurrency = tt.concurrency }})
			g := newGate(e.cloud, tt.concurrency, tt.nodes)
			g.full = tt.full
			e.spy.Provider = g
			e.setDesired(tt.nodes)
			e.tickUntil(tt.nodes, 6)
			if g.stuck {
				t.Fatalf("Creates were not concurrent: the gate waited for %d in flight", tt.concurrency)
			}
			if g.peak != tt.wantPeak {
				t.Fatalf("peak %d Creates in flight, want %d", g.peak, tt.wantPeak)
			}
			if got := e.calls(tideprovider.OpCreate); tt.full == "" && got != tt.nodes {
				t.Fatalf("%d Creates for %d nodes", got, tt.nodes)
			}
			if tt.full != "" {
				if n := e.spy.creates(onDemand); n != tt.nodes {
					t.Fatalf("%d on-demand Creates, want %d (every node falls back)", n, tt.nodes)
				}
				if len(e.events.find(controller.ReasonInsufficientCapacity)) == 0 {
					t.Fatal("no InsufficientCapacity event")
				}
			}
		})
	}
}
