package sim_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

// BenchmarkPoolStep measures one controller-like step on one pool of a
// cloud holding 1,000 pools of 10 machines: List the pool, create one
// machine, delete the oldest, with the clock moving on so transitions
// complete. ns/op is the provider's cost per pool per reconcile tick.
func BenchmarkPoolStep(b *testing.B) {
	const pools, per = 1000, 10
	clk := clock.NewFake(epoch)
	c, err := sim.New(sim.Config{Offerings: catalog()}, clk, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	f := provider.Fence{Controller: "bench", Epoch: 1}
	next := make([]int, pools) // next id per pool
	oldest := make([]int, pools)
	for p := range pools {
		for range per {
			id := fmt.Sprintf("p%d-%d", p, next[p])
			next[p]++
			if _, err := c.Create(ctx, provider.CreateRequest{Fence: f, Pool: fmt.Sprint("p", p), MachineID: id, Offering: onDemand}); err != nil {
				b.Fatal(err)
			}
		}
	}
	clk.Advance(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := i % pools
		pool := fmt.Sprint("p", p)
		if _, err := c.List(ctx, provider.Filter{Pool: pool}); err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("p%d-%d", p, next[p])
		next[p]++
		if _, err := c.Create(ctx, provider.CreateRequest{Fence: f, Pool: pool, MachineID: id, Offering: onDemand}); err != nil {
			b.Fatal(err)
		}
		old := fmt.Sprintf("p%d-%d", p, oldest[p])
		oldest[p]++
		if _, err := c.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: pool, MachineID: old}); err != nil {
			b.Fatal(err)
		}
		if p == pools-1 {
			clk.Advance(5 * time.Minute)
		}
	}
}
