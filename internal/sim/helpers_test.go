package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/trace"
)

// gpuPool is a pool of 8-GPU nodes at $10/h with fixed latencies, so that
// figures can be computed by hand: boot 100 s, configure, drain and delete
// instant, reconcile every 15 s, idle timeout 60 s.
const gpuPool = `
pools:
  - name: gpu
    provider:
      type: sim
      options: {boot: 100s, configure: 0s, drain: 0s, delete: 0s}
    nodes: [0, 50]
    offerings:
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}
    scaling:
      policy: tide
      slots_per_node: 8
      idle_timeout: 60s
      reconcile_interval: 15s
workload:
  split_to_node: true
`

// mustConfig parses a configuration or fails the test.
func mustConfig(t testing.TB, yaml string) *Config {
	t.Helper()
	c, err := ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// jobsWorkload prepares hand-made jobs as a workload of cfg.
func jobsWorkload(t testing.TB, cfg *Config, jobs []trace.Job) *Workload {
	t.Helper()
	for i := range jobs {
		if jobs[i].ID == "" {
			jobs[i].ID = fmt.Sprintf("job-%d", i)
		}
		if jobs[i].Replicas == 0 {
			jobs[i].Replicas = 1
		}
	}
	w, err := PrepareWorkload(&trace.Workload{Name: "test.csv", Format: trace.Format{Name: "test", Kind: trace.KindJobs}, Jobs: jobs}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// gpuJob is n replicas of a job asking for gpus GPUs for d from submit.
func gpuJob(submit, d time.Duration, gpus int64, n int) trace.Job {
	return trace.Job{Submit: submit, Duration: d, Requests: capacity.Resources{GPUs: gpus}, Replicas: n}
}

// randomJobs draws n GPU jobs over span with the seed: 1 to 8 GPUs, 1 to
// 3 replicas, durations from 10 s to 2 h.
func randomJobs(seed uint64, n int, span time.Duration) []trace.Job {
	r := rand.New(rand.NewPCG(seed, 99))
	jobs := make([]trace.Job, n)
	for i := range jobs {
		jobs[i] = gpuJob(time.Duration(r.Int64N(int64(span))).Round(time.Second), time.Duration(10+r.IntN(7200))*time.Second,
			[]int64{1, 1, 1, 2, 4, 8}[r.IntN(6)], 1+r.IntN(3))
	}
	slices.SortStableFunc(jobs, func(a, b trace.Job) int { return cmp.Compare(a.Submit, b.Submit) })
	return jobs
}

// mustRun runs one policy with the full invariant check on every step.
func mustRun(t testing.TB, cfg *Config, w *Workload, pol string, seed uint64) *Result {
	t.Helper()
	r, err := Run(context.Background(), cfg, w, Options{Policy: pol, Seed: seed, Check: true, Buckets: 50})
	if err != nil {
		t.Fatalf("%s: %v", pol, err)
	}
	return r
}

// tracesDir returns the shared traces folder ($TIDE_TRACES, or
// ../../../shared/traces), skipping the test when there is none.
func tracesDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("TIDE_TRACES"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "traces"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Skipf("no shared traces at %s and TIDE_TRACES unset", d)
	}
	return d
}

// examplesDir is the repository's examples/simulate folder.
func examplesDir() string { return filepath.Join("..", "..", "examples", "simulate") }

func errContains(err error, parts ...string) error {
	if err == nil {
		return errors.New("no error")
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return fmt.Errorf("error %q does not mention %q", err, p)
		}
	}
	return nil
}

// cfgDuration converts for config fields.
func cfgDuration(d time.Duration) config.Duration { return config.Duration(d) }
