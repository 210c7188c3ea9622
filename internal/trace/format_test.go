package trace

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		name   string
		header []string
		want   string
	}{
		{"philly", []string{"job_id", "submit_s", "start_s", "duration_s", "gpus", "cpus", "mem_gb", "vc"}, "philly-jobs"},
		{"philly, columns shuffled", []string{"vc", "gpus", "job_id", "submit_s", "start_s", "duration_s", "cpus", "mem_gb"}, "philly-jobs"},
		{"philly plus a column is generic", []string{"job_id", "submit_s", "start_s", "duration_s", "gpus", "cpus", "mem_gb", "vc", "user"}, "jobs"},
		{"helios", []string{"t_s", "gpus_capacity", "gpus_running", "gpus_pending", "gpus_demand_max", "jobs_running", "jobs_pending"}, "helios-gpu-demand"},
		{"generic jobs", []string{"submit_s", "duration_s", "cpus"}, "jobs"},
		{"generic rate", []string{"t_s", "requests", "bytes"}, "rate"},
		{"generic nodes", []string{"node_id", "cpus"}, "nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Detect(tt.header)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name != tt.want {
				t.Errorf("Detect = %s, want %s", f.Name, tt.want)
			}
		})
	}
	if _, err := Detect([]string{"t_s", "gpus"}); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("level series without a known header: err = %v, want ErrUnknownFormat", err)
	}
}

// TestFormatsAreDetectable: every specific format is detected from its own
// header, and every format is found by name.
func TestFormatsAreDetectable(t *testing.T) {
	names := map[string]bool{}
	for _, f := range Formats() {
		if names[f.Name] {
			t.Errorf("format %s listed twice", f.Name)
		}
		names[f.Name] = true
		if f.Doc == "" || f.Kind < KindJobs || f.Kind > KindNodes {
			t.Errorf("format %s: doc %q kind %v", f.Name, f.Doc, f.Kind)
		}
		if len(f.Header) > 0 {
			got, err := Detect(f.Header)
			if err != nil || got.Name != f.Name {
				t.Errorf("Detect(header of %s) = %s, %v", f.Name, got.Name, err)
			}
		}
		byName, err := FormatByName(f.Name)
		if err != nil || byName.Name != f.Name || !slices.Equal(byName.Header, f.Header) {
			t.Errorf("FormatByName(%s) = %+v, %v", f.Name, byName, err)
		}
	}
	if _, err := FormatByName("excel"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("FormatByName(excel): err = %v", err)
	}
	// Formats returns copies: changing one does not change the registry.
	fs := Formats()
	fs[0].Header[0] = "changed"
	if f, _ := FormatByName(fs[0].Name); f.Header[0] == "changed" {
		t.Error("Formats shares its header slices with the registry")
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindJobs: "jobs", KindRate: "rate", KindLevel: "level", KindNodes: "nodes", 9: "kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d) = %s, want %s", int(k), got, want)
		}
	}
}

func TestSplitTo(t *testing.T) {
	g8 := capacity.Resources{MilliCPU: 96000, Memory: 768 * gib, GPUs: 8}
	tests := []struct {
		name      string
		req       capacity.Resources
		replicas  int
		limit     capacity.Resources
		want      capacity.Resources
		wantRepl  int
		wantSplit bool
	}{
		{"fits", capacity.Resources{GPUs: 8}, 1, g8, capacity.Resources{GPUs: 8}, 1, false},
		{"16 gpus", capacity.Resources{GPUs: 16}, 1, g8, capacity.Resources{GPUs: 8}, 2, true},
		{"128 gpus", capacity.Resources{GPUs: 128}, 1, g8, capacity.Resources{GPUs: 8}, 16, true},
		{"12 gpus in two halves", capacity.Resources{GPUs: 12}, 1, g8, capacity.Resources{GPUs: 6}, 2, true},
		{"cpu and memory divided too", capacity.Resources{MilliCPU: 10000, Memory: 10, GPUs: 16}, 3, g8, capacity.Resources{MilliCPU: 5000, Memory: 5, GPUs: 8}, 6, true},
		{"rounded up", capacity.Resources{MilliCPU: 10000}, 1, capacity.CPU(4000), capacity.CPU(3334), 3, true},
		{"memory bound", capacity.Resources{MilliCPU: 1000, Memory: 1000 * gib}, 1, g8, capacity.Resources{MilliCPU: 500, Memory: 500 * gib}, 2, true},
		{"zero limit dimension ignored", capacity.Resources{GPUs: 3, MilliCPU: 100}, 1, capacity.CPU(1000), capacity.Resources{GPUs: 3, MilliCPU: 100}, 1, false},
		{"extended", capacity.Resources{Extended: map[string]int64{"fpga": 4}}, 1, capacity.Resources{Extended: map[string]int64{"fpga": 2}},
			capacity.Resources{Extended: map[string]int64{"fpga": 2}}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := Job{ID: "j", Requests: tt.req, Replicas: tt.replicas}
			got, split, err := j.SplitTo(tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if split != tt.wantSplit || got.Replicas != tt.wantRepl || !got.Requests.Equal(tt.want) {
				t.Errorf("SplitTo = %v × %d (split %v), want %v × %d (split %v)", got.Requests, got.Replicas, split, tt.want, tt.wantRepl, tt.wantSplit)
			}
			if !j.Requests.Equal(tt.req) {
				t.Errorf("SplitTo changed its receiver's request to %v", j.Requests)
			}
		})
	}
}

func TestJobEnd(t *testing.T) {
	tests := []struct {
		job     Job
		horizon time.Duration
		want    time.Duration
	}{
		{Job{Submit: time.Hour, Duration: time.Hour}, 10 * time.Hour, 2 * time.Hour},
		{Job{Submit: time.Hour, Duration: time.Hour, Censored: true}, 10 * time.Hour, 10 * time.Hour},
		{Job{Submit: time.Hour, Duration: time.Hour, Censored: true}, 0, 2 * time.Hour},
		{Job{Submit: time.Hour, Duration: 5 * time.Hour, Censored: true}, 3 * time.Hour, 6 * time.Hour},
	}
	for _, tt := range tests {
		if got := tt.job.End(tt.horizon); got != tt.want {
			t.Errorf("%+v.End(%v) = %v, want %v", tt.job, tt.horizon, got, tt.want)
		}
	}
}
