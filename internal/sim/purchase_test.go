package sim

import (
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// mixedPool is issue 15's pool of several node types: a 2-GPU offering
// that is cheaper per node and per GPU, and an 8-GPU one on demand and on
// spot. Latencies are fixed as in gpuPool.
const mixedPool = `
pools:
  - name: gpu
    provider:
      type: sim
      options: {boot: 100s, configure: 0s, drain: 0s, delete: 0s}
    nodes: [0, 40]
    offerings:
      - {type: g2, cpu: 16, memory: 128Gi, gpus: 2, price: 2}
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 6, capacity: spot, interruption_probability: 0.01, interruption_penalty: 10}
    scaling:
      policy: tide
      slots_per_node: 8
      idle_timeout: 60s
      reconcile_interval: 15s
workload:
  split_to_node: true
`

// TestMixedSizesBuyWhatTheWorkRunsOn: fed only 8-GPU work, a pool of a
// 2-GPU and an 8-GPU offering buys 8-GPU nodes only (spot, the cheapest
// that fits, by effective cost) under every policy, every instance
// finishes, and node-hours stay near the lower bound (before the purchase
// reached the controller, every policy grew the pool to its max of 40 with
// 2-GPU nodes, 1,100 node-hours against tide's 50 now, and left 24 of 24
// instances unfinished).
// Mixed work (2- and 8-GPU jobs) is bought as a mix.
func TestMixedSizesBuyWhatTheWorkRunsOn(t *testing.T) {
	cfg := mustConfig(t, mixedPool)
	var jobs []trace.Job
	for i := range 12 {
		jobs = append(jobs, gpuJob(time.Duration(i)*10*time.Minute, 2*time.Hour, 8, 1+i%3))
	}
	w := jobsWorkload(t, cfg, jobs)
	b, err := w.Bound(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range policy.Names {
		r := mustRun(t, cfg, w, pol, 1)
		if r.Unfinished > 0 {
			t.Fatalf("%s: %d instances unfinished (%d machines, %.1f node-hours)", pol, r.Unfinished, r.Machines, r.NodeHours)
		}
		ratio := r.NodeHours / b.NodeHours
		t.Logf("%s, 8-GPU work: %.1f node-hours, bound %.1f (%.2f x), $%.1f, %d machines, p95 wait %.0f s",
			pol, r.NodeHours, b.NodeHours, ratio, r.Cost, r.Machines, r.WaitP95)
		if ratio > 1.5 {
			t.Errorf("%s: %.2f x the lower bound's node-hours", pol, ratio)
		}
		// Every machine was an 8-GPU one, the spot offering (effective
		// $6.10/h, cheaper than on-demand's $10): billed $6 per node-hour.
		if perHour := r.Cost / r.NodeHours; perHour < 5.99 || perHour > 6.01 {
			t.Errorf("%s: billed $%.2f per node-hour, want spot's $6 (only 8-GPU spot nodes)", pol, perHour)
		}
	}

	// Mixed work: 2-GPU jobs too. Everything finishes, within 1.5 x.
	var mixed []trace.Job
	for i := range 24 {
		g := int64(8)
		if i%2 == 1 {
			g = 2
		}
		mixed = append(mixed, gpuJob(time.Duration(i)*5*time.Minute, time.Hour, g, 1))
	}
	w = jobsWorkload(t, cfg, mixed)
	if b, err = w.Bound(cfg, false); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, cfg, w, "tide", 1)
	if r.Unfinished > 0 {
		t.Fatalf("mixed: %d instances unfinished", r.Unfinished)
	}
	t.Logf("mixed work: %.1f node-hours, $%.1f, %d machines, bound %.1f node-hours", r.NodeHours, r.Cost, r.Machines, b.NodeHours)
}
