package sim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/trace"
)

// shippedConfigs names the shipped config (examples/simulate) of every
// trace in the shared traces folder that the simulator reads.
var shippedConfigs = map[string]string{
	"philly_jobs.csv":                          "philly.yaml",
	"google2011_jobs.csv":                      "google2011.yaml",
	"azure_llm2023_conv_rate_1s.csv":           "azure-conv.yaml",
	"azure_llm2023_code_rate_1s.csv":           "azure-code.yaml",
	"google2011_tasks_1h-4h.csv":               "google2011-tasks.yaml",
	"google2011_job_rate_5min.csv":             "google2011-job-rate.yaml",
	"alibaba2017_batch_tasks.csv":              "alibaba2017.yaml",
	"alibaba_dlrm2025_instances.csv":           "alibaba-dlrm2025.yaml",
	"alibaba_gpu2023_pods.csv":                 "alibaba-gpu2023.yaml",
	"alibaba_genai_v2026_sd_requests_1min.csv": "alibaba-genai-sd.yaml",
	"helios_earth_gpu_demand_5min.csv":         "helios-earth.yaml",
	"philly_active_nodes_5min.csv":             "philly-active-nodes.yaml",
}

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
		cfgFile, ok := shippedConfigs[name]
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
		for _, c := range shippedConfigs {
			found = found || c == e.Name()
		}
		if !found {
			t.Errorf("examples/simulate/%s is no trace's shipped config", e.Name())
		}
	}
}
