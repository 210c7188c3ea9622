package controller_test

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/reconcile"
)

// markedWorkload is a fakeWorkload whose nodes also carry deletion marks,
// by machine id, as Kubernetes Nodes carry their taints: the marks outlive
// the controller that made them.
type markedWorkload struct {
	*fakeWorkload
	mu    sync.Mutex
	marks map[string]time.Time
	reads int
}

func (w *markedWorkload) MarkedAt(_ context.Context, n controller.Node) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	return w.marks[n.MachineID], nil
}

// mirror writes the controller's marks where the next controller reads
// them (what the operator does with taints).
func (w *markedWorkload) mirror(e *env) {
	st := e.ctl.Status()
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.marks)
	for _, n := range st.Nodes {
		if at, ok := st.Marks[n.ID]; ok {
			w.marks[n.MachineID] = at
		}
	}
}

// TestMarksSurviveTakeover: with seed 001's scale-down delay, a controller
// that takes the pool over (a failover, a restart) reads the deletion marks
// back from the workload and continues their delay: the marked nodes are
// drained when the first marks come due, not a full delay after the
// takeover, and the marks are not removed and made again.
func TestMarksSurviveTakeover(t *testing.T) {
	const delay = 10 * time.Minute
	tests := []struct {
		name      string
		readMarks bool
		// drainAfter is when, after the marks were made, the marked
		// nodes are drained.
		drainAfter time.Duration
	}{
		{name: "marks read back continue their delay", readMarks: true, drainAfter: delay},
		{name: "without a mark reader the delay restarts", readMarks: false, drainAfter: 6*interval + delay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, setup{cfg: func(c *controller.Config) { c.Reconcile.ScaleDownDelay = delay }})
			w := &markedWorkload{fakeWorkload: e.work, marks: map[string]time.Time{}}
			e.ctl = e.build(w, tt.readMarks)
			e.setDesired(3)
			e.tickUntil(3, 5)
			e.setDesired(1)
			e.mustTick()
			marks := e.ctl.Status().Marks
			if got := slices.Sorted(maps.Keys(marks)); !slices.Equal(got, []reconcile.NodeID{1, 2}) {
				t.Fatalf("marked %v, want [1 2]\n%s", got, e.events.tail(10))
			}
			markedAt := marks[1]
			for range 5 {
				e.mustTick()
			}
			w.mirror(e)

			// The controller "crashes"; another takes the pool over.
			e.ctl = e.build(w, tt.readMarks)
			e.setDesired(1)
			e.mustTick()
			st := e.ctl.Status()
			if tt.readMarks {
				if !st.Marks[1].Equal(markedAt) || !st.Marks[2].Equal(markedAt) {
					t.Fatalf("after the takeover marks %v, want nodes 1 and 2 marked at %v\n%s", st.Marks, markedAt, e.events.tail(10))
				}
				if len(e.events.find(controller.ReasonUnmark)) != 0 {
					t.Fatalf("the takeover removed marks:\n%s", e.events.tail(10))
				}
				if w.reads == 0 {
					t.Fatal("the workload's marks were never read")
				}
			}
			drained := time.Time{}
			for range 30 {
				if len(e.events.find(controller.ReasonDrain)) > 0 {
					drained = e.clk.Now()
					break
				}
				e.mustTick()
			}
			if drained.IsZero() {
				t.Fatalf("never drained\n%s", e.events.tail(20))
			}
			if got := drained.Sub(markedAt); got < tt.drainAfter || got > tt.drainAfter+interval {
				t.Fatalf("drained %v after the marks, want %v (within one tick)\n%s", got, tt.drainAfter, e.events.tail(20))
			}
			e.tickUntil(1, 10)
		})
	}
}

// build returns a controller on the env's journal and cloud with workload
// w, hiding its MarkReader unless readMarks.
func (e *env) build(w *markedWorkload, readMarks bool) *controller.Controller {
	e.t.Helper()
	var work controller.Workload = w
	if !readMarks {
		work = w.fakeWorkload
	}
	ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.rec, Journal: e.journal, Workload: work, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler), Events: e.events})
	if err != nil {
		e.t.Fatal(err)
	}
	return ctl
}
