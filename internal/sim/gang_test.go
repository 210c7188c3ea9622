package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/trace"
)

// TestGangReplay: a 3-node job arrives while 2 of the pool's 3 nodes run a
// one-hour job. Replayed optimistically, one part starts on the free node
// and holds its 8 GPUs for the hour the others wait; replayed as a gang
// (workload.gangs), no part starts before all can, and nothing is held.
// Both report the gang's wait to its whole start (about the hour).
func TestGangReplay(t *testing.T) {
	node := capacity.Resources{MilliCPU: 64000, Memory: 512 << 30, GPUs: 8}
	big, split, err := gpuJob(10*time.Second, 2*time.Hour, 24, 1).SplitTo(node)
	if err != nil || !split || big.Parts != 3 || big.Replicas != 3 {
		t.Fatalf("split: %+v %v %v", big, split, err)
	}
	for _, gangs := range []bool{false, true} {
		cfg := mustConfig(t, strings.Replace(gpuPool, "nodes: [0, 50]", "nodes: [0, 3]", 1))
		cfg.Workload.Gangs = gangs
		w := jobsWorkload(t, cfg, []trace.Job{gpuJob(0, time.Hour, 8, 2), big})
		r := mustRun(t, cfg, w, "tide", 1)
		t.Logf("gangs %v: gang wait p50 %.0f s, partial %.2f GPU-hours, %d gangs", gangs, r.GangWaitP50, r.PartialGangGPUHours, r.Gangs)
		if r.Gangs != 1 || r.GangWaitP50 < 3600 || r.GangWaitP50 > 3900 {
			t.Fatalf("gangs %v: %d gangs, wait %.0f s; want one, about an hour", gangs, r.Gangs, r.GangWaitP50)
		}
		if gangs && r.PartialGangGPUHours != 0 {
			t.Fatalf("a gang replay held %.2f GPU-hours with part of a gang", r.PartialGangGPUHours)
		}
		if !gangs && (r.PartialGangGPUHours < 7.5 || r.PartialGangGPUHours > 8.5) {
			t.Fatalf("optimistic replay: %.2f GPU-hours held by the started part, want about 8 (8 GPUs for the hour)", r.PartialGangGPUHours)
		}
		if r.Unfinished != 0 {
			t.Fatalf("%d unfinished", r.Unfinished)
		}
	}
}
