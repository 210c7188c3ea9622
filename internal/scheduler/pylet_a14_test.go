package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// TestPyLetA14_7_CPUMemoryAndSharedGPUs is A14.7 at the placement core.
// PyLet's scheduler checks GPUs only: CPU and memory are never compared with
// what the worker has left, so every case below that expects an instance to
// wait would place it. And a non-exclusive request on a target worker takes
// GPUs range(n), 0..n-1 "whoever holds them", so the shared cases would land
// on GPU 0, which an exclusive instance holds. Placements are applied cycle
// by cycle, as the head does, so accounting must carry across passes.
func TestPyLetA14_7_CPUMemoryAndSharedGPUs(t *testing.T) {
	shared := func(i Instance) Instance { i.Exclusive = false; return i }
	on := func(w string, i Instance) Instance { i.TargetWorker = w; return i }
	tests := []struct {
		name    string
		workers []Worker
		placed  []Instance
		cycles  [][]Instance // pending instances arriving before each pass
		want    []string     // every assignment of every pass
		waiting map[string]string
	}{
		{
			name:    "cpu stays accounted across passes",
			workers: []Worker{wk("w", 4, 64, 0)},
			cycles:  [][]Instance{{inst("a", 2, 1, 0), inst("b", 2, 1, 0)}, {inst("c", 1, 1, 0)}},
			want:    []string{"a@w", "b@w"},
			waiting: map[string]string{"c": "insufficient"},
		},
		{
			name:    "memory is compared with what is left",
			workers: []Worker{wk("w", 16, 8, 0)},
			cycles:  [][]Instance{{inst("a", 1, 6, 0)}, {inst("b", 1, 4, 0), inst("c", 1, 2, 0)}},
			want:    []string{"a@w", "c@w"},
			waiting: map[string]string{"b": "insufficient"},
		},
		{
			name:    "too big for any worker says why",
			workers: []Worker{wk("w", 4, 8, 0)},
			cycles:  [][]Instance{{on("w", inst("huge", 8, 1, 0))}},
			waiting: map[string]string{"huge": "needs"},
		},
		{
			name:    "shared on a target worker skips the exclusively held gpu 0",
			workers: []Worker{wk("w", 16, 64, 2)},
			placed:  []Instance{placedOn("w", inst("x", 1, 1, 1), 0)},
			cycles:  [][]Instance{{on("w", shared(inst("s", 1, 1, 1)))}},
			want:    []string{"s@w[1]"},
		},
		{
			name:    "shared wider than the free gpus waits instead of taking gpu 0",
			workers: []Worker{wk("w", 16, 64, 2)},
			placed:  []Instance{placedOn("w", inst("x", 1, 1, 1), 0)},
			cycles:  [][]Instance{{on("w", shared(inst("s", 1, 1, 2)))}},
			waiting: map[string]string{"s": "insufficient"},
		},
		{
			name:    "an exclusive placement in one pass fences shared work in the next",
			workers: []Worker{wk("w", 16, 64, 1)},
			cycles:  [][]Instance{{inst("x", 1, 1, 1)}, {on("w", shared(inst("s", 1, 1, 1)))}},
			want:    []string{"x@w[0]"},
			waiting: map[string]string{"s": "insufficient"},
		},
		{
			name:    "shared instances still share a gpu with each other",
			workers: []Worker{wk("w", 16, 64, 1)},
			placed:  []Instance{placedOn("w", shared(inst("d", 1, 1, 1)), 0)},
			cycles:  [][]Instance{{on("w", shared(inst("s", 1, 1, 1)))}},
			want:    []string{"s@w[0]"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			placed := slices.Clone(tc.placed)
			var pending []Instance
			var got []string
			var res Result
			for _, arrivals := range tc.cycles {
				pending = append(pending, arrivals...)
				res = Place(tc.workers, placed, pending, Config{}, now)
				for _, a := range res.Assignments {
					i := slices.IndexFunc(pending, func(p Instance) bool { return p.ID == a.InstanceID })
					placed = append(placed, placedOn(a.Worker, pending[i], a.GPUIndices...))
					pending = slices.Delete(pending, i, i+1)
				}
				got = append(got, render(res.Assignments)...)
				checkCapacity(t, tc.workers, placed)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("assignments %v, want %v", got, tc.want)
			}
			for id, sub := range tc.waiting {
				if !strings.Contains(res.Waiting[id], sub) {
					t.Errorf("waiting[%s] = %q, want it to contain %q", id, res.Waiting[id], sub)
				}
			}
		})
	}
}
