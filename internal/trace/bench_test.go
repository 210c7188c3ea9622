package trace

import (
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// streamJobs reads every job of the trace at path, calling each after every
// job, and returns the number read.
func streamJobs(tb testing.TB, path string, opts Options, each func(n int)) int {
	r, err := Open(path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		_, err := r.NextJob()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			tb.Fatal(err)
		}
		n++
		if each != nil {
			each(n)
		}
	}
}

// BenchmarkReadPhilly streams the whole of philly_jobs.csv (82,247 jobs,
// 3.2 MB) as the simulator does, split to 8-GPU nodes.
func BenchmarkReadPhilly(b *testing.B) {
	path := filepath.Join(tracesDir(b), "philly_jobs.csv")
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"labels", Options{SplitTo: g8Shape}},
		{"nolabels", Options{SplitTo: g8Shape, DropLabels: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = streamJobs(b, path, bc.opts, nil)
			}
			b.ReportMetric(float64(n), "jobs")
		})
	}
}

// BenchmarkReadFilePhilly loads the whole of philly_jobs.csv into memory.
func BenchmarkReadFilePhilly(b *testing.B) {
	path := filepath.Join(tracesDir(b), "philly_jobs.csv")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadFile(path, Options{SplitTo: g8Shape}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadLargest streams the largest trace, alibaba2017_batch_tasks.csv
// (80,553 tasks, 4.5 MB), and reports the peak heap seen (HeapAlloc sampled
// every 1,024 rows, garbage included).
func BenchmarkReadLargest(b *testing.B) {
	path := filepath.Join(tracesDir(b), "alibaba2017_batch_tasks.csv")
	opts := Options{NormalizedMachine: capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}}
	b.ReportAllocs()
	var peak uint64
	var ms runtime.MemStats
	for b.Loop() {
		streamJobs(b, path, opts, func(n int) {
			if n%1024 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		})
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
}

// BenchmarkLowerBoundPhilly: the offline bound of all of philly_jobs.csv on
// 8-GPU nodes (reading excluded).
func BenchmarkLowerBoundPhilly(b *testing.B) {
	w, err := ReadFile(filepath.Join(tracesDir(b), "philly_jobs.csv"), Options{SplitTo: g8Shape, DropLabels: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var bound Bound
	for b.Loop() {
		if bound, err = LowerBound(w.Jobs, []capacity.Offering{g8}, BoundOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(bound.NodeHours, "node-hours")
}

// TestStreamingMemoryIsBounded: reading the largest trace keeps no memory
// per row: the live heap (after a GC) grows by less than 1 MiB however far
// the reader has gone.
func TestStreamingMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a 4.5 MB trace")
	}
	path := filepath.Join(tracesDir(t), "alibaba2017_batch_tasks.csv")
	var ms runtime.MemStats
	live := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	var worst uint64
	n := streamJobs(t, path, Options{NormalizedMachine: normalizedMachine}, func(n int) {
		if n%20000 == 0 {
			if l := live(); l > base {
				worst = max(worst, l-base)
			}
		}
	})
	t.Logf("%d rows, live heap grew by at most %d KiB", n, worst>>10)
	if n != 80553 || worst > 1<<20 {
		t.Errorf("%d rows, live heap grew by %d bytes; want 80553 rows and < 1 MiB", n, worst)
	}
}
