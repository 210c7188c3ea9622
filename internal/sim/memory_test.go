package sim

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// peakLiveHeap runs one policy and returns the largest live heap seen
// (after a collection) at the engine's progress reports.
func peakLiveHeap(t *testing.T, cfg *Config, w *Workload, pol string) uint64 {
	t.Helper()
	var peak uint64
	var ms runtime.MemStats
	sample := func(float64) {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	sample(0)
	if _, err := Run(context.Background(), cfg, w, Options{Policy: pol, Seed: 1, Progress: sample}); err != nil {
		t.Fatal(err)
	}
	return peak
}

// TestMemoryFollowsGroups: the same jobs with 100 times the instances each
// (100,000 live instead of 1,000) need about the same memory: the engine
// keeps groups and nodes, not instances. (The engine that kept a record
// per instance needed some 100 bytes per instance of the trace: 400 MB
// more here.)
func TestMemoryFollowsGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four million instances")
	}
	cfg := mustConfig(t, `
pools:
  - name: cpu
    provider: {type: sim, options: {boot: 60s}}
    nodes: [0, 200]
    offerings: [{type: c32, cpu: 32, memory: 128Gi, price: 1.5}]
    scaling: {policy: tide}
`)
	jobs := func(replicas int) *Workload {
		var js []trace.Job
		for i := range 4000 {
			js = append(js, trace.Job{Submit: time.Duration(i) * 9 * time.Second, Duration: 20 * time.Minute,
				Requests: capacity.Resources{MilliCPU: 10, Memory: 1 << 20}, Replicas: replicas})
		}
		return jobsWorkload(t, cfg, js)
	}
	small, large := jobs(10), jobs(1000)
	for _, pol := range []string{policy.Tide, policy.TargetTracking} {
		a := peakLiveHeap(t, cfg, small, pol)
		b := peakLiveHeap(t, cfg, large, pol)
		t.Logf("%s: peak live heap %.1f MB with %d instances, %.1f MB with %d", pol, float64(a)/1e6, small.Instances, float64(b)/1e6, large.Instances)
		if float64(b) > 1.5*float64(a) {
			t.Errorf("%s: 100 × the instances took %.2f × the memory", pol, float64(b)/float64(a))
		}
	}
}
