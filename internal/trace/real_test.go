package trace

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// tracesDir returns the shared traces folder: $TIDE_TRACES, or shared/traces
// beside the repository checkout (../../../shared/traces from this package,
// as in CI). The test is skipped when neither exists.
func tracesDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("TIDE_TRACES"); d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("TIDE_TRACES=%s: %v", d, err)
		}
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

// normalizedMachine is what Google's and Alibaba's 1.0 stands for in these
// tests: a 32-core, 128 GiB machine (an assumption; the traces do not say).
var normalizedMachine = capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}

// realTraces lists every file of shared/traces with its expected format,
// row count (from the README) and first record.
var realTraces = []struct {
	file   string
	format string
	kind   Kind
	rows   int
	first  func(t *testing.T, r *Reader)
	gaps   int // bins missing (read with AllowGaps)
}{
	{"philly_jobs.csv", "philly-jobs", KindJobs, 82247, firstJob(Job{ID: "philly-31566", Duration: 2240194 * time.Second,
		Requests: capacity.Resources{GPUs: 8}, Replicas: 1, Labels: map[string]string{"vc": "7f04ca"}}), 0},
	{"alibaba_gpu2023_pods.csv", "alibaba-gpu2023-pods", KindJobs, 8152, firstJob(Job{ID: "openb-pod-0000", HasStart: true,
		Duration: 2572524 * time.Second, Preexisting: true, Replicas: 1,
		Requests: capacity.Resources{MilliCPU: 12000, Memory: 16 << 30, GPUs: 1},
		Labels:   map[string]string{"gpu_milli": "1000", "qos": "LS", "phase": "Running", "creation_time": "0", "scheduled_time": "0", "deletion_time": "12537496"}}), 0},
	{"alibaba_gpu2023_nodes.csv", "alibaba-gpu2023-nodes", KindNodes, 1523, nil, 0},
	{"alibaba_dlrm2025_instances.csv", "alibaba-dlrm2025-instances", KindJobs, 23871, firstJob(Job{ID: "instance_0", HasStart: true,
		Duration: 2677541 * time.Second, Censored: true, Preexisting: true, Replicas: 1,
		Requests: capacity.Resources{MilliCPU: 12000, Memory: 120 << 30, GPUs: 1},
		Labels:   map[string]string{"app": "app_0", "role": "HN", "rdma_pct": "25", "max_per_node": "8"}}), 0},
	{"google2011_jobs.csv", "google2011-jobs", KindJobs, 19146, firstJob(Job{ID: "1005190908", HasStart: true, Censored: true,
		Preexisting: true, Replicas: 10, Requests: capacity.Resources{MilliCPU: 1401, Memory: 546319841}, // 0.04376 × 32000 ↑, 0.003975 × 128 GiB ↑
		Labels: map[string]string{"priority": "10", "sched_class": "2"}}), 0},
	{"google2011_tasks_1h-4h.csv", "google2011-tasks", KindJobs, 57268, firstJob(Job{ID: "6251938510/0", Submit: 3601600 * time.Millisecond,
		Start: 3603500 * time.Millisecond, HasStart: true, Duration: 157600 * time.Millisecond, Replicas: 1,
		Requests: capacity.Resources{MilliCPU: 1000, Memory: 1067488352}, // 0.03125 × 32000, 0.007767 × 128 GiB ↑
		Labels:   map[string]string{"priority": "1", "sched_class": "2", "end_event": "FINISH", "schedule_count": "1"}}), 0},
	{"alibaba2017_batch_tasks.csv", "alibaba2017-batch-tasks", KindJobs, 80553, firstJob(Job{ID: "9741/63357", Duration: 2738 * time.Second,
		Preexisting: true, Replicas: 224, Requests: capacity.Resources{MilliCPU: 1000, Memory: 742817137}, // 0.005404706 × 128 GiB ↑
		Labels: map[string]string{"plan_cpu_raw": "100", "status": "Terminated"}}), 0},
	{"azure_llm2023_conv_rate_1s.csv", "azure-llm2023-rate", KindRate, 3503, firstBin(Bin{Width: time.Second, Value: 1}), 0},
	{"azure_llm2023_code_rate_1s.csv", "azure-llm2023-rate", KindRate, 3437, firstBin(Bin{Width: time.Second, Value: 1}), 0},
	{"alibaba_genai_v2026_sd_requests_1min.csv", "alibaba-genai2026-rate", KindRate, 33157, firstBin(Bin{Width: time.Minute, Value: 1}), 0},
	{"google2011_job_rate_5min.csv", "google2011-job-rate", KindRate, 8352, firstBin(Bin{Width: 5 * time.Minute, Value: 63}), 0},
	{"helios_earth_gpu_demand_5min.csv", "helios-gpu-demand", KindLevel, 8928, firstBin(Bin{Width: 5 * time.Minute, Value: 604, Capacity: 856}), 0},
	{"philly_active_nodes_5min.csv", "philly-active-nodes", KindLevel, 21130, firstBin(Bin{Width: 5 * time.Minute, Value: 316, Capacity: 420}), 119},
}

// wantStats is Stats.String() after reading each job trace whole; the
// counts are those of the README.
var wantStats = map[string]string{
	"philly_jobs.csv":                "82247 rows",
	"alibaba_gpu2023_pods.csv":       "8152 rows, 897 censored, 33 preexisting",
	"alibaba_gpu2023_nodes.csv":      "1523 rows",
	"alibaba_dlrm2025_instances.csv": "23871 rows, 8878 censored, 7280 preexisting",
	"google2011_jobs.csv":            "19146 rows, 3520 censored, 3981 preexisting, 2 without a request",
	"google2011_tasks_1h-4h.csv":     "57268 rows, 102 censored",
	"alibaba2017_batch_tasks.csv":    "80553 rows, 12532 censored, 167 preexisting, 9017 without a request",
}

func firstJob(want Job) func(t *testing.T, r *Reader) {
	return func(t *testing.T, r *Reader) {
		t.Helper()
		got, err := r.NextJob()
		if err != nil {
			t.Fatal(err)
		}
		if d := diffJob(got, want); d != "" {
			t.Errorf("first job: %s\ngot  %+v\nwant %+v", d, got, want)
		}
	}
}

func firstBin(want Bin) func(t *testing.T, r *Reader) {
	return func(t *testing.T, r *Reader) {
		t.Helper()
		got, err := r.NextBin()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("first bin = %+v, want %+v", got, want)
		}
	}
}

// TestRealTracesHead reads the first rows of every shared trace: the format
// is detected, the first record maps as the package doc says, and the next
// 2,000 rows read without error and respect the model's invariants.
func TestRealTracesHead(t *testing.T) {
	dir := tracesDir(t)
	for _, tt := range realTraces {
		t.Run(tt.file, func(t *testing.T) {
			r, err := Open(filepath.Join(dir, tt.file), Options{NormalizedMachine: normalizedMachine})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if f := r.Format(); f.Name != tt.format || f.Kind != tt.kind {
				t.Fatalf("format = %s (%s), want %s (%s)", f.Name, f.Kind, tt.format, tt.kind)
			}
			if tt.first != nil {
				tt.first(t, r)
			}
			checkRows(t, r, 2000)
		})
	}
}

// TestRealTracesWhole reads every shared trace to the end, strictly: every
// row is valid and the counts are the README's.
func TestRealTracesWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 16 MB of traces")
	}
	dir := tracesDir(t)
	for _, tt := range realTraces {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			if tt.gaps > 0 { // strict reading refuses the gap; AllowGaps counts it
				_, err := ReadFile(path, Options{})
				if !errors.Is(err, ErrGap) {
					t.Errorf("strict read: err = %v, want ErrGap", err)
				}
			}
			r, err := Open(path, Options{NormalizedMachine: normalizedMachine, AllowGaps: tt.gaps > 0})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			checkRows(t, r, -1)
			if s := r.Stats(); s.Rows != tt.rows || s.Skipped != 0 || s.MissingBins != tt.gaps {
				t.Errorf("stats = %v, want %d rows, %d bins missing and none skipped", s, tt.rows, tt.gaps)
			}
			// The censored and preexisting counts are the README's.
			if want, ok := wantStats[tt.file]; ok && r.Stats().String() != want {
				t.Errorf("stats = %q, want %q", r.Stats().String(), want)
			}
		})
	}
}

// checkRows reads up to n rows (all when n < 0) and checks the invariants
// of the model on each.
func checkRows(t *testing.T, r *Reader, n int) {
	t.Helper()
	var prev time.Duration
	for i := 0; n < 0 || i < n; i++ {
		var err error
		switch r.Format().Kind {
		case KindJobs:
			var j Job
			if j, err = r.NextJob(); err == nil {
				if j.Submit < prev || j.Duration < 0 || j.Replicas < 1 || j.Requests.Negative() || j.ID == "" {
					t.Fatalf("row %d: invalid job %+v", i, j)
				}
				prev = j.Submit
			}
		case KindRate, KindLevel:
			var b Bin
			if b, err = r.NextBin(); err == nil {
				if (i > 0 && (b.Start <= prev || (b.Start-prev)%b.Width != 0)) || b.Width <= 0 || b.Value < 0 {
					t.Fatalf("row %d: invalid bin %+v after %v", i, b, prev)
				}
				prev = b.Start
			}
		case KindNodes:
			var nd NodeShape
			if nd, err = r.NextNode(); err == nil && (nd.ID == "" || nd.Resources.IsZero()) {
				t.Fatalf("row %d: invalid node %+v", i, nd)
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRealSeriesToReplicas turns the real rate and level series into
// replica jobs: the replica-hours of the jobs equal the sum over bins of
// the bin's replica count × its width, and the lower bound is computable.
func TestRealSeriesToReplicas(t *testing.T) {
	dir := tracesDir(t)
	gpu := capacity.Resources{MilliCPU: 4000, Memory: 32 << 30, GPUs: 1}
	g8 := capacity.Offering{Type: "g8", Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}, PricePerHour: 24.5}
	for _, tt := range []struct {
		file string
		conv Replicas
	}{
		{"azure_llm2023_conv_rate_1s.csv", Replicas{PerReplica: 2, Shape: gpu}},
		{"azure_llm2023_code_rate_1s.csv", Replicas{PerReplica: 2, Shape: gpu, Min: 1}},
		{"alibaba_genai_v2026_sd_requests_1min.csv", Replicas{PerReplica: 1.0 / 30, Shape: gpu}},
		{"helios_earth_gpu_demand_5min.csv", Replicas{PerReplica: 1, Shape: gpu}},
		{"philly_active_nodes_5min.csv", Replicas{PerReplica: 1, Shape: g8.Resources}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			w, err := ReadFile(filepath.Join(dir, tt.file), Options{AllowGaps: true})
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := tt.conv.Jobs(w.Format.Kind, w.Bins)
			if err != nil {
				t.Fatal(err)
			}
			var want float64
			for _, b := range w.Bins {
				n, err := tt.conv.Count(w.Format.Kind, b)
				if err != nil {
					t.Fatal(err)
				}
				want += float64(n) * b.Width.Hours()
			}
			// bins missing from philly_active_nodes run Min (0) replicas
			b, err := LowerBound(jobs, []capacity.Offering{g8}, BoundOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(b.ReplicaHours-want) > 1e-6*want {
				t.Errorf("replica-hours %v, want %v", b.ReplicaHours, want)
			}
			t.Logf("%d bins → %d jobs, %.0f replica-hours; bound on g8: %.1f node-hours, peak %d", len(w.Bins), len(jobs), b.ReplicaHours, b.NodeHours, b.PeakNodes)
		})
	}
}
