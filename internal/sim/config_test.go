package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/trace"
)

// TestParseConfigErrors: every mistake is refused with the field named.
func TestParseConfigErrors(t *testing.T) {
	pool := func(extra string) string {
		return "pools:\n  - name: p\n    provider: {type: sim" + extra + "}\n    nodes: [0, 4]\n    offerings: [{type: g8, gpus: 8, price: 1}]\n"
	}
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"two pools", pool("") + "  - name: q\n    provider: {type: sim}\n    nodes: [0, 4]\n    offerings: [{type: g8, gpus: 8, price: 1}]\n",
			[]string{"pools: a simulation replays one pool, got 2"}},
		{"not sim", strings.Replace(pool(""), "type: sim", "type: local", 1), []string{`provider.type: a simulation needs provider type sim, got "local"`}},
		{"unknown option", pool(", options: {bootx: 90s}"), []string{"provider.options.bootx", "unknown field"}},
		{"latency order", pool(", options: {boot: {min: 90s, median: 10s, max: 100s}}"), []string{"provider.options.boot", "min <= median <= max"}},
		{"latency unit", pool(", options: {boot: soon}"), []string{"provider.options.boot", "duration"}},
		{"error rate", pool(", options: {api_error_rate: 1.5}"), []string{"provider.options.api_error_rate"}},
		{"sample", pool("") + "workload: {sample: 2}\n", []string{"workload.sample: must be within [0, 1], got 2"}},
		{"restartable", pool("") + "workload: {restartable: 1.5}\n", []string{"workload.restartable: must be within [0, 1], got 1.5"}},
		{"per replica", pool("") + "workload: {replicas: {per_replica: 0, shape: {gpus: 1}}}\n", []string{"workload.replicas.per_replica"}},
		{"replica shape", pool("") + "workload: {replicas: {per_replica: 1}}\n", []string{"workload.replicas.shape"}},
		{"unknown section", pool("") + "simulate: {}\n", []string{"simulate", "unknown field"}},
		{"pool field", pool("") + "    scaling: {policy: fastest}\n", []string{"scaling.policy", "fastest"}},
		{"no offering", "pools:\n  - name: p\n    provider: {type: sim}\n    nodes: [0, 4]\n", []string{"offerings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("sim.yaml", []byte(tt.yaml))
			if err := errContains(err, append([]string{"sim.yaml"}, tt.want...)...); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestParseConfigFields: the options reach the cloud and the workload.
func TestParseConfigFields(t *testing.T) {
	c := mustConfig(t, `
pools:
  - name: p
    provider:
      type: sim
      options: {boot: {min: 80s, median: 90s, max: 120s}, configure: 5s, delete: 30s, launch_timeout: 20m}
    nodes: [0, 4]
    offerings: [{type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 1}]
workload:
  split_to_node: true
  sample: 0.5
  horizon: 2h
scheduler: {reserve_after: 0s}
`)
	if c.Cloud.Boot != (Latency{80 * time.Second, 90 * time.Second, 120 * time.Second}) || c.Cloud.Configure.Max != 5*time.Second ||
		c.Cloud.Delete.Min != 30*time.Second || time.Duration(c.Cloud.LaunchTimeout) != 20*time.Minute {
		t.Errorf("cloud = %+v", c.Cloud)
	}
	if !c.Workload.SplitToNode || c.Workload.Sample != 0.5 || time.Duration(c.Workload.Horizon) != 2*time.Hour {
		t.Errorf("workload = %+v", c.Workload)
	}
	if c.Scheduler.reserveAfter() != 0 {
		t.Errorf("reserve_after = %v, want 0 (off)", c.Scheduler.reserveAfter())
	}
	if d := mustConfig(t, gpuPool); d.Scheduler.reserveAfter() != time.Minute {
		t.Errorf("default reserve_after = %v, want the head's 1m", d.Scheduler.reserveAfter())
	}
}

// TestShippedConfigs: every config in examples/simulate parses and names
// a trace of shared/traces that exists.
func TestShippedConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir(), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped configs in %s (%v)", examplesDir(), err)
	}
	for _, f := range files {
		if _, err := LoadConfig(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestBadTraceInput: a malformed row is an error naming the file, line and
// column; with skipBadRows it is skipped and counted.
func TestBadTraceInput(t *testing.T) {
	cfg := mustConfig(t, gpuPool)
	path := filepath.Join(t.TempDir(), "bad.csv")
	data := "job_id,submit_s,start_s,duration_s,gpus,cpus,mem_gb,vc\n" +
		"a,0,,100,1,,,x\n" +
		"b,5,,lots,1,,,x\n" +
		"c,9,,100,2,,,x\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadWorkload(path, cfg, false)
	var te *trace.Error
	if !errors.As(err, &te) || te.Line != 3 || te.Column != 4 || !errors.Is(err, trace.ErrNotNumber) {
		t.Fatalf("err = %v, want a trace error at line 3, column 4", err)
	}
	if err := errContains(err, "bad.csv:3: column 4 (duration_s)"); err != nil {
		t.Error(err)
	}
	w, err := ReadWorkload(path, cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if w.Read.Skipped != 1 || len(w.Jobs) != 2 {
		t.Errorf("skipped %d, kept %d jobs; want 1 and 2", w.Read.Skipped, len(w.Jobs))
	}
}

// TestPrepareWorkload: sampling keeps the same jobs every time, censored
// jobs run to the horizon, jobs larger than every node are refused, and a
// rate series becomes replicas whose first bin is the initial load.
func TestPrepareWorkload(t *testing.T) {
	cfg := mustConfig(t, gpuPool)
	var jobs []trace.Job
	for i := range 1000 {
		jobs = append(jobs, gpuJob(time.Duration(i)*time.Second, time.Minute, 1, 1))
	}
	cfg.Workload.Sample = 0.25
	a := jobsWorkload(t, cfg, jobs)
	b := jobsWorkload(t, cfg, jobs)
	if len(a.Jobs) != len(b.Jobs) || a.SampledOut+len(a.Jobs) != 1000 || len(a.Jobs) < 200 || len(a.Jobs) > 300 {
		t.Errorf("sample kept %d then %d of 1000 jobs, want the same ~250", len(a.Jobs), len(b.Jobs))
	}
	for i := range a.Jobs {
		if a.Jobs[i].ID != b.Jobs[i].ID {
			t.Fatal("two samples differ")
		}
	}

	cfg = mustConfig(t, gpuPool)
	censored := gpuJob(10*time.Minute, 0, 1, 1)
	censored.Censored = true
	w := jobsWorkload(t, cfg, []trace.Job{gpuJob(0, time.Hour, 1, 1), censored})
	if w.Horizon != time.Hour || w.Jobs[1].Duration != 50*time.Minute || w.Jobs[1].Censored {
		t.Errorf("horizon %v, censored job runs %v (censored %v); want 1h and 50m", w.Horizon, w.Jobs[1].Duration, w.Jobs[1].Censored)
	}

	_, err := PrepareWorkload(&trace.Workload{Name: "big.csv", Format: trace.Format{Kind: trace.KindJobs},
		Jobs: []trace.Job{{ID: "huge", Duration: time.Hour, Requests: capacity.Resources{GPUs: 16}, Replicas: 1}}}, cfg)
	if err := errContains(err, "big.csv", "job huge", "split_to_node"); err != nil {
		t.Error(err)
	}

	cfg.Workload.Replicas = &ReplicaOptions{PerReplica: 1, Shape: capacity.Resources{GPUs: 1}, Window: cfgDuration(2 * time.Second)}
	var bins []trace.Bin
	for i, v := range []float64{1, 3, 1, 1, 5, 5} {
		bins = append(bins, trace.Bin{Start: time.Duration(i) * time.Second, Width: time.Second, Value: v})
	}
	w, err = PrepareWorkload(&trace.Workload{Name: "rate.csv", Format: trace.Format{Kind: trace.KindRate}, Bins: bins}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Windows of 2 s: 4 requests (2 replicas), 2 (1 replica), 10 (5).
	want := []struct {
		submit, d time.Duration
		n         int
		pre       bool
	}{{0, 6 * time.Second, 1, true}, {0, 2 * time.Second, 1, true}, {4 * time.Second, 2 * time.Second, 4, false}}
	if len(w.Jobs) != len(want) || w.Instances != 6 || w.Preexisting != 2 {
		t.Fatalf("replica jobs = %+v", w.Jobs)
	}
	for i, j := range w.Jobs {
		if j.Submit != want[i].submit || j.Duration != want[i].d || j.Replicas != want[i].n || j.Preexisting != want[i].pre {
			t.Errorf("replica job %d = %+v, want %+v", i, j, want[i])
		}
	}
	cfg.Workload.Replicas.Window = cfgDuration(1500 * time.Millisecond)
	_, err = PrepareWorkload(&trace.Workload{Name: "rate.csv", Format: trace.Format{Kind: trace.KindRate}, Bins: bins}, cfg)
	if err := errContains(err, "workload.replicas.window", "multiple"); err != nil {
		t.Error(err)
	}
}
