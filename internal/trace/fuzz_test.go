package trace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// fuzzSeeds returns the testdata traces plus the inputs of TestBadInput.
func fuzzSeeds(f *testing.F, files ...string) [][]byte {
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// fuzzRead reads the whole of data with opts and checks what every reader
// promises: no panic, a bounded number of steps, errors that are *Error
// naming the file and a line, no row error with SkipBadRows, records that
// respect the model, and consistent Stats.
func fuzzRead(t *testing.T, data []byte, opts Options) {
	r, err := NewReader(bytes.NewReader(data), "fuzz", opts)
	if err != nil {
		checkFuzzErr(t, err, Options{}) // header errors are never skipped
		return
	}
	returned := 0
	var prevSubmit time.Duration
	var prevBin Bin
	first := true
	for range len(data) + 2 { // every record consumes at least one byte
		switch r.Format().Kind {
		case KindJobs:
			var j Job
			if j, err = r.NextJob(); err == nil {
				if j.ID == "" || j.Submit < prevSubmit || j.Duration < 0 || j.Replicas < 1 || j.Requests.Negative() {
					t.Fatalf("invalid job %+v after submit %v", j, prevSubmit)
				}
				if !opts.SplitTo.IsZero() {
					if _, split, _ := j.SplitTo(opts.SplitTo); split {
						t.Fatalf("job %+v still exceeds SplitTo %v", j, opts.SplitTo)
					}
				}
				prevSubmit = j.Submit
			}
		case KindRate, KindLevel:
			var b Bin
			if b, err = r.NextBin(); err == nil {
				if b.Width <= 0 || b.Value < 0 || b.Capacity < 0 || b.Start < 0 ||
					(!first && (b.Start <= prevBin.Start || (b.Start-prevBin.Start)%b.Width != 0)) ||
					(!first && b.Width != prevBin.Width) {
					t.Fatalf("invalid bin %+v after %+v", b, prevBin)
				}
				prevBin, first = b, false
			}
		case KindNodes:
			var n NodeShape
			if n, err = r.NextNode(); err == nil && (n.ID == "" || n.Resources.Negative()) {
				t.Fatalf("invalid node %+v", n)
			}
		}
		if errors.Is(err, io.EOF) {
			s := r.Stats()
			if s.Rows != returned {
				t.Fatalf("stats count %d rows, %d returned", s.Rows, returned)
			}
			sum := 0
			for _, n := range s.SkippedBy {
				sum += n
			}
			if sum != s.Skipped || len(s.Examples) > maxExamples || len(s.Examples) > s.Skipped || (!opts.SkipBadRows && s.Skipped > 0) {
				t.Fatalf("inconsistent stats %+v", s)
			}
			return
		}
		if err != nil {
			checkFuzzErr(t, err, opts)
			return
		}
		returned++
	}
	t.Fatalf("no io.EOF after %d steps on %d bytes", len(data)+2, len(data))
}

func checkFuzzErr(t *testing.T, err error, opts Options) {
	t.Helper()
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("error %T %v is not a *trace.Error", err, err)
	}
	if te.File != "fuzz" || te.Line < 1 || te.Err == nil || te.Error() == "" {
		t.Fatalf("error %#v does not name the file and line", te)
	}
	if opts.SkipBadRows && isRowError(err) {
		t.Fatalf("row error returned with SkipBadRows: %v", err)
	}
}

var fuzzMachine = capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}

// FuzzReadJobs fuzzes the job parser, detected or forced to "jobs", with and
// without SkipBadRows and SplitTo.
func FuzzReadJobs(f *testing.F) {
	for _, s := range fuzzSeeds(f, "jobs_small.csv", "philly_small.csv") {
		f.Add(s, uint8(0))
	}
	for _, s := range []string{
		"job_id,submit_s,start_s,duration_s,gpus,replicas,preexisting\na,0,0,1,1,1,0\nb,soon,,1,1,1,0\n",
		"job_id,submit_s,duration_s,gpus\na,10,1,1\nb,5,1,1\nc,x,-1,0.5\nd,20,1\n",
		"job_id,task_index,submit_s,duration_s,cpu_norm,mem_norm,tasks,gpu_milli,alive_at_end\n7,3,0,1,0.25,0.5,3,370,1\n",
		"\ufeffjob_id,submit_s,duration_s,gpus\r\nx,\"1\",2,16\r\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		opts := Options{SkipBadRows: mode&1 != 0, NormalizedMachine: fuzzMachine, DropLabels: mode&8 != 0}
		if mode&2 != 0 {
			opts.Format = "jobs"
		}
		if mode&4 != 0 {
			opts.SplitTo = capacity.Resources{MilliCPU: 8000, GPUs: 8}
		}
		if mode&16 != 0 {
			opts.GPUShareResource = "gpu-milli"
		}
		fuzzRead(t, data, opts)
	})
}

// FuzzReadSeries fuzzes the rate and level parser.
func FuzzReadSeries(f *testing.F) {
	for _, s := range fuzzSeeds(f, "azure_small.csv", "helios_small.csv") {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	for _, s := range []string{
		"t_s,requests\n0,1\n1,1\n3,1\n",
		"t_s,requests\n0,1\n2,1\n5,x\n6,-1\n8,\n",
		"t_s,v\n0,1.5\n300,1e3\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		opts := Options{SkipBadRows: mode&1 != 0, AllowGaps: mode&2 != 0}
		switch mode >> 2 & 3 {
		case 1:
			opts.Format = "rate"
		case 2:
			opts.Format, opts.Column = "level", "v"
		case 3:
			opts.Format, opts.Column = "level", "requests+v"
		}
		if mode&16 != 0 {
			opts.BinWidth = 2e9
		}
		fuzzRead(t, data, opts)
	})
}

// FuzzReadNodes fuzzes the node-list parser.
func FuzzReadNodes(f *testing.F) {
	for _, s := range fuzzSeeds(f, "nodes_small.csv") {
		f.Add(s, uint8(0))
	}
	f.Add([]byte("node_id,cpus,gpus\n,4,1\nn,x,1\nm,4,0.5\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		opts := Options{SkipBadRows: mode&1 != 0, Format: "nodes"}
		if mode&2 != 0 {
			opts.Format = ""
		}
		fuzzRead(t, data, opts)
	})
}
