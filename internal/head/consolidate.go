package head

import (
	"context"
	"errors"
	"fmt"

	"github.com/tide-project/tide/internal/consolidate"
	"github.com/tide-project/tide/internal/store"
)

// ErrNotMovable is returned by MoveOff when the worker runs work that may
// not move (placed there since the decision): nothing was moved, and the
// cordon MoveOff set was lifted.
var ErrNotMovable = errors.New("the node runs work that may not move")

// ConsolidationNodes returns the named workers as consolidation sees them:
// capacity, cordon, and their ASSIGNED and RUNNING instances with whether
// each may move. An instance pinned to its worker (target_worker) or to GPU
// indices counts as not restartable: a new attempt could not run
// elsewhere. Workers the head does not know are left out; ID is the worker
// id, and Ordinal, PricePerHour and Protected are the caller's to fill.
func (h *Head) ConsolidationNodes(ctx context.Context, workers []string) (map[string]*consolidate.Node, error) {
	want := make(map[string]bool, len(workers))
	for _, w := range workers {
		want[w] = true
	}
	ws, err := h.st.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*consolidate.Node{}
	for _, w := range ws {
		if want[w.ID] && w.Status != store.WorkerOffline {
			out[w.ID] = &consolidate.Node{ID: w.ID, Capacity: w.Capacity, Cordoned: w.Cordoned()}
		}
	}
	active, err := h.activeOn(ctx, want)
	if err != nil {
		return nil, err
	}
	for _, in := range active {
		if n := out[in.AssignedWorker]; n != nil {
			n.Instances = append(n.Instances, consolidationInstance(in))
		}
	}
	return out, nil
}

// activeOn lists the ASSIGNED and RUNNING instances on the given workers.
func (h *Head) activeOn(ctx context.Context, workers map[string]bool) ([]*store.Instance, error) {
	var out []*store.Instance
	for _, st := range []store.Status{store.StatusAssigned, store.StatusRunning} {
		ins, err := h.st.ListInstances(ctx, store.Filter{Status: st})
		if err != nil {
			return nil, err
		}
		for _, in := range ins {
			if workers[in.AssignedWorker] {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

func consolidationInstance(in *store.Instance) consolidate.Instance {
	// A gang member is never moved for a saving: moving one restarts its
	// whole gang (gangrestart.go).
	return consolidate.Instance{ID: in.ID, Requests: in.Requests, Daemon: in.Daemon,
		Restartable:  movable(in) && in.GangID == "",
		DoNotDisrupt: consolidate.DoNotDisrupt(in.Labels), StartedAt: in.AssignedAt,
		Moved: in.Attempt > 1} // restarted before (a move, its restart policy, a lost worker): not moved again
}

// movable reports whether in may be stopped and started again elsewhere:
// restartable, not pinned to a worker or to GPUs, no cancel requested.
func movable(in *store.Instance) bool {
	pinned := in.TargetWorker != "" || len(in.RequestedGPUIndices) > 0
	return in.Restartable && !pinned && in.CancelRequestedAt.IsZero()
}

// MoveOff carries out a consolidation move on one worker: it cordons the
// worker (no new work lands there), checks again that everything running
// there may move, and ends the current attempt of each of its restartable
// instances so that it is placed elsewhere (store.MoveInstance: back to
// PENDING with store.ReasonMoved, out of the worker's desired set, the
// next attempt fenced by its number). If the worker now runs any instance
// that may not move, it lifts the cordon and returns ErrNotMovable having
// moved nothing. The worker stays cordoned: scale-down drains it once it
// is empty. It returns the ids moved.
//
// targets maps a moved instance's id to the worker its move planned for it
// (consolidate.Move.Targets): its next attempt goes there when it fits
// (scheduler.Instance.PreferWorker), so that the placement score does not
// spread the moved work over part-used workers and undo the repack.
func (h *Head) MoveOff(ctx context.Context, worker string, targets map[string]string) ([]string, error) {
	if err := h.Cordon(ctx, worker, true); err != nil {
		return nil, err
	}
	active, err := h.activeOn(ctx, map[string]bool{worker: true})
	if err != nil {
		return nil, err
	}
	for _, in := range active {
		if ci := consolidationInstance(in); !ci.Daemon && (!ci.Restartable || ci.DoNotDisrupt) {
			if err := h.Cordon(ctx, worker, false); err != nil {
				return nil, errors.Join(fmt.Errorf("move off %s: instance %s may not move: %w", worker, in.ID, ErrNotMovable), err)
			}
			return nil, fmt.Errorf("move off %s: instance %s may not move: %w", worker, in.ID, ErrNotMovable)
		}
	}
	var moved []string
	for _, in := range active {
		if in.Daemon {
			continue
		}
		if t := targets[in.ID]; t != "" && t != worker {
			// Before the move: a pass that sees it pending sees this too.
			// A move that does not happen leaves an entry the next pass
			// drops (the instance is not pending).
			h.mu.Lock()
			if h.prefer == nil {
				h.prefer = map[string]string{}
			}
			h.prefer[in.ID] = t
			h.mu.Unlock()
		}
		ok, err := h.st.MoveInstance(ctx, in.ID, in.Attempt, worker, store.ReasonMoved, h.clk.Now())
		if err != nil {
			return moved, err
		}
		if ok {
			moved = append(moved, in.ID)
			h.log.Info("instance moved by consolidation", "instance", in.ID, "attempt", in.Attempt, "worker", worker)
		}
	}
	if len(moved) > 0 {
		h.notify.wake(worker) // its desired set shrank: stop the old attempts now
		h.Poke()              // place the new ones
	}
	return moved, nil
}

// Evacuate ends the current attempt of every instance on a cordoned
// worker that may move (restartable, not pinned, not do-not-disrupt, not
// a daemon), so that each is placed elsewhere (store.MoveInstance, as
// MoveOff does); the others are left to end by themselves. It is how a
// node being replaced (drift, expiry) is emptied without disrupting work
// that may not be: its drain then waits for that work alone. It returns
// the ids moved.
func (h *Head) Evacuate(ctx context.Context, worker string) ([]string, error) {
	active, err := h.activeOn(ctx, map[string]bool{worker: true})
	if err != nil {
		return nil, err
	}
	var moved []string
	for _, in := range active {
		if ci := consolidationInstance(in); ci.Daemon || !ci.Restartable || ci.DoNotDisrupt {
			continue
		}
		ok, err := h.st.MoveInstance(ctx, in.ID, in.Attempt, worker, store.ReasonMoved, h.clk.Now())
		if err != nil {
			return moved, err
		}
		if ok {
			moved = append(moved, in.ID)
			h.log.Info("instance moved off a node being replaced", "instance", in.ID, "attempt", in.Attempt, "worker", worker)
		}
	}
	if len(moved) > 0 {
		h.notify.wake(worker)
		h.Poke()
	}
	return moved, nil
}
