package head

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// Cordon stops (on) or resumes (off) placing new instances on a worker. It
// is persisted, so it survives a head restart, and may be set before the
// worker registers. Once Cordon(on) has returned no new instance lands on
// the worker, even from a scheduling pass already under way; what runs
// there keeps running. Idempotent.
func (h *Head) Cordon(ctx context.Context, worker string, on bool) error {
	changed, err := h.st.SetCordoned(ctx, worker, on, h.clk.Now())
	if err != nil {
		return err
	}
	if changed {
		h.log.Info("worker cordon changed", "worker", worker, "cordoned", on)
		if !on {
			h.Poke() // its free room is usable again
		}
	}
	return nil
}

// WorkerBusy reports whether the worker has an ASSIGNED or RUNNING
// non-daemon instance. Daemons never hold a worker up; an unknown worker is
// not busy.
func (h *Head) WorkerBusy(ctx context.Context, worker string) (bool, error) {
	return h.st.WorkerBusy(ctx, worker)
}

// RemoveWorker forgets a worker whose machine is given up for good
// (terminated, or lost): in one transaction it goes OFFLINE and is deleted
// with its cordon, and its unfinished instances are requeued by their
// restart policy, CANCELLED when a cancel was asked, or FAILED
// (WORKER_DELETED). The machine may not be deleted yet, and the worker may
// still run the old attempts: requeued instances are held for removeHold
// (fence.go), until ReleaseHold when the machine's deletion is confirmed.
// A worker of that name registering later is a new worker. ErrNotFound
// (store.ErrNotFound) when it is unknown.
func (h *Head) RemoveWorker(ctx context.Context, worker string) error {
	if err := h.st.RemoveWorker(ctx, worker, h.clk.Now(), h.removeHold()); err != nil {
		return err
	}
	h.log.Info("worker removed", "worker", worker)
	h.notify.wake(worker)
	h.Poke()
	return nil
}

// Workload returns the head as the controller's Workload: a node is the
// worker named by its machine id (the local provider starts
// `tide worker --name <machine id>`). Cordon and Uncordon call Cordon, Busy
// calls WorkerBusy, Forget calls RemoveWorker, MachineDeleted calls
// ReleaseHold.
func (h *Head) Workload() controller.Workload { return workload{h} }

type workload struct{ h *Head }

var _ controller.Workload = workload{}

func (w workload) Cordon(ctx context.Context, n controller.Node) error {
	return w.h.Cordon(ctx, n.MachineID, true)
}

func (w workload) Uncordon(ctx context.Context, n controller.Node) error {
	return w.h.Cordon(ctx, n.MachineID, false)
}

func (w workload) Busy(ctx context.Context, n controller.Node) (bool, error) {
	if n.MachineID == "" {
		return false, errors.New("busy: node has no machine id")
	}
	busy, err := w.h.WorkerBusy(ctx, n.MachineID)
	if err != nil {
		return false, fmt.Errorf("busy %s: %w", n, err)
	}
	return busy, nil
}

// Forget drops the worker of a machine that is gone for good (controller.Forgetter):
// its instances are requeued by their restart policy (held until the
// machine's deletion is confirmed, see RemoveWorker) or failed at once. A
// worker that never registered is not an error. The machine's join
// credentials are revoked first, so a worker still alive on it cannot
// register again and take the requeued work.
func (w workload) Forget(ctx context.Context, n controller.Node) error {
	if err := w.h.RevokeMachine(ctx, n.MachineID); err != nil {
		return err
	}
	if err := w.h.RemoveWorker(ctx, n.MachineID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

var _ controller.Forgetter = workload{}

// MachineDeleted ends the fence hold of the instances requeued from the
// worker of a machine whose deletion the provider confirmed
// (controller.DeletionObserver): the worker is named after its machine.
// Idempotent: a second call finds nothing held.
func (w workload) MachineDeleted(ctx context.Context, n controller.Node) error {
	if n.MachineID == "" {
		return nil
	}
	_, err := w.h.ReleaseHold(ctx, n.Pool, n.MachineID, n.MachineID)
	return err
}

var _ controller.DeletionObserver = workload{}

// Inspect tells the controller what the head knows of a pool's nodes
// (controller.Inspector): a node is registered once a worker of its
// machine's name registered, unhealthy while that worker is OFFLINE, and
// blocked while it runs work that may not be disrupted (not restartable,
// pinned to the worker or to GPU indices, or labelled
// tide.dev/do-not-disrupt). One listing of the workers and of the active
// instances serves every node.
func (w workload) Inspect(ctx context.Context, nodes []controller.Node) (map[string]controller.NodeInfo, error) {
	want := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		want[n.MachineID] = true
	}
	ws, err := w.h.st.ListWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	out := make(map[string]controller.NodeInfo, len(nodes))
	capOf := map[string]capacity.Resources{}
	for _, wk := range ws {
		capOf[wk.ID] = wk.Capacity
		if !want[wk.ID] {
			continue
		}
		info := controller.NodeInfo{Registered: true}
		if wk.Status == store.WorkerOffline {
			info.Unhealthy = "worker OFFLINE, last heard " + wk.LastHeartbeatAt.UTC().Format(time.RFC3339)
		}
		out[wk.ID] = info
	}
	active, err := w.h.activeOn(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	for _, in := range active {
		info, ok := out[in.AssignedWorker]
		if !ok {
			continue
		}
		ci := consolidationInstance(in)
		if !ci.Daemon {
			info.Used = info.Used.Add(in.Requests)
			if !in.AssignedAt.IsZero() {
				info.WorkHours += w.h.clk.Now().Sub(in.AssignedAt).Hours() * capacity.WorkShare(in.Requests, capOf[in.AssignedWorker])
			}
		}
		out[in.AssignedWorker] = info
		if info.Blocked != "" {
			continue
		}
		switch {
		case ci.Daemon:
		case ci.DoNotDisrupt:
			info.Blocked = "do-not-disrupt work (instance " + in.ID + ")"
		case !ci.Restartable && movable(in):
			info.Blocked = "a member of a running gang (instance " + in.ID + "): moving it would restart the whole gang"
		case !ci.Restartable:
			info.Blocked = "non-restartable work (instance " + in.ID + ")"
		}
		out[in.AssignedWorker] = info
	}
	return out, nil
}

var _ controller.Inspector = workload{}

// Evacuate moves the restartable work off the worker of a node being
// replaced (controller.Evacuator): see Head.Evacuate.
func (w workload) Evacuate(ctx context.Context, n controller.Node) error {
	_, err := w.h.Evacuate(ctx, n.MachineID)
	return err
}

var _ controller.Evacuator = workload{}
