package head

import (
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/store"
)

// TestFinishedCounter: an instance that held room in one pass and holds
// none in the next finished on its worker's pool; one that waits again
// (requeued) or runs again (a new attempt, restarted between two passes)
// and a daemon do not count.
func TestFinishedCounter(t *testing.T) {
	gpu := capacity.Resources{MilliCPU: 4000, Memory: 1 << 30, GPUs: 1}
	workers := []*store.Worker{{ID: "w1", Pool: "a"}, {ID: "w2", Pool: ""}} // "": the default pool
	run := func(id string, attempt int64, worker string) store.SchedInstance {
		return store.SchedInstance{ID: id, Attempt: attempt, Worker: worker, Requests: gpu}
	}
	daemon := run("d", 1, "w1")
	daemon.Daemon = true
	var f finishedCounter
	steps := []struct {
		active, pending []store.SchedInstance
		workers         []*store.Worker
		want            map[string]int
	}{
		{active: []store.SchedInstance{run("x", 1, "w1"), run("y", 1, "w1"), run("z", 1, "w2"), daemon}, workers: workers},
		// x finished; y was requeued; the daemon went: only x counts.
		{active: []store.SchedInstance{run("z", 1, "w2")}, pending: []store.SchedInstance{{ID: "y", Attempt: 2}}, workers: workers,
			want: map[string]int{"a": 1}},
		// y runs again (attempt 2) and z was restarted between the passes
		// (attempt 2): neither finished.
		{active: []store.SchedInstance{run("y", 2, "w1"), run("z", 2, "w2")}, workers: workers, want: map[string]int{"a": 1}},
		// Both finish.
		{workers: workers, want: map[string]int{"a": 2, "": 1}},
	}
	for i, s := range steps {
		f.observe(&store.SchedulingState{Workers: s.workers, Active: s.active, Pending: s.pending})
		p := map[string]capacity.Pressure{"a": {}, "": {}}
		f.stamp(p)
		for _, pool := range []string{"a", ""} {
			if got, want := p[pool].Finished, s.want[pool]; got != want {
				t.Errorf("step %d: pool %s: Finished %d, want %d", i, pool, got, want)
			}
			if got, want := p[pool].FinishedRequests.GPUs, int64(s.want[pool]); got != want {
				t.Errorf("step %d: pool %s: FinishedRequests.GPUs %d, want %d", i, pool, got, want)
			}
		}
	}
}
