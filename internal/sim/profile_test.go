package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/trace"
)

// TestReplayForProfile replays one shipped trace under one policy on its
// default pool, for a CPU or memory profile of the engine with go test's
// own flags (docs/benchmarks.md):
//
//	TIDE_SIM_PROFILE=alibaba2017_batch_tasks.csv,tide,3h \
//	  go test -run TestReplayForProfile -v -cpuprofile cpu.out ./internal/sim
//
// The third field, when given, keeps the jobs submitted before that trace
// time. It is skipped unless TIDE_SIM_PROFILE is set.
func TestReplayForProfile(t *testing.T) {
	spec := os.Getenv("TIDE_SIM_PROFILE")
	if spec == "" {
		t.Skip("set TIDE_SIM_PROFILE=trace.csv,policy[,until] to replay a trace for a profile")
	}
	parts := strings.Split(spec, ",")
	if len(parts) < 2 {
		t.Fatalf("TIDE_SIM_PROFILE=%q: want trace.csv,policy[,until]", spec)
	}
	path := filepath.Join(tracesDir(t), parts[0])
	r, err := trace.Open(path, trace.Options{IgnoreNormalized: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(r.Format())
	r.Close()
	w, err := ReadWorkload(path, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) > 2 {
		until, err := time.ParseDuration(parts[2])
		if err != nil {
			t.Fatalf("TIDE_SIM_PROFILE: until: %v", err)
		}
		kept := w.Jobs[:0]
		for _, j := range w.Jobs {
			if j.Submit < until {
				kept = append(kept, j)
			}
		}
		w.Jobs, w.Instances, w.Horizon = kept, 0, 0
		for _, j := range w.Jobs {
			w.Instances += j.Replicas
			w.Horizon = max(w.Horizon, j.Submit+j.Duration)
		}
	}
	start := time.Now()
	res, err := Run(context.Background(), cfg, w, Options{Policy: parts[1], Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on %s: %s wall, %d steps, %d machines, %.1f node-hours, wait p50/p95/p99 %.0f/%.0f/%.0f s",
		parts[1], parts[0], time.Since(start).Round(time.Millisecond), res.Steps, res.Machines, res.NodeHours,
		res.WaitP50, res.WaitP95, res.WaitP99)
}
