package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// MaxAttemptHistory bounds how many attempts of one instance the store
// keeps; older ones are deleted as new ones begin, so an instance restarted
// forever does not grow the table without bound.
const MaxAttemptHistory = 100

// Attempt outcomes beside the instance statuses an attempt can be in
// (ASSIGNED, RUNNING, UNKNOWN, COMPLETED, FAILED, CANCELLED).
const (
	// AttemptLost: the attempt's worker was lost (offline or deleted) and the
	// restart policy queued the instance again.
	AttemptLost Status = "LOST"
	// AttemptMoved: consolidation ended the attempt so that the instance
	// starts again on another node (MoveInstance).
	AttemptMoved Status = "MOVED"
)

// attemptsSchema records every attempt of an instance. Triggers on the
// instances table write it inside the transaction that changes the
// instance, so every path that assigns, starts, ends or requeues an attempt
// (heartbeats, offline and deleted workers, cancels) is recorded without
// each one having to remember to.
//
// A new attempt (attempt incremented by Assign) adds a row. A later change
// of the same attempt updates its row until the row has ended; when the
// instance goes back to PENDING (a restart), the row ends with the outcome
// the instance had: MOVED when consolidation moved it, COMPLETED for exit
// 0, LOST when the worker was lost, FAILED otherwise.
var attemptsSchema = `
CREATE TABLE IF NOT EXISTS attempts (
	instance_id TEXT NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
	attempt     INTEGER NOT NULL,
	worker_id   TEXT NOT NULL,
	status      TEXT NOT NULL,
	assigned_at INTEGER NOT NULL,
	started_at  INTEGER,
	ended_at    INTEGER,
	exit_code   INTEGER,
	reason      TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (instance_id, attempt)
);

CREATE TRIGGER IF NOT EXISTS attempts_begin AFTER UPDATE OF attempt ON instances
WHEN NEW.attempt > OLD.attempt
BEGIN
	INSERT OR REPLACE INTO attempts (instance_id, attempt, worker_id, status, assigned_at)
	VALUES (NEW.id, NEW.attempt, COALESCE(NEW.assigned_worker, ''), NEW.status,
		COALESCE(NEW.assigned_at, NEW.queued_at));
	DELETE FROM attempts WHERE instance_id = NEW.id AND attempt <= NEW.attempt - ` + strconv.Itoa(MaxAttemptHistory) + `;
END;

CREATE TRIGGER IF NOT EXISTS attempts_progress AFTER UPDATE ON instances
WHEN NEW.attempt = OLD.attempt AND NEW.attempt > 0 AND (NEW.status IS NOT OLD.status
	OR NEW.started_at IS NOT OLD.started_at OR NEW.exit_code IS NOT OLD.exit_code
	OR NEW.failure_reason IS NOT OLD.failure_reason)
BEGIN
	UPDATE attempts SET
		status = CASE
			WHEN NEW.status != 'PENDING' THEN NEW.status
			WHEN NEW.failure_reason = '` + ReasonMoved + `' THEN 'MOVED'
			WHEN NEW.exit_code = 0 AND NEW.failure_reason = '' THEN 'COMPLETED'
			WHEN NEW.exit_code IS NULL AND NEW.failure_reason = '' THEN 'LOST'
			ELSE 'FAILED' END,
		started_at = COALESCE(started_at, NEW.started_at),
		ended_at = CASE
			WHEN NEW.status = 'PENDING' THEN NEW.queued_at
			WHEN NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN NEW.ended_at
			ELSE NULL END,
		exit_code = NEW.exit_code,
		reason = NEW.failure_reason
	WHERE instance_id = NEW.id AND attempt = NEW.attempt AND ended_at IS NULL;
END;

INSERT OR IGNORE INTO attempts (instance_id, attempt, worker_id, status, assigned_at, started_at, ended_at, exit_code, reason)
SELECT id, attempt, COALESCE(assigned_worker, ''), status, COALESCE(assigned_at, queued_at), started_at,
	ended_at, exit_code, failure_reason
FROM instances WHERE attempt > 0 AND status != 'PENDING';
`

// RequeuedOutcome is the outcome of an attempt whose instance went back to
// PENDING with this exit code and failure reason (the attempts_progress
// trigger's rule, for stores without triggers): MOVED by consolidation,
// COMPLETED after exit 0, LOST when the worker was lost (no exit code, no
// reason), else FAILED.
func RequeuedOutcome(exit *int, reason string) Status {
	switch {
	case reason == ReasonMoved:
		return AttemptMoved
	case reason == "" && exit != nil && *exit == 0:
		return StatusCompleted
	case reason == "" && exit == nil:
		return AttemptLost
	}
	return StatusFailed
}

// AttemptRecord is one attempt of an instance. Zero times mean not yet (or
// not recorded: attempts that ended before the store kept a history are
// absent, the current one is backfilled from the instance).
type AttemptRecord struct {
	Attempt int64
	Worker  string
	// Status is the attempt's state while it runs (ASSIGNED, RUNNING,
	// UNKNOWN) and its outcome once ended: COMPLETED, FAILED, CANCELLED,
	// LOST when its worker was lost and the instance was queued again, or
	// MOVED by consolidation.
	Status     Status
	AssignedAt time.Time
	StartedAt  time.Time
	EndedAt    time.Time
	ExitCode   *int
	// Reason is the failure reason the attempt ended with, if any.
	Reason string
}

// Attempts returns the recorded attempts of an instance, oldest first (at
// most MaxAttemptHistory). ErrNotFound when the instance is unknown.
func (s *Store) Attempts(ctx context.Context, instanceID string) ([]AttemptRecord, error) {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM instances WHERE id = ?`, instanceID).Scan(&one)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT attempt, worker_id, status, assigned_at, started_at, ended_at,
		exit_code, reason FROM attempts WHERE instance_id = ? ORDER BY attempt`, instanceID)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
	}
	defer rows.Close()
	var out []AttemptRecord
	for rows.Next() {
		var (
			a                 AttemptRecord
			st                string
			assigned          int64
			started, ended, x sql.NullInt64
		)
		if err := rows.Scan(&a.Attempt, &a.Worker, &st, &assigned, &started, &ended, &x, &a.Reason); err != nil {
			return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
		}
		a.Status = Status(st)
		a.AssignedAt = time.Unix(0, assigned).UTC()
		a.StartedAt, a.EndedAt = fromTS(started), fromTS(ended)
		a.ExitCode = intPtr(x)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
	}
	return out, nil
}
