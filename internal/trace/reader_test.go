package trace

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

const gib = int64(1) << 30

func readString(t *testing.T, csv string, opts Options) (*Workload, error) {
	t.Helper()
	r, err := NewReader(strings.NewReader(csv), "t.csv", opts)
	if err != nil {
		return nil, err
	}
	return ReadAll(r)
}

// TestReadJobsMapping reads the small synthetic job traces of testdata and
// checks every field against the mapping of the package doc.
func TestReadJobsMapping(t *testing.T) {
	g8 := capacity.Resources{MilliCPU: 96000, Memory: 768 * gib, GPUs: 8}
	tests := []struct {
		name   string
		file   string
		opts   Options
		format string
		want   []Job
		stats  Stats
	}{
		{
			name: "generic jobs", file: "testdata/jobs_small.csv", format: "jobs",
			want: []Job{
				{ID: "a", HasStart: true, Duration: time.Hour, Preexisting: true, Replicas: 1,
					Requests: capacity.Resources{MilliCPU: 4000, Memory: 16 * gib, GPUs: 1}, Labels: map[string]string{"team": "ml"}},
				{ID: "b", Duration: 30 * time.Minute, Replicas: 3, Requests: capacity.Resources{MilliCPU: 500, Memory: 3 * gib / 2}},
				{ID: "c", Submit: 10500 * time.Millisecond, Start: 12 * time.Second, HasStart: true, Censored: true, Replicas: 1,
					Requests: capacity.Resources{GPUs: 8}, Labels: map[string]string{"team": "ml"}},
				// 11.3 cores is 11300m exactly, 40.6 GiB rounds up to a whole byte
				{ID: "d", Submit: time.Minute, Start: 70 * time.Second, HasStart: true, Replicas: 2,
					Requests: capacity.Resources{MilliCPU: 11300, Memory: 43593918055}, Labels: map[string]string{"team": "web"}},
			},
			stats: Stats{Rows: 4, Censored: 1, Preexisting: 1},
		},
		{
			name: "drop labels", file: "testdata/jobs_small.csv", format: "jobs", opts: Options{DropLabels: true},
			want: []Job{
				{ID: "a", HasStart: true, Duration: time.Hour, Preexisting: true, Replicas: 1, Requests: capacity.Resources{MilliCPU: 4000, Memory: 16 * gib, GPUs: 1}},
				{ID: "b", Duration: 30 * time.Minute, Replicas: 3, Requests: capacity.Resources{MilliCPU: 500, Memory: 3 * gib / 2}},
				{ID: "c", Submit: 10500 * time.Millisecond, Start: 12 * time.Second, HasStart: true, Censored: true, Replicas: 1, Requests: capacity.Resources{GPUs: 8}},
				{ID: "d", Submit: time.Minute, Start: 70 * time.Second, HasStart: true, Replicas: 2, Requests: capacity.Resources{MilliCPU: 11300, Memory: 43593918055}},
			},
			stats: Stats{Rows: 4, Censored: 1, Preexisting: 1},
		},
		{
			name: "philly as is", file: "testdata/philly_small.csv", format: "philly-jobs",
			want: []Job{
				{ID: "philly-00000", Duration: time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 1}, Labels: map[string]string{"vc": "vc1"}},
				{ID: "philly-00001", Duration: time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 16}, Labels: map[string]string{"vc": "vc2"}},
				{ID: "philly-00002", Submit: 30 * time.Minute, Duration: 2 * time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 12}, Labels: map[string]string{"vc": "vc1"}},
				{ID: "philly-00003", Submit: time.Hour, Duration: time.Minute, Replicas: 1, Requests: capacity.Resources{GPUs: 8}, Labels: map[string]string{"vc": "vc2"}},
			},
			stats: Stats{Rows: 4, NoRequest: 0},
		},
		{
			name: "philly split to 8-GPU nodes", file: "testdata/philly_small.csv", format: "philly-jobs", opts: Options{SplitTo: g8, DropLabels: true},
			want: []Job{
				{ID: "philly-00000", Duration: time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 1}},
				{ID: "philly-00001", Duration: time.Hour, Replicas: 2, Requests: capacity.Resources{GPUs: 8}},
				{ID: "philly-00002", Submit: 30 * time.Minute, Duration: 2 * time.Hour, Replicas: 2, Requests: capacity.Resources{GPUs: 6}},
				{ID: "philly-00003", Submit: time.Hour, Duration: time.Minute, Replicas: 1, Requests: capacity.Resources{GPUs: 8}},
			},
			stats: Stats{Rows: 4, Split: 2},
		},
		{
			name: "format override", file: "testdata/philly_small.csv", format: "jobs", opts: Options{Format: "jobs", DropLabels: true},
			want: []Job{
				{ID: "philly-00000", Duration: time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 1}},
				{ID: "philly-00001", Duration: time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 16}},
				{ID: "philly-00002", Submit: 30 * time.Minute, Duration: 2 * time.Hour, Replicas: 1, Requests: capacity.Resources{GPUs: 12}},
				{ID: "philly-00003", Submit: time.Hour, Duration: time.Minute, Replicas: 1, Requests: capacity.Resources{GPUs: 8}},
			},
			stats: Stats{Rows: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ReadFile(tt.file, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if w.Format.Name != tt.format {
				t.Errorf("format = %s, want %s", w.Format.Name, tt.format)
			}
			if len(w.Jobs) != len(tt.want) {
				t.Fatalf("got %d jobs, want %d", len(w.Jobs), len(tt.want))
			}
			for i := range tt.want {
				if d := diffJob(w.Jobs[i], tt.want[i]); d != "" {
					t.Errorf("job %d: %s", i, d)
				}
			}
			if got := w.Stats.String(); got != tt.stats.String() {
				t.Errorf("stats = %q, want %q", got, tt.stats.String())
			}
		})
	}
}

// TestReadRequestsOptions covers the options that change a request:
// normalized columns, GPU sharing, and where the ID comes from.
func TestReadRequestsOptions(t *testing.T) {
	tests := []struct {
		name string
		csv  string
		opts Options
		want Job
	}{
		{"normalized cpu and memory", "job_id,task_index,submit_s,duration_s,cpu_norm,mem_norm\n7,3,0,1,0.25,0.5\n",
			Options{NormalizedMachine: capacity.Resources{MilliCPU: 32000, Memory: 128 * gib}},
			Job{ID: "7/3", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{MilliCPU: 8000, Memory: 64 * gib}}},
		{"normalized rounds up", "job_id,submit_s,duration_s,cpu_norm\nx,0,1,0.00001\n",
			Options{NormalizedMachine: capacity.Resources{MilliCPU: 32000}},
			Job{ID: "x", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{MilliCPU: 1}}},
		{"absolute wins over normalized", "job_id,submit_s,duration_s,cpus,cpu_norm\nx,0,1,2,0.5\n",
			Options{NormalizedMachine: capacity.Resources{MilliCPU: 32000}},
			Job{ID: "x", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{MilliCPU: 2000}}},
		{"normalized ignored", "job_id,submit_s,duration_s,cpus,mem_norm\nx,0,1,2,0.5\n",
			Options{IgnoreNormalized: true},
			Job{ID: "x", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{MilliCPU: 2000}}},
		{"gpu share as a whole gpu", "job_id,submit_s,duration_s,gpus,gpu_milli\np,0,1,1,370\n", Options{},
			Job{ID: "p", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{GPUs: 1}, Labels: map[string]string{"gpu_milli": "370"}}},
		{"gpu share resource", "job_id,submit_s,duration_s,gpus,gpu_milli\np,0,1,1,370\n", Options{GPUShareResource: "gpu-milli"},
			Job{ID: "p", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{Extended: map[string]int64{"gpu-milli": 370}}}},
		{"gpu share resource, whole gpus", "job_id,submit_s,duration_s,gpus,gpu_milli\np,0,1,2,1000\n", Options{GPUShareResource: "gpu-milli"},
			Job{ID: "p", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{Extended: map[string]int64{"gpu-milli": 2000}}}},
		{"gpu share resource without gpu_milli", "job_id,submit_s,duration_s,gpus\np,0,1,4\n", Options{GPUShareResource: "gpu-milli"},
			Job{ID: "p", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{Extended: map[string]int64{"gpu-milli": 4000}}}},
		{"no job_id: line number", "submit_s,duration_s,gpus\n0,1,1\n", Options{},
			Job{ID: "line-2", Duration: time.Second, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
		{"alive at end is censored", "job_id,submit_s,duration_s,gpus,alive_at_end\nx,0,5,1,1\n", Options{},
			Job{ID: "x", Duration: 5 * time.Second, Censored: true, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
		{"instances column", "job_id,submit_s,duration_s,cpus,instances\nx,0,5,1,40\n", Options{},
			Job{ID: "x", Duration: 5 * time.Second, Replicas: 40, Requests: capacity.Resources{MilliCPU: 1000}}},
		{"tasks column", "job_id,submit_s,duration_s,cpus,tasks\nx,0,5,1,7\n", Options{},
			Job{ID: "x", Duration: 5 * time.Second, Replicas: 7, Requests: capacity.Resources{MilliCPU: 1000}}},
		{"byte order mark, CRLF, spaces", "\ufeffjob_id, submit_s ,duration_s,gpus\r\nx, 1.5 ,2, 1\r\n", Options{},
			Job{ID: "x", Submit: 1500 * time.Millisecond, Duration: 2 * time.Second, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
		{"minus zero", "job_id,submit_s,duration_s,gpus\nx,-0,0,1\n", Options{},
			Job{ID: "x", Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
		{"exponent", "job_id,submit_s,duration_s,gpus\nx,1e3,2.5E1,1\n", Options{},
			Job{ID: "x", Submit: 1000 * time.Second, Duration: 25 * time.Second, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := readString(t, tt.csv, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Jobs) != 1 {
				t.Fatalf("got %d jobs, want 1", len(w.Jobs))
			}
			if d := diffJob(w.Jobs[0], tt.want); d != "" {
				t.Error(d)
			}
		})
	}
}

// TestBadInput holds invariant 6 for traces: every malformed input is an
// *Error naming the file, line and column, wrapping its cause.
func TestBadInput(t *testing.T) {
	const jobs = "job_id,submit_s,start_s,duration_s,gpus,replicas,preexisting\n"
	tests := []struct {
		name   string
		csv    string
		opts   Options
		cause  error
		line   int
		column string // "" when the error is about a whole line
		msg    string // the whole message, when given
	}{
		{"empty file", "", Options{}, ErrEmpty, 1, "", "t.csv:1: empty trace: no header line"},
		{"unknown header", "a,b\n1,2\n", Options{}, ErrUnknownFormat, 1, "", ""},
		{"unknown format option", jobs, Options{Format: "excel"}, ErrUnknownFormat, 1, "", ""},
		{"duplicate column", "job_id,submit_s,submit_s\n", Options{}, ErrDuplicateColumn, 1, "submit_s", "t.csv:1: column 3 (submit_s): duplicate column"},
		{"empty column name", "job_id,,submit_s\n", Options{}, ErrSyntax, 1, "", ""},
		{"missing duration column", "job_id,submit_s,gpus\n", Options{Format: "jobs"}, ErrMissingColumn, 1, "duration_s", ""},
		{"missing submit column", "job_id,duration_s,gpus\n", Options{Format: "jobs"}, ErrMissingColumn, 1, "submit_s", ""},
		{"no request column", "job_id,submit_s,duration_s\n", Options{}, ErrMissingColumn, 1, "gpus", ""},
		{"normalized without machine", "job_id,submit_s,duration_s,cpu_norm\n", Options{}, ErrNeedOption, 1, "cpu_norm", ""},
		{"normalized memory without machine", "job_id,submit_s,duration_s,mem_norm\n", Options{NormalizedMachine: capacity.CPU(1000)}, ErrNeedOption, 1, "mem_norm", ""},
		{"column option on jobs", jobs, Options{Column: "gpus"}, ErrNeedOption, 1, "", ""},
		{"submit not a number", jobs + "a,0,0,1,1,1,0\nb,soon,,1,1,1,0\n", Options{}, ErrNotNumber, 3, "submit_s",
			`t.csv:3: column 2 (submit_s): not a number "soon"`},
		{"submit NaN", jobs + "b,NaN,,1,1,1,0\n", Options{}, ErrNotNumber, 2, "submit_s", ""},
		{"submit Inf", jobs + "b,Inf,,1,1,1,0\n", Options{}, ErrNotNumber, 2, "submit_s", ""},
		{"submit hex", jobs + "b,0x10,,1,1,1,0\n", Options{}, ErrNotNumber, 2, "submit_s", ""},
		{"submit two dots", jobs + "b,1.2.3,,1,1,1,0\n", Options{}, ErrNotNumber, 2, "submit_s", ""},
		{"submit blank", jobs + "b,,,1,1,1,0\n", Options{}, ErrMissingValue, 2, "submit_s", ""},
		{"submit too large", jobs + "b,1e12,,1,1,1,0\n", Options{}, ErrOutOfRange, 2, "submit_s", ""},
		{"submit overflows float", jobs + "b,1e400,,1,1,1,0\n", Options{}, ErrOutOfRange, 2, "submit_s", ""},
		{"negative duration", jobs + "a,0,,-5,1,1,0\n", Options{}, ErrNegative, 2, "duration_s",
			`t.csv:2: column 4 (duration_s): negative value "-5"`},
		{"negative start", jobs + "a,0,-1,5,1,1,0\n", Options{}, ErrNegative, 2, "start_s", ""},
		{"negative gpus", jobs + "a,0,,5,-1,1,0\n", Options{}, ErrNegative, 2, "gpus", ""},
		{"fractional gpus", jobs + "a,0,,5,0.5,1,0\n", Options{}, ErrNotWhole, 2, "gpus", ""},
		{"zero replicas", jobs + "a,0,,5,1,0,0\n", Options{}, ErrOutOfRange, 2, "replicas", ""},
		{"huge replicas", jobs + "a,0,,5,1,1e15,0\n", Options{}, ErrOutOfRange, 2, "replicas", ""},
		{"bad flag", jobs + "a,0,,5,1,1,yes\n", Options{}, ErrNotFlag, 2, "preexisting", ""},
		{"blank job id", jobs + " ,0,,5,1,1,0\n", Options{}, ErrMissingValue, 2, "job_id", ""},
		{"unsorted submit", jobs + "a,10,,1,1,1,0\nb,20,,1,1,1,0\nc,15,,1,1,1,0\n", Options{}, ErrUnsorted, 4, "submit_s",
			`t.csv:4: column 2 (submit_s): times out of order: submit_s "15" is before the previous row's 20s`},
		{"too few fields", jobs + "a,0,,5,1,1,0\nb,1,,5\n", Options{}, ErrFieldCount, 3, "",
			"t.csv:3: wrong number of fields: 4 fields, the header has 7"},
		{"too many fields", jobs + "a,0,,5,1,1,0,extra\n", Options{}, ErrFieldCount, 2, "", ""},
		{"bare quote", jobs + "a,0,,5,1,1,0\nb\"x,1,,5,1,1,0\n", Options{}, ErrSyntax, 3, "", ""},
		{"gpu_milli above 1000", "job_id,submit_s,duration_s,gpus,gpu_milli\np,0,1,1,1500\n", Options{}, ErrOutOfRange, 2, "gpu_milli", ""},
		{"split overflow", "job_id,submit_s,duration_s,gpus,replicas\np,0,1,2000000000,2000000000\n", Options{SplitTo: capacity.Resources{GPUs: 1}}, ErrOutOfRange, 2, "", ""},
		{"negative bin width", jobs, Options{BinWidth: -time.Second}, nil, 0, "", ""},
		// series
		{"rate: missing value column", "t_s,requests\n", Options{Column: "tokens"}, ErrMissingColumn, 1, "tokens", ""},
		{"level: no column", "t_s,gpus\n", Options{Format: "level"}, ErrNeedOption, 1, "", ""},
		{"level: missing t_s", "x,gpus\n", Options{Format: "level", Column: "gpus"}, ErrMissingColumn, 1, "t_s", ""},
		{"rate: not a number", "t_s,requests\n0,1\n1,many\n", Options{}, ErrNotNumber, 3, "requests", ""},
		{"rate: blank value", "t_s,requests\n0,1\n1,\n", Options{}, ErrMissingValue, 3, "requests", ""},
		{"rate: negative", "t_s,requests\n0,1\n1,-2\n", Options{}, ErrNegative, 3, "requests", ""},
		{"rate: unsorted", "t_s,requests\n0,1\n1,1\n1,1\n", Options{}, ErrUnsorted, 4, "t_s", ""},
		{"rate: unsorted second row", "t_s,requests\n5,1\n1,1\n", Options{}, ErrUnsorted, 3, "t_s", ""},
		{"rate: gap", "t_s,requests\n0,1\n1,1\n3,1\n", Options{}, ErrGap, 4, "t_s", ""},
		{"rate: off the grid", "t_s,requests\n0,1\n2,1\n5,1\n", Options{AllowGaps: true}, ErrGap, 4, "t_s", ""},
		{"rate: one row, width unknown", "t_s,requests\n0,1\n", Options{}, ErrNeedOption, 2, "", ""},
		{"azure: width is the format's", "t_s,requests,context_tokens,generated_tokens\n0,1,1,1\n2,1,1,1\n", Options{}, ErrGap, 3, "t_s", ""},
		{"helios: blank capacity", "t_s,gpus_capacity,gpus_running,gpus_pending,gpus_demand_max,jobs_running,jobs_pending\n0,,1,1,1,1,1\n", Options{}, ErrMissingValue, 2, "gpus_capacity", ""},
		// nodes
		{"nodes: blank id", "node_id,cpus\n,4\n", Options{}, ErrMissingValue, 2, "node_id", ""},
		{"nodes: no resource column", "node_id,zone\n", Options{}, ErrMissingColumn, 1, "cpus", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readString(t, tt.csv, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.cause == nil {
				return // an option error: any error will do, checked by the message below
			}
			if !errors.Is(err, tt.cause) {
				t.Fatalf("err = %v, want cause %v", err, tt.cause)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("err = %T %v, want *trace.Error", err, err)
			}
			if te.File != "t.csv" || te.Line != tt.line || te.Name != tt.column {
				t.Errorf("at %s:%d column %q, want t.csv:%d column %q (%v)", te.File, te.Line, te.Name, tt.line, tt.column, err)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("message = %q, want %q", err.Error(), tt.msg)
			}
		})
	}
}

// TestSkipBadRows: with SkipBadRows a malformed row is skipped and counted
// by cause with the first examples; without it the same input fails.
func TestSkipBadRows(t *testing.T) {
	csv := "job_id,submit_s,duration_s,gpus\n" +
		"a,0,10,1\n" +
		"b,x,10,1\n" + // not a number
		"c,5,-1,1\n" + // negative
		"d,5,10\n" + // field count
		"e,6,10,1\n" +
		"f,2,10,1\n" + // unsorted (before e)
		"g,7,10,2\n"
	if _, err := readString(t, csv, Options{}); !errors.Is(err, ErrNotNumber) {
		t.Fatalf("strict read: err = %v, want ErrNotNumber", err)
	}
	w, err := readString(t, csv, Options{SkipBadRows: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range w.Jobs {
		ids = append(ids, j.ID)
	}
	if got := strings.Join(ids, ","); got != "a,e,g" {
		t.Errorf("jobs = %s, want a,e,g", got)
	}
	s := w.Stats
	if s.Rows != 3 || s.Skipped != 4 {
		t.Errorf("rows %d skipped %d, want 3 and 4", s.Rows, s.Skipped)
	}
	wantBy := map[string]int{"not a number": 1, "negative value": 1, "wrong number of fields": 1, "times out of order": 1}
	for k, v := range wantBy {
		if s.SkippedBy[k] != v {
			t.Errorf("SkippedBy[%q] = %d, want %d (%v)", k, s.SkippedBy[k], v, s.SkippedBy)
		}
	}
	var lines []int
	for _, e := range s.Examples {
		lines = append(lines, e.Line)
	}
	if len(lines) != 4 || lines[0] != 3 || lines[1] != 4 || lines[2] != 5 || lines[3] != 7 {
		t.Errorf("example lines = %v, want [3 4 5 7]", lines)
	}
	want := `3 rows; skipped 4 (1 wrong number of fields, 1 not a number, 1 negative value, 1 times out of order), e.g. t.csv:3: column 2 (submit_s): not a number "x"; `
	if got := s.String(); !strings.HasPrefix(got, want) {
		t.Errorf("summary = %q\nwant prefix %q", got, want)
	}
}

// TestSkipBadRowsKeepsHeaderErrors: a header problem fails even with SkipBadRows.
func TestSkipBadRowsKeepsHeaderErrors(t *testing.T) {
	_, err := readString(t, "job_id,submit_s\nx,1\n", Options{SkipBadRows: true, Format: "jobs"})
	if !errors.Is(err, ErrMissingColumn) {
		t.Errorf("err = %v, want ErrMissingColumn", err)
	}
}

// TestSkipBadRowsExamplesCapped keeps only the first maxExamples errors.
func TestSkipBadRowsExamplesCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("job_id,submit_s,duration_s,gpus\n")
	for range 12 {
		b.WriteString("x,0,1,bad\n")
	}
	w, err := readString(t, b.String(), Options{SkipBadRows: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Stats.Skipped != 12 || len(w.Stats.Examples) != maxExamples || w.Stats.SkippedBy["not a number"] != 12 || len(w.Jobs) != 0 {
		t.Errorf("stats = %+v, jobs %d", w.Stats, len(w.Jobs))
	}
}

func TestReadSeries(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		csv    string
		opts   Options
		format string
		kind   Kind
		want   []Bin
		stats  Stats
	}{
		{name: "azure requests", file: "testdata/azure_small.csv", format: "azure-llm2023-rate", kind: KindRate,
			want: []Bin{{0, time.Second, 0, 0}, {time.Second, time.Second, 3, 0}, {2 * time.Second, time.Second, 5, 0},
				{3 * time.Second, time.Second, 2, 0}, {4 * time.Second, time.Second, 0, 0}}, stats: Stats{Rows: 5}},
		{name: "azure tokens", file: "testdata/azure_small.csv", opts: Options{Column: "generated_tokens"}, format: "azure-llm2023-rate", kind: KindRate,
			want: []Bin{{0, time.Second, 0, 0}, {time.Second, time.Second, 300, 0}, {2 * time.Second, time.Second, 500, 0},
				{3 * time.Second, time.Second, 40, 0}, {4 * time.Second, time.Second, 0, 0}}, stats: Stats{Rows: 5}},
		{name: "helios demand", file: "testdata/helios_small.csv", format: "helios-gpu-demand", kind: KindLevel,
			want:  []Bin{{0, 5 * time.Minute, 10, 16}, {5 * time.Minute, 5 * time.Minute, 8.2, 16}, {10 * time.Minute, 5 * time.Minute, 17, 16}},
			stats: Stats{Rows: 3}},
		{name: "helios sum of columns", file: "testdata/helios_small.csv", opts: Options{Column: "gpus_running + gpus_pending"}, format: "helios-gpu-demand", kind: KindLevel,
			want:  []Bin{{0, 5 * time.Minute, 9.5, 16}, {5 * time.Minute, 5 * time.Minute, 8, 16}, {10 * time.Minute, 5 * time.Minute, 17, 16}},
			stats: Stats{Rows: 3}},
		{name: "generic rate, width inferred", csv: "t_s,requests\n60,1\n120,2\n180,0\n", format: "rate", kind: KindRate,
			want:  []Bin{{time.Minute, time.Minute, 1, 0}, {2 * time.Minute, time.Minute, 2, 0}, {3 * time.Minute, time.Minute, 0, 0}},
			stats: Stats{Rows: 3}},
		{name: "generic rate, two rows", csv: "t_s,requests\n0,1\n10,2\n", format: "rate", kind: KindRate,
			want: []Bin{{0, 10 * time.Second, 1, 0}, {10 * time.Second, 10 * time.Second, 2, 0}}, stats: Stats{Rows: 2}},
		{name: "generic rate, width given", csv: "t_s,requests\n0,4\n", opts: Options{BinWidth: time.Minute}, format: "rate", kind: KindRate,
			want: []Bin{{0, time.Minute, 4, 0}}, stats: Stats{Rows: 1}},
		{name: "generic level", csv: "t_s,busy\n0,3.5\n300,4\n", opts: Options{Format: "level", Column: "busy"}, format: "level", kind: KindLevel,
			want: []Bin{{0, 5 * time.Minute, 3.5, 0}, {5 * time.Minute, 5 * time.Minute, 4, 0}}, stats: Stats{Rows: 2}},
		{name: "gaps allowed", csv: "t_s,requests\n0,1\n1,1\n4,2\n", opts: Options{AllowGaps: true}, format: "rate", kind: KindRate,
			want:  []Bin{{0, time.Second, 1, 0}, {time.Second, time.Second, 1, 0}, {4 * time.Second, time.Second, 2, 0}},
			stats: Stats{Rows: 3, MissingBins: 2}},
		{name: "skipped row leaves a gap", csv: "t_s,requests\n0,1\n1,1\n2,x\n3,2\n", opts: Options{SkipBadRows: true}, format: "rate", kind: KindRate,
			want:  []Bin{{0, time.Second, 1, 0}, {time.Second, time.Second, 1, 0}, {3 * time.Second, time.Second, 2, 0}},
			stats: Stats{Rows: 3, MissingBins: 1, Skipped: 1, SkippedBy: map[string]int{"not a number": 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w *Workload
			var err error
			if tt.file != "" {
				w, err = ReadFile(tt.file, tt.opts)
			} else {
				w, err = readString(t, tt.csv, tt.opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Format.Name != tt.format || w.Format.Kind != tt.kind {
				t.Errorf("format = %s (%s), want %s (%s)", w.Format.Name, w.Format.Kind, tt.format, tt.kind)
			}
			if len(w.Bins) != len(tt.want) {
				t.Fatalf("bins = %+v, want %+v", w.Bins, tt.want)
			}
			for i := range tt.want {
				if w.Bins[i] != tt.want[i] {
					t.Errorf("bin %d = %+v, want %+v", i, w.Bins[i], tt.want[i])
				}
			}
			if w.Stats.Rows != tt.stats.Rows || w.Stats.MissingBins != tt.stats.MissingBins || w.Stats.Skipped != tt.stats.Skipped {
				t.Errorf("stats = %v, want %v", w.Stats, tt.stats)
			}
		})
	}
}

func TestReadNodes(t *testing.T) {
	w, err := ReadFile("testdata/nodes_small.csv", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Format.Name != "alibaba-gpu2023-nodes" || len(w.Nodes) != 2 {
		t.Fatalf("format %s, %d nodes", w.Format.Name, len(w.Nodes))
	}
	n := w.Nodes[1]
	if n.ID != "n1" || !n.Resources.Equal(capacity.Resources{MilliCPU: 96000, Memory: 384 * gib, GPUs: 8}) || n.Labels["gpu_model"] != "G2" {
		t.Errorf("node = %+v", n)
	}
	if w.Nodes[0].Labels != nil {
		t.Errorf("blank gpu_model made labels %v", w.Nodes[0].Labels)
	}
}

// TestWrongKind: each Next method refuses a trace of another kind.
func TestWrongKind(t *testing.T) {
	for _, tt := range []struct {
		file string
		call func(r *Reader) error
	}{
		{"testdata/jobs_small.csv", func(r *Reader) error { _, err := r.NextBin(); return err }},
		{"testdata/jobs_small.csv", func(r *Reader) error { _, err := r.NextNode(); return err }},
		{"testdata/azure_small.csv", func(r *Reader) error { _, err := r.NextJob(); return err }},
		{"testdata/nodes_small.csv", func(r *Reader) error { _, err := r.NextJob(); return err }},
	} {
		r, err := Open(tt.file, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tt.call(r); !errors.Is(err, ErrWrongKind) {
			t.Errorf("%s: err = %v, want ErrWrongKind", tt.file, err)
		}
		r.Close()
	}
}

func TestOpenMissingFile(t *testing.T) {
	_, err := Open("testdata/no-such.csv", Options{})
	if err == nil || !strings.Contains(err.Error(), "no-such.csv") {
		t.Errorf("err = %v, want one naming the file", err)
	}
}

// TestReaderStreams: after io.EOF the reader keeps returning io.EOF, and
// Stats after EOF covers the whole file.
func TestReaderStreams(t *testing.T) {
	r, err := Open("testdata/philly_small.csv", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		_, err := r.NextJob()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if _, err := r.NextJob(); !errors.Is(err, io.EOF) {
		t.Errorf("after EOF: %v", err)
	}
	if n != 4 || r.Stats().Rows != 4 {
		t.Errorf("read %d, stats %v", n, r.Stats())
	}
	if h := r.Header(); len(h) != 8 || h[0] != "job_id" {
		t.Errorf("header = %v", h)
	}
}
