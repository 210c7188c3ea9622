package trace

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// bins builds a series of 1 s bins (or width) with the given values.
func bins(width time.Duration, values ...float64) []Bin {
	out := make([]Bin, len(values))
	for i, v := range values {
		out[i] = Bin{Start: time.Duration(i) * width, Width: width, Value: v}
	}
	return out
}

// describe prints jobs as "submit+duration×replicas" in seconds.
func describe(jobs []Job) string {
	var parts []string
	for _, j := range jobs {
		parts = append(parts, fmt.Sprintf("%g+%g×%d", j.Submit.Seconds(), j.Duration.Seconds(), j.Replicas))
	}
	return strings.Join(parts, " ")
}

func TestReplicasCount(t *testing.T) {
	tests := []struct {
		name string
		c    Replicas
		kind Kind
		bin  Bin
		want int
	}{
		{"rate", Replicas{PerReplica: 2}, KindRate, Bin{Width: time.Second, Value: 5}, 3},
		{"rate exact", Replicas{PerReplica: 2}, KindRate, Bin{Width: time.Second, Value: 4}, 2},
		{"rate per minute", Replicas{PerReplica: 0.5}, KindRate, Bin{Width: time.Minute, Value: 64}, 3}, // 64/60/0.5 = 2.13
		{"float noise is not a replica", Replicas{PerReplica: 0.1}, KindRate, Bin{Width: time.Second, Value: 0.3}, 3},
		{"empty bin", Replicas{PerReplica: 2}, KindRate, Bin{Width: time.Second}, 0},
		{"floor", Replicas{PerReplica: 2, Min: 1}, KindRate, Bin{Width: time.Second}, 1},
		{"level", Replicas{PerReplica: 1}, KindLevel, Bin{Width: time.Hour, Value: 600.5}, 601},
		{"level of nodes", Replicas{PerReplica: 1}, KindLevel, Bin{Width: time.Hour, Value: 316}, 316},
		{"level per 8", Replicas{PerReplica: 8}, KindLevel, Bin{Width: time.Hour, Value: 17}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Count(tt.kind, tt.bin)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Count = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestReplicasJobs(t *testing.T) {
	gpu := capacity.Resources{GPUs: 1}
	tests := []struct {
		name string
		c    Replicas
		kind Kind
		bins []Bin
		want string
	}{
		// counts 0 2 3 1 0: level 1 runs [1,4), level 2 [1,3), level 3 [2,3)
		{"rise and fall", Replicas{PerReplica: 2, Shape: gpu}, KindRate, bins(time.Second, 0, 3, 5, 2, 0), "1+3×1 1+2×1 2+1×1"},
		{"together", Replicas{PerReplica: 1, Shape: gpu}, KindRate, bins(time.Second, 0, 4, 0), "1+1×4"},
		{"to the end", Replicas{PerReplica: 1, Shape: gpu}, KindRate, bins(time.Second, 2, 2, 2), "0+3×2"},
		{"floor", Replicas{PerReplica: 1, Shape: gpu, Min: 1}, KindRate, bins(time.Second, 0, 3, 0), "0+3×1 1+1×2"},
		{"nothing", Replicas{PerReplica: 1, Shape: gpu}, KindRate, bins(time.Second, 0, 0), ""},
		{"no bins", Replicas{PerReplica: 1, Shape: gpu}, KindRate, nil, ""},
		{"level", Replicas{PerReplica: 1, Shape: gpu}, KindLevel, bins(5*time.Minute, 1.5, 1, 2), "0+900×1 0+300×1 600+300×1"},
		{"gap drops to the floor", Replicas{PerReplica: 1, Shape: gpu, Min: 1}, KindLevel,
			[]Bin{{Start: 0, Width: time.Second, Value: 3}, {Start: 3 * time.Second, Width: time.Second, Value: 3}}, "0+4×1 0+1×2 3+1×2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs, err := tt.c.Jobs(tt.kind, tt.bins)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(jobs); got != tt.want {
				t.Errorf("jobs = %q, want %q", got, tt.want)
			}
			for i, j := range jobs {
				if j.ID != fmt.Sprintf("replica-%d", i+1) || !j.Requests.Equal(tt.c.Shape) || j.Censored {
					t.Errorf("job %d = %+v", i, j)
				}
			}
		})
	}
}

// TestReplicasJobsMatchCounts: at the start of every bin, the replica jobs
// running are exactly the bin's count (property over a generated series).
func TestReplicasJobsMatchCounts(t *testing.T) {
	values := []float64{0, 7, 3, 3, 12, 0, 1, 9, 9, 2, 5, 5, 5, 0, 11, 4}
	c := Replicas{PerReplica: 1.5, Shape: capacity.CPU(1000), Min: 1}
	series := bins(time.Second, values...)
	jobs, err := c.Jobs(KindRate, series)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range series {
		want, _ := c.Count(KindRate, b)
		running := 0
		for _, j := range jobs {
			if j.Submit <= b.Start && b.Start < j.End(0) {
				running += j.Replicas
			}
		}
		if running != want {
			t.Errorf("bin %d: %d replicas running, want %d", i, running, want)
		}
	}
	for i := 1; i < len(jobs); i++ {
		if jobs[i].Submit < jobs[i-1].Submit {
			t.Fatalf("jobs not sorted by submit: %s", describe(jobs))
		}
	}
}

func TestReplicasErrors(t *testing.T) {
	ok := bins(time.Second, 1, 2)
	tests := []struct {
		name string
		c    Replicas
		kind Kind
		bins []Bin
		want string
	}{
		{"zero per replica", Replicas{}, KindRate, ok, "per_replica"},
		{"negative min", Replicas{PerReplica: 1, Min: -1}, KindRate, ok, "min"},
		{"negative shape", Replicas{PerReplica: 1, Shape: capacity.CPU(-1)}, KindRate, ok, "shape"},
		{"job kind", Replicas{PerReplica: 1}, KindJobs, ok, "wrong trace kind"},
		{"zero width", Replicas{PerReplica: 1}, KindRate, []Bin{{Value: 1}}, "width"},
		{"overlap", Replicas{PerReplica: 1}, KindRate, []Bin{{Width: 2 * time.Second}, {Start: time.Second, Width: time.Second}}, "before the previous bin's end"},
		{"unit mistake", Replicas{PerReplica: 1e-9}, KindRate, ok, "replicas, more than"},
		{"negative value", Replicas{PerReplica: 1}, KindLevel, []Bin{{Width: time.Second, Value: -1}}, "value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Jobs(tt.kind, tt.bins)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := (Replicas{PerReplica: 1}).Count(KindJobs, ok[0]); !errors.Is(err, ErrWrongKind) {
		t.Errorf("Count on jobs: err = %v", err)
	}
}
