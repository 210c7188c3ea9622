package providertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestFaultyConformance: with no faults set, the wrapper keeps the
// provider contract.
func TestFaultyConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		return newSim(t, func(p provider.Provider) provider.Provider { return providertest.NewFaulty(p, clock.Real{}, 1) })
	})
}

// TestFaultyInjects checks each fault of the wrapper on its own.
func TestFaultyInjects(t *testing.T) {
	h := newSim(t, func(p provider.Provider) provider.Provider { return p })
	clk := clock.NewFake(epoch)
	f := providertest.NewFaulty(h.Provider, clk, 3)
	ctx := t.Context()
	fence := provider.Fence{Controller: "c", Epoch: 1}
	create := func(id string) error {
		_, err := f.Create(ctx, provider.CreateRequest{Fence: fence, Pool: "p", MachineID: id, Offering: h.Offering})
		return err
	}

	f.Set(providertest.Faults{Stock: 1})
	if err := create("p-1"); err != nil {
		t.Fatal(err)
	}
	if err := create("p-2"); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("create past the stock: %v", err)
	}
	if err := create("p-1"); err != nil {
		t.Fatalf("a replay was refused: %v", err)
	}
	f.Set(providertest.Faults{Quota: 1})
	if err := create("p-3"); !provider.IsQuotaExceeded(err) {
		t.Fatalf("create past the quota: %v", err)
	}

	f.Set(providertest.Faults{ErrorRate: 1, AfterRate: 1})
	if err := create("p-4"); !provider.IsTransient(err) {
		t.Fatalf("create with an injected error: %v", err)
	}
	f.Set(providertest.Faults{})
	if _, err := f.Get(ctx, "p-4"); err != nil {
		t.Fatalf("the failed create had taken effect (AfterRate 1): %v", err)
	}

	f.Set(providertest.Faults{HangRate: 1})
	hctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.Get(hctx, "p-1"); !provider.IsTransient(err) || hctx.Err() == nil {
		t.Fatalf("hung get: %v (ctx %v)", err, hctx.Err())
	}
	f.Set(providertest.Faults{})

	f.Interrupt("p-1", 2*time.Minute)
	m, err := f.Get(ctx, "p-1")
	if err != nil || !m.ReclaimAt.Equal(epoch.Add(2*time.Minute)) {
		t.Fatalf("noticed machine: %+v %v", m, err)
	}
	clk.Advance(2 * time.Minute)
	if _, err := f.List(ctx, provider.Filter{Pool: "p"}); err != nil { // the first call after the notice reclaims
		t.Fatal(err)
	}
	h.Settle()
	if _, err := f.Get(ctx, "p-1"); !provider.IsNotFound(err) {
		t.Fatalf("machine not reclaimed after its notice: %v", err)
	}
	c := f.Counts()
	if c.Provisioned["p-1"] != 1 || c.CapacityRefused != 1 || c.QuotaRefused != 1 || c.Errors != 1 || c.After != 1 ||
		c.Hangs != 1 || c.Noticed != 1 || c.Reclaimed != 1 {
		t.Fatalf("counts %+v", c)
	}
}
