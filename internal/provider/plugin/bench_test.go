package plugin_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/sdk/provider"
)

// transports are the ways a benchmark reaches the sim provider: in-process,
// or as a go-plugin subprocess over loopback gRPC (the plugin transport).
func transports(b *testing.B) map[string]func(b *testing.B) provider.Provider {
	return map[string]func(b *testing.B) provider.Provider{
		"in-process": func(b *testing.B) provider.Provider {
			c, err := plugin.NewSim(nil, time.Hour, 1)
			if err != nil {
				b.Fatal(err)
			}
			return c
		},
		"plugin": func(b *testing.B) provider.Provider {
			return startPluginB(b, "sim", "TIDE_TEST_SIM_LATENCY=1h")
		},
	}
}

// percentile returns the q-quantile of ds (sorted in place).
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*q))]
}

// BenchmarkCreateRoundTrip: one Create, from the call to its Ack; p50 and
// p99 are reported beside ns/op.
func BenchmarkCreateRoundTrip(b *testing.B) {
	for _, name := range []string{"in-process", "plugin"} {
		b.Run(name, func(b *testing.B) {
			p := transports(b)[name](b)
			ctx := context.Background()
			f := provider.Fence{Controller: "bench", Epoch: 1}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := p.Create(ctx, provider.CreateRequest{Fence: f, Pool: "bench", MachineID: fmt.Sprintf("m-%d", i),
					Offering: "m8/z1/on-demand"}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkList10K: List of a pool of 10,000 machines.
func BenchmarkList10K(b *testing.B) {
	for _, name := range []string{"in-process", "plugin"} {
		b.Run(name, func(b *testing.B) {
			p := transports(b)[name](b)
			ctx := context.Background()
			f := provider.Fence{Controller: "bench", Epoch: 1}
			for i := range 10_000 {
				if _, err := p.Create(ctx, provider.CreateRequest{Fence: f, Pool: "bench", MachineID: fmt.Sprintf("m-%05d", i),
					Offering: "m8/z1/on-demand", Labels: map[string]string{"team": "bench"}}); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				ms, err := p.List(ctx, provider.Filter{Pool: "bench"})
				if err != nil || len(ms) != 10_000 {
					b.Fatalf("List: %d machines, %v", len(ms), err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

// staticLister is a provider whose List returns 10,000 prepared machines:
// it isolates the transport's cost from the provider's own.
type staticLister struct {
	provider.Provider
	ms []provider.Machine
}

func (s staticLister) List(context.Context, provider.Filter) ([]provider.Machine, error) {
	return s.ms, nil
}

// BenchmarkListWireOnly10K: List of 10,000 machines from a provider that
// answers at once, called directly (in-process) and through the SDK client
// and server over loopback gRPC with tide's adapters on both ends (wire):
// the difference is what the plugin transport adds to a List.
func BenchmarkListWireOnly10K(b *testing.B) {
	now := time.Now()
	st := staticLister{ms: make([]provider.Machine, 10_000)}
	for i := range st.ms {
		st.ms[i] = provider.Machine{ID: fmt.Sprintf("m-%05d", i), Pool: "bench", Offering: "m8/z1/on-demand", State: provider.Idle,
			Host: "10.0.0.1", Labels: map[string]string{"team": "bench"}, CreatedAt: now, UpdatedAt: now}
	}
	for _, name := range []string{"in-process", "wire"} {
		b.Run(name, func(b *testing.B) {
			var p provider.Provider = st
			if name == "wire" {
				client, err := provider.NewClient(context.Background(), serveLoopback(b, st), 0)
				if err != nil {
					b.Fatal(err)
				}
				p = client
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				ms, err := p.List(context.Background(), provider.Filter{Pool: "bench"})
				if err != nil || len(ms) != 10_000 {
					b.Fatalf("List: %d machines, %v", len(ms), err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}
