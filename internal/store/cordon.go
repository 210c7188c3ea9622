package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// cordonSchema is part of migration 3: cordoned workers. A cordon is kept
// by worker id apart from the workers table, so a node can be cordoned
// before its worker has registered (a drain of a machine that is still
// booting) and stays cordoned across re-registrations. Deleting the worker
// deletes its cordon.
const cordonSchema = `
CREATE TABLE cordons (
	worker_id   TEXT PRIMARY KEY,
	cordoned_at INTEGER NOT NULL
) WITHOUT ROWID;
`

// SetCordoned cordons (on) or uncordons a worker by id, whether or not it
// has registered yet. A cordoned worker gets no new assignment: Assign
// checks the cordon in the same statement that places an instance, so once
// SetCordoned(on) has returned, no placement decided earlier can still
// land there. Cordoning an already cordoned worker keeps its first time.
// It reports whether anything changed.
func (s *Store) SetCordoned(ctx context.Context, worker string, on bool, now time.Time) (bool, error) {
	if worker == "" {
		return false, errors.New("cordon: empty worker id")
	}
	q := `INSERT INTO cordons (worker_id, cordoned_at) VALUES (?, ?) ON CONFLICT (worker_id) DO NOTHING`
	args := []any{worker, now.UnixNano()}
	if !on {
		q, args = `DELETE FROM cordons WHERE worker_id = ?`, []any{worker}
	}
	res, err := s.w.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("cordon %s (%t): %w", worker, on, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// WorkerBusy reports whether an ASSIGNED or RUNNING non-daemon instance is
// on the worker. An unknown worker is not busy. UNKNOWN instances (their
// worker went offline) do not count: nothing proves they still run.
func (s *Store) WorkerBusy(ctx context.Context, worker string) (bool, error) {
	var busy bool
	err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM instances
		WHERE assigned_worker = ? AND status IN ('ASSIGNED','RUNNING') AND daemon = 0)`, worker).Scan(&busy)
	if err != nil {
		return false, fmt.Errorf("worker busy %s: %w", worker, err)
	}
	return busy, nil
}
