package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

const workerCols = `id, host, pool, status, token_hash, boot_id, cpu_milli, memory_bytes, gpus, labels, log_port,
	generation, ordinal, registered_at, last_heartbeat_at,
	(SELECT c.cordoned_at FROM cordons c WHERE c.worker_id = workers.id)`

func scanWorker(sc scanner) (*Worker, error) {
	var (
		w             Worker
		status, lbl   string
		reg, lastSeen sql.NullInt64
		cordoned      sql.NullInt64
	)
	err := sc.Scan(&w.ID, &w.Host, &w.Pool, &status, &w.TokenHash, &w.BootID, &w.Capacity.MilliCPU,
		&w.Capacity.Memory, &w.Capacity.GPUs, &lbl, &w.LogPort, &w.Generation, &w.Ordinal, &reg, &lastSeen, &cordoned)
	if err != nil {
		return nil, err
	}
	w.Status = WorkerStatus(status)
	w.RegisteredAt, w.LastHeartbeatAt = fromTS(reg), fromTS(lastSeen)
	w.CordonedAt = fromTS(cordoned)
	if w.Labels, err = decodeMap(lbl, "worker labels"); err != nil {
		return nil, err
	}
	return &w, nil
}

// Registration is what a worker sends when it joins.
type Registration struct {
	ID        string
	Host      string
	Pool      string
	Capacity  capacity.Resources
	Labels    map[string]string
	LogPort   int
	BootID    string
	TokenHash string
}

// RegisterWorker inserts a worker or, for a known id, reconnects it: status
// ONLINE, new token, host, capacity and labels overwritten; its generation
// is bumped so a waiting poll wakes up. A new worker gets the next ordinal
// of its pool.
func (s *Store) RegisterWorker(ctx context.Context, r Registration, now time.Time) (*Worker, error) {
	if r.ID == "" {
		return nil, errors.New("register worker: empty worker_id")
	}
	labels, err := encodeMap(r.Labels)
	if err != nil {
		return nil, fmt.Errorf("register worker %s: labels: %w", r.ID, err)
	}
	w, err := scanWorker(s.w.QueryRowContext(ctx, `INSERT INTO workers (id, host, pool, status, token_hash, boot_id,
		cpu_milli, memory_bytes, gpus, labels, log_port, generation, ordinal, registered_at, last_heartbeat_at)
		VALUES (:id, :host, :pool, 'ONLINE', :token, :boot, :cpu, :mem, :gpus, :labels, :logport, 1,
			COALESCE((SELECT MAX(ordinal) + 1 FROM workers WHERE pool = :pool), 0), :now, :now)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pool = excluded.pool, status = 'ONLINE',
			token_hash = excluded.token_hash, boot_id = excluded.boot_id, cpu_milli = excluded.cpu_milli,
			memory_bytes = excluded.memory_bytes, gpus = excluded.gpus, labels = excluded.labels,
			log_port = excluded.log_port, generation = workers.generation + 1,
			last_heartbeat_at = excluded.last_heartbeat_at
		RETURNING `+workerCols,
		sql.Named("id", r.ID), sql.Named("host", r.Host), sql.Named("pool", r.Pool), sql.Named("token", r.TokenHash),
		sql.Named("boot", r.BootID), sql.Named("cpu", r.Capacity.MilliCPU), sql.Named("mem", r.Capacity.Memory),
		sql.Named("gpus", r.Capacity.GPUs), sql.Named("labels", labels), sql.Named("logport", r.LogPort),
		sql.Named("now", now.UnixNano())))
	if err != nil {
		return nil, fmt.Errorf("register worker %s: %w", r.ID, err)
	}
	return w, nil
}

// GetWorker returns one worker, or ErrNotFound.
func (s *Store) GetWorker(ctx context.Context, id string) (*Worker, error) {
	w, err := scanWorker(s.r.QueryRowContext(ctx, `SELECT `+workerCols+` FROM workers WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("worker %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get worker %s: %w", id, err)
	}
	return w, nil
}

// ListWorkers returns every worker, by pool and ordinal.
func (s *Store) ListWorkers(ctx context.Context) ([]*Worker, error) {
	return s.listWorkers(ctx, s.r)
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func (s *Store) listWorkers(ctx context.Context, q querier) ([]*Worker, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+workerCols+` FROM workers ORDER BY pool, ordinal, id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	defer rows.Close()
	var out []*Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}

// lostSQL moves the active instances of a lost worker on: CANCELLED if a
// cancel was requested, PENDING if the restart policy allows, else the
// given status (UNKNOWN when the worker went offline, FAILED when deleted),
// with the reason (WORKER_OFFLINE, WORKER_DELETED) so an UNKNOWN instance
// says why too. A requeued instance is held out of scheduling for :hold
// nanoseconds (not_before, held_by: the lost worker) when :hold > 0.
func lostSQL(allowed string) string {
	return `UPDATE instances SET
	status = CASE WHEN cancel_requested_at IS NOT NULL THEN 'CANCELLED'
		WHEN ` + restartExpr + ` THEN 'PENDING' ELSE :else END,
	failure_reason = CASE WHEN cancel_requested_at IS NULL AND NOT ` + restartExpr + `
		THEN :reason ELSE failure_reason END,
	restarts = restarts + CASE WHEN ` + restartExpr + ` THEN 1 ELSE 0 END,
	queued_at = CASE WHEN ` + restartExpr + ` THEN :now ELSE queued_at END,
	ended_at = CASE WHEN cancel_requested_at IS NOT NULL OR (NOT ` + restartExpr + ` AND :else = 'FAILED')
		THEN :now ELSE ended_at END,
	assigned_worker = CASE WHEN ` + restartExpr + ` AND cancel_requested_at IS NULL THEN NULL ELSE assigned_worker END,
	not_before = CASE WHEN ` + restartExpr + ` AND :hold > 0 THEN :now + :hold ELSE not_before END,
	held_by = CASE WHEN ` + restartExpr + ` AND :hold > 0 THEN :worker ELSE held_by END
	WHERE assigned_worker = :worker AND status IN (` + allowed + `)`
}

var (
	offlineSQL = lostSQL(`'ASSIGNED','RUNNING'`)
	deletedSQL = lostSQL(`'ASSIGNED','RUNNING','UNKNOWN'`)
)

// MarkSuspect moves ONLINE workers whose last heartbeat is before cutoff to
// SUSPECT (no new placements). It returns how many changed.
func (s *Store) MarkSuspect(ctx context.Context, cutoff time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `UPDATE workers SET status = 'SUSPECT' WHERE status = 'ONLINE' AND last_heartbeat_at < ?`,
		cutoff.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("mark suspect: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// MarkOffline moves workers whose last heartbeat is before cutoff to
// OFFLINE, in one transaction with their instances: ASSIGNED and RUNNING
// ones become UNKNOWN, or PENDING when their restart policy allows (the next
// assignment increments the attempt, fencing the lost one), or CANCELLED
// when a cancel was requested. It returns the workers that went offline.
//
// A requeued instance gets NotBefore = now + hold and HeldBy = its worker
// when hold > 0: Assign leaves it PENDING until then. The lost worker may
// still run the old attempt; the head passes the time that worker's fence
// takes to stop it (see head.Config.FenceMargin).
func (s *Store) MarkOffline(ctx context.Context, cutoff, now time.Time, hold time.Duration) ([]string, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("mark offline: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `UPDATE workers SET status = 'OFFLINE', generation = generation + 1
		WHERE status != 'OFFLINE' AND last_heartbeat_at < ? RETURNING id`, cutoff.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("mark offline: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("mark offline: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark offline: %w", err)
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, offlineSQL, sql.Named("failure", 1), sql.Named("else", string(StatusUnknown)),
			sql.Named("reason", ReasonWorkerOffline), sql.Named("now", now.UnixNano()), sql.Named("worker", id),
			sql.Named("hold", max(int64(hold), 0))); err != nil {
			return nil, fmt.Errorf("mark offline %s: instances: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("mark offline: commit: %w", err)
	}
	return ids, nil
}

// ReleaseHold clears the fence hold (NotBefore, HeldBy) of every PENDING
// instance held by worker whose hold is still in force at now, so they may
// be placed at once, and returns their ids in order. The caller must know
// that nothing of worker's old attempts can still run: its machine's
// deletion is confirmed (the provider answered NotFound). An OFFLINE or
// removed worker alone is not enough; the hold is what keeps an instance
// from running twice while the lost worker's fence stops the old attempt.
// Holds already over, and instances of other workers, are left alone.
func (s *Store) ReleaseHold(ctx context.Context, worker string, now time.Time) ([]string, error) {
	rows, err := s.w.QueryContext(ctx, `UPDATE instances SET not_before = NULL, held_by = ''
		WHERE status = 'PENDING' AND held_by = ? AND not_before > ? RETURNING id`, worker, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("release hold of %s: %w", worker, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("release hold of %s: %w", worker, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release hold of %s: %w", worker, err)
	}
	slices.Sort(ids)
	return ids, nil
}

// DeleteWorker removes an OFFLINE worker. Its remaining instances become
// FAILED (WORKER_DELETED), PENDING by restart policy, or CANCELLED.
// ErrNotFound or ErrWorkerOnline otherwise.
func (s *Store) DeleteWorker(ctx context.Context, id string, now time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete worker %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	if err := deleteWorkerTx(ctx, tx, id, now, 0); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete worker %s: commit: %w", id, err)
	}
	return nil
}

// RemoveWorker deletes a worker whatever its status, as if it had gone
// OFFLINE and been deleted in one transaction: its machine is being given
// up (lost, failed, or terminated). Its unfinished instances become FAILED
// (WORKER_DELETED), PENDING by restart policy, or CANCELLED; its cordon is
// deleted. ErrNotFound if the worker is unknown.
//
// A requeued instance is held as MarkOffline holds one (NotBefore = now +
// hold, HeldBy = the worker) when hold > 0: the machine may not be gone
// yet, and its worker, which may still run the old attempt, stops it only
// when its fence runs out. ReleaseHold ends the hold once the machine's
// deletion is confirmed.
func (s *Store) RemoveWorker(ctx context.Context, id string, now time.Time, hold time.Duration) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("remove worker %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE workers SET status = 'OFFLINE' WHERE id = ?`, id); err != nil {
		return fmt.Errorf("remove worker %s: %w", id, err)
	}
	if err := deleteWorkerTx(ctx, tx, id, now, hold); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("remove worker %s: commit: %w", id, err)
	}
	return nil
}

// deleteWorkerTx deletes the OFFLINE worker id in tx; instances it
// requeues are held for hold (none when 0). DeleteWorker passes 0: an
// OFFLINE worker has no ASSIGNED or RUNNING instance left to requeue (its
// requeued ones were held when it went OFFLINE).
func deleteWorkerTx(ctx context.Context, tx *sql.Tx, id string, now time.Time, hold time.Duration) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id = ? AND status = 'OFFLINE'`, id)
	if err != nil {
		return fmt.Errorf("delete worker %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var st string
		err := tx.QueryRowContext(ctx, `SELECT status FROM workers WHERE id = ?`, id).Scan(&st)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delete worker %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("delete worker %s: %w", id, err)
		}
		return fmt.Errorf("delete worker %s: status %s: %w", id, st, ErrWorkerOnline)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM cordons WHERE worker_id = ?`, id); err != nil {
		return fmt.Errorf("delete worker %s: cordon: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, deletedSQL, sql.Named("failure", 1), sql.Named("else", string(StatusFailed)),
		sql.Named("reason", ReasonWorkerDeleted), sql.Named("now", now.UnixNano()), sql.Named("worker", id),
		sql.Named("hold", max(int64(hold), 0))); err != nil {
		return fmt.Errorf("delete worker %s: instances: %w", id, err)
	}
	return nil
}

// DeleteOfflineWorkers removes every OFFLINE worker, as DeleteWorker does,
// and returns their ids.
func (s *Store) DeleteOfflineWorkers(ctx context.Context, now time.Time) ([]string, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("delete offline workers: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id FROM workers WHERE status = 'OFFLINE' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("delete offline workers: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("delete offline workers: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if err := deleteWorkerTx(ctx, tx, id, now, 0); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("delete offline workers: commit: %w", err)
	}
	return ids, nil
}

// DesiredState is a worker's desired set at one generation.
type DesiredState struct {
	Generation int64
	Instances  []Desired
	Stopping   []Stopping
}

// DesiredFor reads a worker's generation and desired set in one consistent
// read: its ASSIGNED, RUNNING and UNKNOWN instances without a cancel
// request, and separately those being cancelled. ErrNotFound if unknown.
func (s *Store) DesiredFor(ctx context.Context, worker string) (DesiredState, error) {
	var ds DesiredState
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return ds, fmt.Errorf("desired for %s: begin: %w", worker, err)
	}
	defer tx.Rollback()
	err = tx.QueryRowContext(ctx, `SELECT generation FROM workers WHERE id = ?`, worker).Scan(&ds.Generation)
	if errors.Is(err, sql.ErrNoRows) {
		return ds, fmt.Errorf("desired for %s: worker: %w", worker, ErrNotFound)
	}
	if err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT i.id, i.attempt, i.command, i.env, i.venv, i.status,
		i.cancel_requested_at IS NOT NULL, i.grace_period_ns, i.restart_policy,
		i.status IN ('ASSIGNED','RUNNING') AND i.restarts < i.max_restarts AND i.restart_policy IN ('always','on-failure'),
		i.gang_id,
		(SELECT group_concat(a.gpu_index) FROM instance_allocations a WHERE a.instance_id = i.id AND a.attempt = i.attempt)
		FROM instances i WHERE i.assigned_worker = ? AND i.status IN ('ASSIGNED','RUNNING','UNKNOWN')
		ORDER BY i.assigned_at, i.id`, worker)
	if err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			d         Desired
			env, st   string
			cancelled bool
			grace     int64
			policy    string
			gpus      sql.NullString
		)
		if err := rows.Scan(&d.InstanceID, &d.Attempt, &d.Command, &env, &d.Venv, &st, &cancelled, &grace,
			&policy, &d.RequeuedIfLost, &d.GangID, &gpus); err != nil {
			return ds, fmt.Errorf("desired for %s: %w", worker, err)
		}
		if cancelled {
			ds.Stopping = append(ds.Stopping, Stopping{InstanceID: d.InstanceID, Attempt: d.Attempt, GracePeriod: time.Duration(grace)})
			continue
		}
		d.ExpectedStatus = Status(st)
		d.RestartPolicy = RestartPolicy(policy)
		if d.Env, err = decodeMap(env, "env"); err != nil {
			return ds, fmt.Errorf("desired for %s: %w", worker, err)
		}
		if d.GPUIndices, err = parseIndexList(gpus); err != nil {
			return ds, fmt.Errorf("desired for %s: %w", worker, err)
		}
		ds.Instances = append(ds.Instances, d)
	}
	if err := rows.Err(); err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	return ds, nil
}

// SchedInstance is the part of an instance the scheduler needs.
type SchedInstance struct {
	ID                  string
	Status              Status
	Attempt             int64
	Worker              string
	Pool                string
	Requests            capacity.Resources
	Exclusive           bool
	Daemon              bool
	TargetWorker        string
	RequestedGPUIndices []int
	GPUIndices          []int
	QueuedAt            time.Time
	// NotBefore and HeldBy: a PENDING instance held out of scheduling
	// until NotBefore while the fence of HeldBy stops its old attempt.
	NotBefore time.Time
	HeldBy    string
	// Priority and the gang fields are the instance's (Instance.Priority,
	// Instance.GangID and the rest).
	Priority    int
	Restartable bool
	GangID      string
	GangName    string
	GangSize    int
	GangRank    int
	GangMaxWait time.Duration
}

// SchedulingState is one consistent read of what placement needs.
type SchedulingState struct {
	Workers []*Worker
	// Active are ASSIGNED, RUNNING and UNKNOWN instances with their GPUs.
	Active []SchedInstance
	// Pending are PENDING instances without a cancel request, FIFO order.
	Pending []SchedInstance
}

// SchedulingState reads workers, active and pending instances in one read
// transaction.
func (s *Store) SchedulingState(ctx context.Context) (*SchedulingState, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("scheduling state: begin: %w", err)
	}
	defer tx.Rollback()
	st := &SchedulingState{}
	if st.Workers, err = s.listWorkers(ctx, tx); err != nil {
		return nil, fmt.Errorf("scheduling state: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT i.id, i.status, i.attempt, COALESCE(i.assigned_worker, ''), i.pool,
		i.cpu_milli, i.memory_bytes, i.gpus, i.exclusive, i.daemon, i.target_worker, i.requested_gpu_indices, i.queued_at,
		i.not_before, i.held_by, i.priority, i.restartable, i.gang_id, i.gang_name, i.gang_size, i.gang_rank, i.gang_max_wait_ns,
		CASE WHEN i.status = 'PENDING' THEN NULL ELSE
		(SELECT group_concat(a.gpu_index) FROM instance_allocations a WHERE a.instance_id = i.id AND a.attempt = i.attempt) END
		FROM instances i
		WHERE i.status IN ('ASSIGNED','RUNNING','UNKNOWN') OR (i.status = 'PENDING' AND i.cancel_requested_at IS NULL)
		ORDER BY i.queued_at, i.created_at, i.id`)
	if err != nil {
		return nil, fmt.Errorf("scheduling state: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			si        SchedInstance
			status    string
			excl, dmn int64
			req       string
			queued    sql.NullInt64
			notBefore sql.NullInt64
			gpus      sql.NullString
			gangWait  int64
			rst       bool
		)
		if err := rows.Scan(&si.ID, &status, &si.Attempt, &si.Worker, &si.Pool, &si.Requests.MilliCPU,
			&si.Requests.Memory, &si.Requests.GPUs, &excl, &dmn, &si.TargetWorker, &req, &queued, &notBefore, &si.HeldBy,
			&si.Priority, &rst, &si.GangID, &si.GangName, &si.GangSize, &si.GangRank, &gangWait, &gpus); err != nil {
			return nil, fmt.Errorf("scheduling state: %w", err)
		}
		si.Status = Status(status)
		si.Exclusive, si.Daemon = excl != 0, dmn != 0
		si.QueuedAt = fromTS(queued)
		si.NotBefore = fromTS(notBefore)
		si.GangMaxWait = time.Duration(gangWait)
		si.Restartable = rst
		if si.RequestedGPUIndices, err = decodeInts(req, "requested_gpu_indices"); err != nil {
			return nil, fmt.Errorf("scheduling state: %w", err)
		}
		if si.GPUIndices, err = parseIndexList(gpus); err != nil {
			return nil, fmt.Errorf("scheduling state: %w", err)
		}
		if si.Status == StatusPending {
			st.Pending = append(st.Pending, si)
		} else {
			st.Active = append(st.Active, si)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scheduling state: %w", err)
	}
	return st, nil
}
