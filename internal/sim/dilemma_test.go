package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// dilemmaPool is a pool of 8-GPU nodes at $10/h that boot in 5 minutes
// (the longest boot the case generator draws), one instance per node,
// with the idle timeout given ("" keeps each policy's default).
func dilemmaPool(idle string) string {
	s := `
pools:
  - name: gpu
    provider:
      type: sim
      options: {boot: 300s, configure: 0s, drain: 0s, delete: 0s}
    nodes: [0, 10]
    offerings:
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}
    scaling:
      policy: tide
      slots_per_node: 1
      reconcile_interval: 15s
`
	if idle != "" {
		s += "      idle_timeout: " + idle + "\n"
	}
	return s + "workload:\n  split_to_node: true\n"
}

// dilemmaJobs is a 10-minute window on two nodes: one runs a job for the
// whole window, the other empties at 5 minutes. With comeback, a job
// that needs a whole node arrives a minute later and runs to the
// window's end; without it, nothing more comes. Up to 6 minutes the two
// workloads are the same.
func dilemmaJobs(comeback bool) []trace.Job {
	long, short := gpuJob(0, 10*time.Minute, 8, 1), gpuJob(0, 5*time.Minute, 8, 1)
	long.Preexisting, short.Preexisting = true, true
	jobs := []trace.Job{long, short}
	if comeback {
		jobs = append(jobs, gpuJob(6*time.Minute, 4*time.Minute, 8, 1))
	}
	return jobs
}

// dilemmaRuns runs one policy on the pool and workload over seeds 1-3,
// as the case benchmark does.
func dilemmaRuns(t *testing.T, pol, idle string, comeback bool) *PolicyRuns {
	t.Helper()
	cfg := mustConfig(t, dilemmaPool(idle))
	w := jobsWorkload(t, cfg, dilemmaJobs(comeback))
	runs := &PolicyRuns{Policy: pol}
	for seed := uint64(1); seed <= 3; seed++ {
		r := mustRun(t, cfg, w, pol, seed)
		runs.Cost = append(runs.Cost, r.Cost)
		runs.P95 = append(runs.P95, r.WaitP95)
	}
	return runs
}

// TestReleaseDilemma is why issue 37's "never dominated by more than
// 2 %" cannot hold on every window, for tide or any policy that does
// not know the future: a node empties, and whether it is needed again
// shows only later. Two workloads are the same until a minute after a
// node empties; in one a job then comes back for it, in the other
// nothing does. A policy that has released the node by then waits a
// boot for a new one when the job comes back, and skyward, which keeps
// it, is cheaper and faster; a policy that keeps it pays for a minute of
// an empty node when nothing comes, and karpenter, which releases it, is
// as fast and cheaper. On a 10-minute window either is far more than
// 2 %. The test runs tide with idle timeouts from its default (1 s) to a
// whole boot and checks, by the case benchmark's own rule (Dominates),
// that each is dominated by more than 2 % on one of the two workloads,
// and that the default loses where the job comes back, not where none
// does (docs/benchmarks.md, "Scaling quality XII").
func TestReleaseDilemma(t *testing.T) {
	const bound = 0.02
	peers := map[bool][]*PolicyRuns{} // by comeback
	for _, comeback := range []bool{true, false} {
		for _, p := range []string{policy.Skyward, policy.Karpenter} {
			peers[comeback] = append(peers[comeback], dilemmaRuns(t, p, "", comeback))
		}
	}
	worst := func(tide *PolicyRuns, comeback bool) (string, float64) {
		by, most := "", 0.0
		for _, p := range peers[comeback] {
			if m, _, ok := Dominates(p, tide); ok && m > most {
				by, most = p.Policy, m
			}
		}
		return by, most
	}
	for _, idle := range []string{"", "30s", "60s", "90s", "120s", "300s"} {
		name := idle
		if name == "" {
			name = fmt.Sprintf("%s (default)", policy.TideIdleTimeout)
		}
		back, none := dilemmaRuns(t, policy.Tide, idle, true), dilemmaRuns(t, policy.Tide, idle, false)
		backBy, backMargin := worst(back, true)
		noneBy, noneMargin := worst(none, false)
		t.Logf("tide, idle timeout %s: job comes back: $%.3f, p95 %.0f s, dominated by %q by %.1f %%; nothing comes: $%.3f, p95 %.0f s, dominated by %q by %.1f %%",
			name, back.MeanCost(), back.MeanP95(), backBy, 100*backMargin, none.MeanCost(), none.MeanP95(), noneBy, 100*noneMargin)
		if max(backMargin, noneMargin) <= bound {
			t.Errorf("tide with idle timeout %s is dominated by at most %.0f %% on both workloads: the dilemma is gone (a policy that sees the future?)", name, 100*bound)
		}
		if idle == "" && (backBy != policy.Skyward || noneBy != "") {
			t.Errorf("tide's default: dominated by %q where the job comes back and by %q where none does; want skyward and nobody (it releases at once)", backBy, noneBy)
		}
	}
}
