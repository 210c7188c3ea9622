package head

import (
	"context"
	"errors"
	"fmt"

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
