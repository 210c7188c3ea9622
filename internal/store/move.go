package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ReasonMoved is the failure reason of an attempt that consolidation ended
// so that the instance starts again on another node (store.MoveInstance).
const ReasonMoved = "MOVED_BY_CONSOLIDATION"

// MoveInstance ends the current attempt of a restartable instance so that
// it starts again elsewhere: guarded by id, attempt and worker (a stale
// caller changes nothing), it applies only to an ASSIGNED or RUNNING
// instance marked restartable with no cancel requested. The instance goes
// back to PENDING with reason as its failure reason (readable until its
// next attempt is assigned) and leaves the worker's desired set in the same
// transaction (its generation is bumped), so the worker stops the old
// process; the next assignment increments the attempt, which fences any
// late report of the old one. It reports whether the instance moved.
func (s *Store) MoveInstance(ctx context.Context, id string, attempt int64, worker, reason string, now time.Time) (bool, error) {
	if id == "" || worker == "" {
		return false, errors.New("move instance: empty instance or worker id")
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("move instance %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE instances SET status = 'PENDING', failure_reason = :reason,
		queued_at = :now, last_report_at = :now, assigned_worker = NULL, port = NULL, endpoint = ''
		WHERE id = :id AND attempt = :attempt AND assigned_worker = :worker AND status IN ('ASSIGNED','RUNNING')
		AND restartable = 1 AND cancel_requested_at IS NULL`,
		sql.Named("reason", reason), sql.Named("now", now.UnixNano()), sql.Named("id", id),
		sql.Named("attempt", attempt), sql.Named("worker", worker))
	if err != nil {
		return false, fmt.Errorf("move instance %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ?`, worker); err != nil {
		return false, fmt.Errorf("move instance %s: bump generation of %s: %w", id, worker, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("move instance %s: commit: %w", id, err)
	}
	return true, nil
}
