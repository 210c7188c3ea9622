package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/trace"
	"github.com/tide-project/tide/sdk/provider"
)

// burstPool is 32-core, 8-GPU nodes, up to 10,000 of them.
const burstPool = `
pools:
  - name: burst
    provider: {type: sim}
    nodes: [0, 10000]
    offerings:
      - {type: g8c32, cpu: 32, memory: 128Gi, gpus: 8, price: 12}
    scaling: {policy: tide, slots_per_node: 24}
`

// burstEngine builds the synthetic burst: 5,000 joined nodes running
// 120,000 instances (24 each: 8 with a GPU, 16 without), and 30,000
// instances just arrived (20,000 CPU-only, 10,000 with a GPU), 150,000 in
// all; the existing nodes have room for 40,000 CPU-only instances' CPU
// but no GPU left.
func burstEngine(b testing.TB, pol string) *engine {
	b.Helper()
	const nodes, perNode = 5000, 24
	cfg := mustConfig(b, burstPool)
	gpu := capacity.Resources{MilliCPU: 1000, Memory: 4 << 30, GPUs: 1}
	cpu := capacity.Resources{MilliCPU: 1000, Memory: 2 << 30}
	jobs := []trace.Job{
		{ID: "run-gpu", Requests: gpu, Replicas: nodes * 8, Duration: time.Hour},
		{ID: "run-cpu", Requests: cpu, Replicas: nodes * 16, Duration: time.Hour},
		{ID: "burst-cpu", Submit: time.Minute, Requests: cpu, Replicas: 20000, Duration: time.Hour},
		{ID: "burst-gpu", Submit: time.Minute, Requests: gpu, Replicas: 10000, Duration: time.Hour},
	}
	w := jobsWorkload(b, cfg, jobs)
	e, err := newEngine(cfg, w, Options{Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	for ord := range nodes {
		e.join(&provider.Machine{ID: fmt.Sprintf("burst-%d-%d", ord, ord+1), Offering: cfg.Pool.Offerings[0].Name(), State: provider.Configured})
	}
	e.arrive()
	e.arrive()
	// Groups 0 and 1 are the GPU job's and the CPU job's instances.
	for _, n := range e.nodes {
		e.begin(0, n, 8)
		e.begin(1, n, 16)
	}
	e.arrive()
	e.arrive()
	if e.running != 120000 || e.queued != 30000 || len(e.violations) > 0 {
		b.Fatalf("setup: %d running, %d queued, %v", e.running, e.queued, e.violations)
	}
	e.desired = nodes
	return e
}

// BenchmarkDecisionLoop measures one decision loop of the 5,000-node,
// 150,000-instance burst: the pressure report, the policy's decision and
// the reconciler's actions (a Provision of the new nodes), per policy.
func BenchmarkDecisionLoop(b *testing.B) {
	for _, pol := range policy.Names {
		b.Run(pol, func(b *testing.B) {
			e := burstEngine(b, pol)
			now := e.now.Add(time.Hour)
			st := policy.State{PendingSince: e.now} // the batch window has passed
			current := make([]reconcile.NodeID, len(e.nodes))
			for i := range current {
				current[i] = reconcile.NodeID(i)
			}
			var d policy.Decision
			var acts []reconcile.Action
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				rp, err := reconcile.New(reconcile.Config{Nodes: e.pcfg.Nodes})
				if err != nil {
					b.Fatal(err)
				}
				rp.Step(now, reconcile.Adopt{Current: current})
				b.StartTimer()
				d = e.pol.Decide(policy.Input{Now: now, Desired: e.desired, Pressure: e.pressure(), State: st})
				acts = rp.Step(now, reconcile.DesiredChanged{Desired: d.Desired})
			}
			if d.Desired <= len(e.nodes) && pol != policy.Utilization {
				b.Fatalf("%s: desired %d for a burst that needs new nodes", pol, d.Desired)
			}
			b.ReportMetric(float64(d.Desired), "desired")
			for _, a := range acts {
				if p, ok := a.(reconcile.Provision); ok {
					b.ReportMetric(float64(len(p.IDs)), "provisioned")
				}
			}
		})
	}
}

// TestDecisionLoopBurst runs tide's decision of BenchmarkDecisionLoop and
// checks it: the burst's 20,000 CPU-only instances go into the free CPU (8
// cores on each node), the 10,000 GPU instances need 1,250 new nodes of 8
// GPUs, and a burst that large gets its burst spare, 2 + 1,250/10 nodes.
func TestDecisionLoopBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 150,000-instance cluster")
	}
	e := burstEngine(t, policy.Tide)
	now := e.now.Add(time.Hour)
	start := time.Now()
	d := e.pol.Decide(policy.Input{Now: now, Desired: e.desired, Pressure: e.pressure(), State: policy.State{PendingSince: e.now}})
	t.Logf("tide: %s in %s", d.Reason, time.Since(start))
	if d.Desired != 5000+1250+127 {
		t.Errorf("tide desired %d, want 6377 (%s)", d.Desired, d.Reason)
	}
}
