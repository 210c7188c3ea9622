package sim

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.json from this engine")

// goldenCase is one replay of the golden set: a sample of a shipped trace
// under a fixed configuration.
type goldenCase struct {
	name, trace, cfg string // cfg: an examples/simulate file, or "" for goldenConfig
	sample           float64
	long             bool // only with TIDE_SIM_LONG=1
}

// goldenCases are a sample of every shipped workload trace, on the default
// pool as it was when the figures were recorded, plus Philly whole.
var goldenCases = []goldenCase{
	{"philly-sample", "philly_jobs.csv", "philly.yaml", 0.05, false},
	{"philly-whole", "philly_jobs.csv", "philly.yaml", 0, true},
	{"alibaba-gpu2023-pods", "alibaba_gpu2023_pods.csv", "", 0.2, false},
	{"alibaba-dlrm2025", "alibaba_dlrm2025_instances.csv", "", 0.05, false},
	{"google2011-jobs", "google2011_jobs.csv", "google2011.yaml", 0.02, false},
	{"google2011-tasks", "google2011_tasks_1h-4h.csv", "", 0.05, false},
	{"google2011-job-rate", "google2011_job_rate_5min.csv", "", 0, false},
	{"alibaba2017-batch", "alibaba2017_batch_tasks.csv", "", 0.01, false},
	{"azure-conv", "azure_llm2023_conv_rate_1s.csv", "azure-conv.yaml", 0, false},
	{"azure-code", "azure_llm2023_code_rate_1s.csv", "", 0.2, false},
	{"alibaba-genai-sd", "alibaba_genai_v2026_sd_requests_1min.csv", "", 0.05, false},
	{"helios-earth", "helios_earth_gpu_demand_5min.csv", "", 0.05, false},
	{"philly-active-nodes", "philly_active_nodes_5min.csv", "", 0.05, false},
}

// goldenFigures are every figure of a Result but the series.
type goldenFigures struct {
	Policy                              string
	NodeHours, Cost                     float64
	WaitP50, WaitP95, WaitP99, WaitMean float64
	Utilization                         float64
	ScaleEvents, Machines               int
	Disrupted, Interrupted              int
	Instances, Unfinished               int
	End                                 int64
	Steps                               int
}

func figuresOf(r *Result) goldenFigures {
	return goldenFigures{Policy: r.Policy, NodeHours: r.NodeHours, Cost: r.Cost, WaitP50: r.WaitP50, WaitP95: r.WaitP95,
		WaitP99: r.WaitP99, WaitMean: r.WaitMean, Utilization: r.Utilization, ScaleEvents: r.ScaleEvents, Machines: r.Machines,
		Disrupted: r.Disrupted, Interrupted: r.Interrupted, Instances: r.Instances, Unfinished: r.Unfinished,
		End: int64(r.End), Steps: r.Steps}
}

// goldenConfig is DefaultConfig as it was when the golden figures were
// recorded (kept apart so the defaults may change).
func goldenConfig(f trace.Format) *Config {
	g8 := capacity.Offering{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 24.48,
		Resources: capacity.Resources{MilliCPU: 96000, Memory: 768 << 30, GPUs: 8}}
	c32 := capacity.Offering{Type: "c32", Kind: capacity.OnDemand, PricePerHour: 1.54,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}}
	c := &Config{Name: "golden", Pool: config.Pool{Name: "default", Provider: config.Provider{Type: "sim"},
		Nodes: capacity.Elastic(0, 10000), Scaling: config.Scaling{Policy: "tide", SlotsPerNode: 8}}}
	switch {
	case f.Kind == trace.KindRate || f.Kind == trace.KindLevel:
		c.Pool.Offerings = []capacity.Offering{g8}
		c.Workload.Replicas = &ReplicaOptions{PerReplica: 1, Shape: capacity.Resources{MilliCPU: 8000, Memory: 64 << 30, GPUs: 1}}
	case hasGPUColumn(f):
		c.Pool.Offerings = []capacity.Offering{g8}
		c.Workload.SplitToNode = true
	default:
		c.Pool.Offerings = []capacity.Offering{c32}
		c.Pool.Scaling.SlotsPerNode = 32
		c.Workload.NormalizedMachine = c32.Resources
		c.Workload.SplitToNode = true
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// goldenRun replays one case under every policy.
func goldenRun(t *testing.T, gc goldenCase, opts Options) map[string]goldenFigures {
	t.Helper()
	dir := tracesDir(t)
	path := filepath.Join(dir, gc.trace)
	var cfg *Config
	if gc.cfg != "" {
		var err error
		if cfg, err = LoadConfig(filepath.Join(examplesDir(), gc.cfg)); err != nil {
			t.Fatal(err)
		}
	} else {
		r, err := trace.Open(path, trace.Options{IgnoreNormalized: true})
		if err != nil {
			t.Fatal(err)
		}
		f := r.Format()
		r.Close()
		cfg = goldenConfig(f)
	}
	cfg.Workload.Sample = gc.sample
	w, err := ReadWorkload(path, cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]goldenFigures{}
	for _, pol := range policy.Names {
		o := opts
		o.Policy, o.Seed = pol, 1
		r, err := Run(context.Background(), cfg, w, o)
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		out[pol] = figuresOf(r)
	}
	return out
}

func goldenFile() string { return filepath.Join("testdata", "golden.json") }

// TestGoldenFigures replays a sample of every shipped trace under every
// policy and compares every figure with those recorded by the engine that
// kept one record per instance (testdata/golden.json): working in counted
// groups must not change a single figure.
func TestGoldenFigures(t *testing.T) {
	want := map[string]map[string]goldenFigures{}
	data, err := os.ReadFile(goldenFile())
	if err != nil && !*updateGolden {
		t.Fatal(err)
	}
	if err == nil {
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
	}
	got := want // -update-golden rewrites the cases run
	for _, gc := range goldenCases {
		if gc.long && os.Getenv("TIDE_SIM_LONG") == "" {
			continue
		}
		t.Run(gc.name, func(t *testing.T) {
			// got is want (the same map): read the recorded figures
			// before this run's replace them.
			recorded := want[gc.name]
			figs := goldenRun(t, gc, Options{})
			got[gc.name] = figs
			if *updateGolden {
				return
			}
			for pol, g := range figs {
				if err := sameFigures(recorded[pol], g); err != nil {
					t.Errorf("%s: %v", pol, err)
				}
			}
		})
	}
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile(), append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sameFigures compares two runs' figures: counts exactly, sums of floats
// to a relative 1e-9 (a group's resource-seconds add up in another order).
func sameFigures(want, got goldenFigures) error {
	wf := []float64{want.NodeHours, want.Cost, want.WaitP50, want.WaitP95, want.WaitP99, want.WaitMean, want.Utilization}
	gf := []float64{got.NodeHours, got.Cost, got.WaitP50, got.WaitP95, got.WaitP99, got.WaitMean, got.Utilization}
	for i := range wf {
		if d := wf[i] - gf[i]; d > 1e-9*max(1, wf[i]) || -d > 1e-9*max(1, wf[i]) {
			return fmt.Errorf("figures differ:\nwant %+v\ngot  %+v", want, got)
		}
	}
	w2, g2 := want, got
	w2.NodeHours, w2.Cost, w2.WaitP50, w2.WaitP95, w2.WaitP99, w2.WaitMean, w2.Utilization = 0, 0, 0, 0, 0, 0, 0
	g2.NodeHours, g2.Cost, g2.WaitP50, g2.WaitP95, g2.WaitP99, g2.WaitMean, g2.Utilization = 0, 0, 0, 0, 0, 0, 0
	if w2 != g2 {
		return fmt.Errorf("figures differ:\nwant %+v\ngot  %+v", want, got)
	}
	return nil
}

// TestGoldenChecked replays the samples whose pools grow largest with the
// full invariant check on every step, which also holds the state the
// engine keeps between steps (the pressure report, the largest free space)
// to a rebuild from every node, and compares every figure with the golden
// ones: keeping that state must change nothing.
func TestGoldenChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four samples with the full check on every step")
	}
	data, err := os.ReadFile(goldenFile())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]goldenFigures{}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	for _, gc := range goldenCases {
		switch gc.name {
		case "philly-sample", "alibaba-dlrm2025", "google2011-tasks", "alibaba2017-batch":
		default:
			continue
		}
		t.Run(gc.name, func(t *testing.T) {
			for pol, g := range goldenRun(t, gc, Options{Check: true}) {
				if err := sameFigures(want[gc.name][pol], g); err != nil {
					t.Errorf("%s: %v", pol, err)
				}
			}
		})
	}
}
