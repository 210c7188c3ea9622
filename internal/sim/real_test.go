package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// realRun replays a shipped config on a shared trace under every policy
// and checks what must hold on any trace: every instance finished, none
// disrupted, no machine created twice (Run fails otherwise), and no
// policy below the schedule-independent work bound.
func realRun(t *testing.T, cfgFile, traceFile string, firstJobs int, check bool) *Report {
	t.Helper()
	dir := tracesDir(t)
	cfg, err := LoadConfig(filepath.Join(examplesDir(), cfgFile))
	if err != nil {
		t.Fatal(err)
	}
	w, err := ReadWorkload(filepath.Join(dir, traceFile), cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if firstJobs > 0 && firstJobs < len(w.Jobs) {
		w.Jobs = w.Jobs[:firstJobs]
		w.Instances, w.Horizon = 0, 0
		for _, j := range w.Jobs {
			w.Instances += j.Replicas
			w.Horizon = max(w.Horizon, j.Submit+j.Duration)
		}
	}
	b, err := w.Bound(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Trace: traceFile, Config: cfg, Workload: w, Bound: b}
	for _, pol := range policy.Names {
		start := time.Now()
		r, err := Run(context.Background(), cfg, w, Options{Policy: pol, Seed: 1, Check: check})
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		t.Logf("%s: %s of wall time", pol, time.Since(start).Round(time.Millisecond))
		if r.Unfinished > 0 && !(pol == policy.Utilization && w.Format.Name == "google2011-jobs") {
			t.Errorf("%s: %d instances unfinished", pol, r.Unfinished)
		}
		if r.Disrupted != 0 {
			t.Errorf("%s: %d instances disrupted by scale-down", pol, r.Disrupted)
		}
		if r.Unfinished == 0 && r.NodeHours < b.WorkNodeHours {
			t.Errorf("%s: %.1f node-hours, below the work bound %.1f", pol, r.NodeHours, b.WorkNodeHours)
		}
		rep.Results = append(rep.Results, r)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	return rep
}

// TestPhillySlice replays the first 1,000 jobs of philly_jobs.csv (about
// three days) under every policy with the full invariant check on every
// step. It runs by default; the whole traces run with TIDE_SIM_LONG=1.
func TestPhillySlice(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 300
	}
	realRun(t, "philly.yaml", "philly_jobs.csv", n, true)
}

// TestAzureConv replays the whole azure_llm2023_conv_rate_1s.csv (one hour
// of LLM requests, as replicas) under every policy.
func TestAzureConv(t *testing.T) {
	realRun(t, "azure-conv.yaml", "azure_llm2023_conv_rate_1s.csv", 0, true)
}

// TestWholeTraces replays the three benchmark traces whole under every
// policy (TIDE_SIM_LONG=1; minutes under -race): the figures of
// docs/benchmarks.md.
func TestWholeTraces(t *testing.T) {
	if os.Getenv("TIDE_SIM_LONG") == "" {
		t.Skip("set TIDE_SIM_LONG=1 to replay whole traces")
	}
	for _, tt := range []struct{ cfg, trace string }{
		{"philly.yaml", "philly_jobs.csv"},
		{"google2011.yaml", "google2011_jobs.csv"},
		{"azure-conv.yaml", "azure_llm2023_conv_rate_1s.csv"},
	} {
		t.Run(tt.trace, func(t *testing.T) { realRun(t, tt.cfg, tt.trace, 0, false) })
	}
}

// TestDefaultConfigServingTraces: without a pool config, a request-rate
// series is served by replicas that follow the rate per minute, never
// fewer than one, so that no policy pays a boot for replicas that live a
// second: on the Azure code trace every policy stays within 2 × the lower
// bound (it was 16 to 24 × when replicas followed each 1 s bin).
func TestDefaultConfigServingTraces(t *testing.T) {
	path := filepath.Join(tracesDir(t), "azure_llm2023_code_rate_1s.csv")
	r, err := trace.Open(path, trace.Options{IgnoreNormalized: true})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Format()
	r.Close()
	cfg := DefaultConfig(f)
	if rp := cfg.Workload.Replicas; rp == nil || time.Duration(rp.Window) != time.Minute || rp.Min != 1 {
		t.Fatalf("default replicas for %s: %+v", f.Name, cfg.Workload.Replicas)
	}
	w, err := ReadWorkload(path, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Bound(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range policy.Names {
		res, err := Run(context.Background(), cfg, w, Options{Policy: pol, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if ratio := res.NodeHours / b.NodeHours; ratio > 2 {
			t.Errorf("%s: %.1f node-hours, %.1f × the bound %.1f", pol, res.NodeHours, ratio, b.NodeHours)
		}
	}
}
