package sim

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
)

// spotPool reclaims its machines often, so that groups are interrupted and
// requeued, and jobs have several replicas, so that groups split.
const spotPool = `
pools:
  - name: spot
    provider:
      type: sim
      options: {boot: 60s, interruption_notice: 30s}
    nodes: [0, 20]
    offerings:
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 3, capacity: spot, interruption_probability: 0.9, interruption_penalty: 1}
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}
`

// TestGroupsMatchInstances replays the same work both ways, in counted
// groups and with every instance a group of its own, and compares every
// figure: on spot capacity that interrupts groups and requeues them, on
// jobs of many replicas that split across nodes (three seeds, the full
// invariant check on every step), and on a sample of Philly, under every
// policy.
func TestGroupsMatchInstances(t *testing.T) {
	spot := mustConfig(t, spotPool)
	jobs := randomJobs(5, 60, 6*time.Hour)
	for i := range jobs {
		jobs[i].Replicas = 1 + i%7 // groups of up to 7, split when placed
	}
	cases := []struct {
		name string
		cfg  *Config
		w    *Workload
	}{{"spot", spot, jobsWorkload(t, spot, jobs)}}
	if dir := tracesDir(t); dir != "" {
		cfg, err := LoadConfig(filepath.Join(examplesDir(), "philly.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Workload.Sample = 0.005
		w, err := ReadWorkload(filepath.Join(dir, "philly_jobs.csv"), cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name string
			cfg  *Config
			w    *Workload
		}{"philly-1%", cfg, w})
	}
	interrupted := 0
	for _, c := range cases {
		seeds, check := uint64(3), true
		if c.name != "spot" {
			seeds, check = 1, false
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			for _, pol := range policy.Names {
				var figs [2]goldenFigures
				for k, per := range []bool{false, true} {
					r, err := Run(context.Background(), c.cfg, c.w, Options{Policy: pol, Seed: seed, Check: check, perInstance: per})
					if err != nil {
						t.Fatalf("%s seed %d %s (per instance %t): %v", c.name, seed, pol, per, err)
					}
					figs[k] = figuresOf(r)
				}
				if err := sameFigures(figs[1], figs[0]); err != nil {
					t.Errorf("%s seed %d %s: per instance vs groups: %v", c.name, seed, pol, err)
				}
				interrupted += figs[0].Interrupted
			}
		}
	}
	if interrupted == 0 {
		t.Error("no group was interrupted: the test does not cover requeues")
	}
}

// TestRunAllMatchesSequential: the policies run side by side give the
// same results as run one by one.
func TestRunAllMatchesSequential(t *testing.T) {
	cfg := mustConfig(t, spotPool)
	w := jobsWorkload(t, cfg, randomJobs(9, 80, 8*time.Hour))
	names := append([]string{}, policy.Names...)
	names = append(names, policy.Names...) // more runs than processors
	opts := Options{Seed: 4, Buckets: 20}
	calls := 0
	last := 0.0
	got, errs := RunAll(context.Background(), cfg, w, names, opts, 0, func(f float64) {
		calls++
		if f < 0 || f > 1 {
			t.Errorf("progress %v", f)
		}
		last = f
	})
	if calls == 0 || last != 1 {
		t.Errorf("progress called %d times, last %v", calls, last)
	}
	for i, name := range names {
		if errs[i] != nil {
			t.Fatalf("%s: %v", name, errs[i])
		}
		o := opts
		o.Policy = name
		want, err := Run(context.Background(), cfg, w, o)
		if err != nil {
			t.Fatal(err)
		}
		if got[i].Policy != name {
			t.Errorf("result %d is %s, want %s", i, got[i].Policy, name)
		}
		if err := sameFigures(figuresOf(want), figuresOf(got[i])); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(want.Series) != len(got[i].Series) {
			t.Errorf("%s: series of %d points, want %d", name, len(got[i].Series), len(want.Series))
		}
		for k := range want.Series {
			if k < len(got[i].Series) && want.Series[k] != got[i].Series[k] {
				t.Errorf("%s: series point %d = %+v, want %+v", name, k, got[i].Series[k], want.Series[k])
				break
			}
		}
	}
}

// TestWatchedChangesMatchLookAll: looking only at the machines the cloud
// noted a change of gives the same figures as looking at every machine in
// flight each time, on spot capacity that interrupts and replaces nodes
// (three seeds, every policy, the full check on every step).
func TestWatchedChangesMatchLookAll(t *testing.T) {
	// Transitions that take time, so that a change comes due at a step
	// of its own.
	spot := mustConfig(t, strings.Replace(spotPool, "{boot: 60s,", "{boot: 60s, configure: 5s, drain: 10s, delete: 30s,", 1))
	if spot.Cloud.Configure.Median == 0 || spot.Cloud.Delete.Median == 0 {
		t.Fatalf("latencies not set: %+v", spot.Cloud)
	}
	jobs := randomJobs(7, 60, 6*time.Hour)
	for i := range jobs {
		jobs[i].Replicas = 1 + i%5
	}
	w := jobsWorkload(t, spot, jobs)
	interrupted := 0
	for seed := uint64(1); seed <= 3; seed++ {
		for _, pol := range policy.Names {
			var figs [2]goldenFigures
			for k, all := range []bool{false, true} {
				r, err := Run(context.Background(), spot, w, Options{Policy: pol, Seed: seed, Check: true, lookAll: all})
				if err != nil {
					t.Fatalf("seed %d %s (look at all %t): %v", seed, pol, all, err)
				}
				figs[k] = figuresOf(r)
			}
			if err := sameFigures(figs[1], figs[0]); err != nil {
				t.Errorf("seed %d %s: watched vs every machine: %v", seed, pol, err)
			}
			interrupted += figs[0].Interrupted
		}
	}
	if interrupted == 0 {
		t.Error("no instance was interrupted: the spot pool does not exercise reclaims")
	}
}
