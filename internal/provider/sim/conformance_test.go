package sim_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// catalog is a small cloud: an on-demand and a spot offering of one type,
// with real-looking boot latencies.
func catalog() []sim.Offering {
	res := capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}
	return []sim.Offering{
		{
			Offering:  capacity.Offering{Type: "m8", Zone: "z1", Kind: capacity.OnDemand, Resources: res, PricePerHour: 0.4},
			Boot:      sim.Latency{Min: 20 * time.Second, Median: 45 * time.Second, Max: 3 * time.Minute},
			Configure: sim.Latency{Min: 5 * time.Second, Median: 10 * time.Second, Max: 30 * time.Second},
			Drain:     sim.Fixed(5 * time.Second),
			Delete:    sim.Latency{Min: 10 * time.Second, Median: 20 * time.Second, Max: time.Minute},
		},
		{
			Offering: capacity.Offering{Type: "m8", Zone: "z1", Kind: capacity.Spot, Resources: res, PricePerHour: 0.12,
				InterruptionProbability: 0.05, InterruptionPenalty: 2},
			Boot:   sim.Latency{Min: 30 * time.Second, Median: time.Minute, Max: 5 * time.Minute},
			Delete: sim.Fixed(10 * time.Second),
		},
	}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		clk := clock.NewFake(epoch)
		c, err := sim.New(sim.Config{Offerings: catalog()}, clk, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{
			Provider: c,
			Offering: "m8/z1/on-demand",
			Settle:   func() { clk.Advance(time.Hour) },
			Creates:  c.Provisions,
		}
	})
}

// TestConformanceInstrumented: the metrics decorator keeps the contract.
func TestConformanceInstrumented(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		clk := clock.NewFake(epoch)
		c, err := sim.New(sim.Config{Offerings: catalog()}, clk, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{
			Provider: provider.Instrument(c, prometheus.NewRegistry(), provider.WithName("sim"), provider.WithClock(clk)),
			Offering: "m8/z1/on-demand",
			Settle:   func() { clk.Advance(time.Hour) },
			Creates:  c.Provisions,
		}
	})
}
