package sim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/trace"
)

// notWorkloads are trace files the simulator refuses with a reason (a node
// list, not a workload).
var notWorkloads = []string{"alibaba_gpu2023_nodes.csv"}

// TestEveryTraceHasAShippedConfig: every trace file the simulator reads
// has a config in examples/simulate that loads and whose trace opens; and
// every config file there belongs to a trace. With TIDE_SIM_LONG=1 each
// config also reads its whole trace into a workload and has a lower bound
// (seconds per trace; minutes under the race detector).
func TestEveryTraceHasAShippedConfig(t *testing.T) {
	dir := tracesDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if slices.Contains(notWorkloads, name) {
			continue
		}
		cfgFile, ok := ShippedConfigs[name]
		if !ok {
			t.Errorf("%s: no shipped config in examples/simulate", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(filepath.Join(examplesDir(), cfgFile))
			if err != nil {
				t.Fatal(err)
			}
			r, err := trace.Open(f, trace.Options{IgnoreNormalized: true})
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			if os.Getenv("TIDE_SIM_LONG") == "" {
				return
			}
			w, err := ReadWorkload(f, cfg, false)
			if err != nil {
				t.Fatal(err)
			}
			if w.Instances == 0 {
				t.Fatalf("%s on %s: no instance to replay", cfgFile, name)
			}
			if _, err := w.Bound(cfg, false); err != nil {
				t.Fatalf("%s on %s: %v", cfgFile, name, err)
			}
		})
	}
	entries, err := os.ReadDir(examplesDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		found := false
		for _, c := range ShippedConfigs {
			found = found || c == e.Name()
		}
		if !found {
			t.Errorf("examples/simulate/%s is no trace's shipped config", e.Name())
		}
	}
}

// TestReplicaConfigsReleaseAtTheNextTick: a shipped config that turns a
// rate or level trace into replicas sets an idle_timeout shorter than
// half its reconcile tick, so that an empty node goes at the first tick
// after it emptied. The replica count changes only at the edge of a bin
// (a minute or more), so a node emptied within a bin is not used again
// before the next edge; tide's default (10 s, for the batch traces, where
// the next arrival often takes it) kept a node emptied less than 10 s
// before a 15 s tick for one tick more, and Karpenter (which consolidates
// an empty node at its next 10 s poll) was 0.01-0.47 % cheaper on those
// configs (docs/benchmarks.md, "Scaling quality IV"). The batch configs
// keep the default.
func TestReplicaConfigsReleaseAtTheNextTick(t *testing.T) {
	for _, cfgFile := range ShippedConfigs {
		cfg, err := LoadConfig(filepath.Join(examplesDir(), cfgFile))
		if err != nil {
			t.Fatalf("%s: %v", cfgFile, err)
		}
		idle, tick := time.Duration(cfg.Pool.Scaling.IdleTimeout), cfg.Pool.ReconcileEvery()
		switch replicas := cfg.Workload.Replicas != nil; {
		case replicas && (idle <= 0 || 2*idle > tick):
			t.Errorf("%s: a replica workload's idle_timeout is %v, want one set below half the %v tick", cfgFile, idle, tick)
		case !replicas && idle != 0:
			t.Errorf("%s: a batch workload sets idle_timeout %v, want tide's default", cfgFile, idle)
		}
	}
}
