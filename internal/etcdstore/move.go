package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// MoveInstance ends the current attempt of a restartable instance so that
// it starts again elsewhere, as the SQLite store's MoveInstance does:
// guarded by id, attempt and worker, only an ASSIGNED or RUNNING
// restartable instance with no cancel requested goes back to PENDING with
// reason, and the worker's generation is bumped in the same transaction.
// It is a fenced write (SetFence). It reports whether the instance moved.
func (s *Store) MoveInstance(ctx context.Context, id string, attempt int64, worker, reason string, now time.Time) (bool, error) {
	if id == "" || worker == "" {
		return false, errors.New("move instance: empty instance or worker id")
	}
	var moved bool
	err := s.update(ctx, "move instance "+id, func(t *txn) error {
		t.fenced = true
		moved = false
		old, err := t.getInstance(id)
		if err != nil {
			return fmt.Errorf("move instance %s: %w", id, err)
		}
		if old == nil || old.Attempt != attempt || old.AssignedWorker != worker || !old.Restartable ||
			(old.Status != store.StatusAssigned && old.Status != store.StatusRunning) || !old.CancelRequestedAt.IsZero() {
			return nil
		}
		in := clone(old)
		in.Status, in.FailureReason, in.QueuedAt = store.StatusPending, reason, now.UTC()
		in.AssignedWorker, in.Port, in.Endpoint = "", nil, ""
		if err := t.putInstance(old, in); err != nil {
			return err
		}
		w, err := t.getWorker(worker)
		if err != nil {
			return fmt.Errorf("move instance %s: %w", id, err)
		}
		if w != nil {
			w.Generation++
			if err := t.putWorker(w); err != nil {
				return err
			}
		}
		moved = true
		return nil
	})
	return moved, err
}
