package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

const instanceCols = `i.id, i.name, i.command, i.status, i.attempt, COALESCE(i.assigned_worker, ''), i.pool,
	i.cpu_milli, i.memory_bytes, i.gpus, i.exclusive, i.daemon, i.labels, i.env, i.target_worker,
	i.requested_gpu_indices, i.venv, i.exit_code, i.port, i.endpoint, i.failure_reason, i.restart_policy,
	i.max_restarts, i.restarts, i.grace_period_ns, i.cancel_gen, i.created_at, i.queued_at, i.assigned_at,
	i.started_at, i.ended_at, i.cancel_requested_at, i.restartable, i.not_before, i.held_by, i.max_wait_ns,
	i.priority, i.gang_id, i.gang_name, i.gang_size, i.gang_rank, i.gang_max_wait_ns,
	(SELECT group_concat(a.gpu_index) FROM instance_allocations a WHERE a.instance_id = i.id AND a.attempt = i.attempt)`

type scanner interface{ Scan(dest ...any) error }

func scanInstance(sc scanner) (*Instance, error) {
	var (
		in                                  Instance
		status, policy, labels, env, reqIdx string
		exclusive, daemon, restartable      int64
		exitCode, port, created, queued     sql.NullInt64
		assigned, started, ended, cancelAt  sql.NullInt64
		notBefore                           sql.NullInt64
		grace, maxWait, gangWait            int64
		gpuList                             sql.NullString
	)
	err := sc.Scan(&in.ID, &in.Name, &in.Command, &status, &in.Attempt, &in.AssignedWorker, &in.Pool,
		&in.Requests.MilliCPU, &in.Requests.Memory, &in.Requests.GPUs, &exclusive, &daemon, &labels, &env,
		&in.TargetWorker, &reqIdx, &in.Venv, &exitCode, &port, &in.Endpoint, &in.FailureReason, &policy,
		&in.MaxRestarts, &in.Restarts, &grace, &in.CancelGen, &created, &queued, &assigned,
		&started, &ended, &cancelAt, &restartable, &notBefore, &in.HeldBy, &maxWait,
		&in.Priority, &in.GangID, &in.GangName, &in.GangSize, &in.GangRank, &gangWait, &gpuList)
	if err != nil {
		return nil, err
	}
	in.Status = Status(status)
	in.RestartPolicy = RestartPolicy(policy)
	in.Exclusive = exclusive != 0
	in.Daemon = daemon != 0
	in.Restartable = restartable != 0
	in.ExitCode = intPtr(exitCode)
	in.Port = intPtr(port)
	in.GracePeriod = time.Duration(grace)
	in.MaxWait = time.Duration(maxWait)
	in.GangMaxWait = time.Duration(gangWait)
	in.CreatedAt, in.QueuedAt = fromTS(created), fromTS(queued)
	in.AssignedAt, in.StartedAt, in.EndedAt = fromTS(assigned), fromTS(started), fromTS(ended)
	in.CancelRequestedAt = fromTS(cancelAt)
	in.NotBefore = fromTS(notBefore)
	if in.Labels, err = decodeMap(labels, "labels"); err != nil {
		return nil, err
	}
	if in.Env, err = decodeMap(env, "env"); err != nil {
		return nil, err
	}
	if in.RequestedGPUIndices, err = decodeInts(reqIdx, "requested_gpu_indices"); err != nil {
		return nil, err
	}
	if in.GPUIndices, err = parseIndexList(gpuList); err != nil {
		return nil, err
	}
	return &in, nil
}

func isUniqueName(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: instances.name")
}

const (
	insertInstanceSQL = `INSERT INTO instances (id, name, command, status, pool, cpu_milli,
		memory_bytes, gpus, exclusive, daemon, labels, env, target_worker, requested_gpu_indices, venv,
		restart_policy, max_restarts, created_at, queued_at, restartable, max_wait_ns,
		priority, gang_id, gang_name, gang_size, gang_rank, gang_max_wait_ns)
		VALUES (?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertLabelSQL = `INSERT INTO instance_labels (instance_id, key, value) VALUES (?, ?, ?)`
)

// InsertInstances adds new PENDING instances in one transaction: all or
// none. Each needs ID, Name and Command; CreatedAt and QueuedAt default to
// now. A duplicate name fails the whole batch with a *NameTakenError.
func (s *Store) InsertInstances(ctx context.Context, ins []Instance, now time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert instances: begin: %w", err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, s.insertInstance)
	defer stmt.Close()
	lstmt := tx.StmtContext(ctx, s.insertLabel)
	defer lstmt.Close()
	for i := range ins {
		in := &ins[i]
		if in.ID == "" || in.Name == "" || in.Command == "" {
			return fmt.Errorf("insert instance %d: id, name and command are required", i)
		}
		policy := in.RestartPolicy
		if policy == "" {
			policy = RestartNever
		}
		if !policy.Valid() {
			return fmt.Errorf("insert instance %s: restart_policy %q is not never, on-failure or always", in.ID, policy)
		}
		labels, err := encodeMap(in.Labels)
		if err != nil {
			return fmt.Errorf("insert instance %s: labels: %w", in.ID, err)
		}
		env, err := encodeMap(in.Env)
		if err != nil {
			return fmt.Errorf("insert instance %s: env: %w", in.ID, err)
		}
		created := in.CreatedAt
		if created.IsZero() {
			created = now
		}
		queued := in.QueuedAt
		if queued.IsZero() {
			queued = created
		}
		_, err = stmt.ExecContext(ctx, in.ID, in.Name, in.Command, in.Pool, in.Requests.MilliCPU,
			in.Requests.Memory, in.Requests.GPUs, b2i(in.Exclusive), b2i(in.Daemon), labels, env,
			in.TargetWorker, encodeInts(in.RequestedGPUIndices), in.Venv, string(policy), in.MaxRestarts,
			created.UnixNano(), queued.UnixNano(), b2i(in.Restartable), int64(in.MaxWait),
			in.Priority, in.GangID, in.GangName, in.GangSize, in.GangRank, int64(in.GangMaxWait))
		if isUniqueName(err) {
			return &NameTakenError{Name: in.Name}
		}
		if err != nil {
			return fmt.Errorf("insert instance %s: %w", in.ID, err)
		}
		for k, v := range in.Labels {
			if _, err := lstmt.ExecContext(ctx, in.ID, k, v); err != nil {
				return fmt.Errorf("insert instance %s: label %q: %w", in.ID, k, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert instances: commit: %w", err)
	}
	return nil
}

// GetInstance returns the instance with the given id, or ErrNotFound.
func (s *Store) GetInstance(ctx context.Context, id string) (*Instance, error) {
	in, err := scanInstance(s.r.QueryRowContext(ctx, `SELECT `+instanceCols+` FROM instances i WHERE i.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("instance %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get instance %s: %w", id, err)
	}
	return in, nil
}

// GetInstanceByName returns the instance with the given name, or ErrNotFound.
func (s *Store) GetInstanceByName(ctx context.Context, name string) (*Instance, error) {
	in, err := scanInstance(s.r.QueryRowContext(ctx, `SELECT `+instanceCols+` FROM instances i WHERE i.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("instance named %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get instance named %q: %w", name, err)
	}
	return in, nil
}

// Filter selects instances in ListInstances. Zero fields match everything;
// every label must match (AND).
type Filter struct {
	Status Status
	Labels map[string]string
	Pool   *string
	// Gang, when set, keeps the instances of that gang (Instance.GangID).
	Gang  string
	Limit int
}

// instanceWhere is the WHERE clause (with its leading " WHERE ", or "")
// and arguments selecting f's instances.
func instanceWhere(f Filter) (string, []any) {
	var (
		where []string
		args  []any
	)
	if f.Status != "" {
		where = append(where, "i.status = ?")
		args = append(args, string(f.Status))
	}
	if f.Pool != nil {
		where = append(where, "i.pool = ?")
		args = append(args, *f.Pool)
	}
	if f.Gang != "" {
		where = append(where, "i.gang_id = ?")
		args = append(args, f.Gang)
	}
	for k, v := range f.Labels {
		where = append(where, "EXISTS (SELECT 1 FROM instance_labels l WHERE l.instance_id = i.id AND l.key = ? AND l.value = ?)")
		args = append(args, k, v)
	}
	if len(where) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

// CountInstances returns how many instances match f (its Limit aside).
func (s *Store) CountInstances(ctx context.Context, f Filter) (int, error) {
	where, args := instanceWhere(f)
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM instances i`+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count instances: %w", err)
	}
	return n, nil
}

// ListInstances returns the matching instances, newest first (PyLet's order),
// at most f.Limit of them when it is positive. Label keys and values are
// bound as parameters, never interpolated.
func (s *Store) ListInstances(ctx context.Context, f Filter) ([]*Instance, error) {
	where, args := instanceWhere(f)
	q := `SELECT ` + instanceCols + ` FROM instances i` + where
	q += " ORDER BY i.created_at DESC, i.id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []*Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return out, nil
}

// DeleteInstance removes a terminal instance (and its labels and
// allocations). It returns ErrNotFound or ErrNotTerminal otherwise.
func (s *Store) DeleteInstance(ctx context.Context, id string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete instance %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM instances WHERE id = ? AND status IN ('COMPLETED','FAILED','CANCELLED')`, id)
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var st string
		err := tx.QueryRowContext(ctx, `SELECT status FROM instances WHERE id = ?`, id).Scan(&st)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delete instance %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("delete instance %s: %w", id, err)
		}
		return fmt.Errorf("delete instance %s: status %s: %w", id, st, ErrNotTerminal)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete instance %s: commit: %w", id, err)
	}
	return nil
}

// DeleteTerminalInstances removes every terminal instance, or only those in
// status when it is set (it must then be terminal). It returns their ids.
func (s *Store) DeleteTerminalInstances(ctx context.Context, status Status) ([]string, error) {
	if status != "" && !status.Terminal() {
		return nil, fmt.Errorf("delete instances: status %s: %w", status, ErrNotTerminal)
	}
	q := `DELETE FROM instances WHERE status IN ('COMPLETED','FAILED','CANCELLED') AND (? = '' OR status = ?) RETURNING id`
	rows, err := s.w.QueryContext(ctx, q, string(status), string(status))
	if err != nil {
		return nil, fmt.Errorf("delete instances: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("delete instances: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("delete instances: %w", err)
	}
	return ids, nil
}

// restartExpr is true when the attempt that just ended must be queued again.
// :failure says whether the attempt failed (or was lost).
const restartExpr = `(cancel_requested_at IS NULL AND restarts < max_restarts AND
	(restart_policy = 'always' OR (restart_policy = 'on-failure' AND :failure)))`

// finishSQL ends the current attempt: final status (an SQL expression), or
// PENDING when the restart policy asks for it. Guarded by id, attempt,
// assigned worker and the allowed current statuses.
func finishSQL(finalExpr, reasonExpr, allowed string) string {
	return `UPDATE instances SET
	status = CASE WHEN ` + restartExpr + ` THEN 'PENDING' ELSE ` + finalExpr + ` END,
	failure_reason = ` + reasonExpr + `,
	exit_code = :exit,
	last_report_at = :now,
	restarts = restarts + CASE WHEN ` + restartExpr + ` THEN 1 ELSE 0 END,
	queued_at = CASE WHEN ` + restartExpr + ` THEN :now ELSE queued_at END,
	assigned_worker = CASE WHEN ` + restartExpr + ` THEN NULL ELSE assigned_worker END,
	ended_at = CASE WHEN ` + restartExpr + ` THEN NULL ELSE :now END
	WHERE id = :id AND attempt = :attempt AND assigned_worker = :worker AND status IN (` + allowed + `)
	RETURNING status`
}

var (
	finishCompleted = finishSQL(`'COMPLETED'`, `''`, `'ASSIGNED','RUNNING','UNKNOWN'`)
	finishFailed    = finishSQL(`'FAILED'`, `:reason`, `'ASSIGNED','RUNNING','UNKNOWN'`)
	finishCancelled = finishSQL(`CASE WHEN cancel_requested_at IS NOT NULL THEN 'CANCELLED' ELSE 'FAILED' END`,
		`CASE WHEN cancel_requested_at IS NOT NULL THEN '' ELSE :reason END`, `'ASSIGNED','RUNNING','UNKNOWN'`)
)

// lateCompletedSQL accepts a COMPLETED report of attempt :attempt from
// :worker for an instance requeued from that worker and not placed since:
// PENDING at that very attempt (Assign increments it, so no later attempt
// has begun), held by :worker (the worker it was requeued from with a
// fence hold; only an assignment or a confirmed deletion clears held_by),
// not assigned, no cancel requested. The attempt finished, so the instance
// ends COMPLETED as if the report had come in time: the restart the
// requeue counted is taken back, the hold cleared, and the worker recorded
// again as the one that ran it. A restart-always instance is left alone:
// its completion would have requeued it anyway. One UPDATE in the
// heartbeat's transaction, so Assign (which needs PENDING) cannot place it
// in between.
const lateCompletedSQL = `UPDATE instances SET status = 'COMPLETED', exit_code = :exit, failure_reason = '',
	last_report_at = :now, ended_at = :now, restarts = restarts - 1, assigned_worker = :worker,
	not_before = NULL, held_by = ''
	WHERE id = :id AND attempt = :attempt AND status = 'PENDING' AND held_by = :worker AND held_by != ''
	AND assigned_worker IS NULL AND cancel_requested_at IS NULL AND restart_policy != 'always' AND restarts > 0
	AND (:exit IS NULL OR :exit = 0)
	RETURNING status, pool`

// lateAttemptSQL ends the attempt record of a late completion: it ended
// LOST at the requeue, and the attempts_progress trigger updates open
// records only.
const lateAttemptSQL = `UPDATE attempts SET status = 'COMPLETED', ended_at = :now, exit_code = :exit, reason = ''
	WHERE instance_id = :id AND attempt = :attempt`

const runningSQL = `UPDATE instances SET status = 'RUNNING', port = :port, endpoint = :endpoint, failure_reason = '',
	started_at = COALESCE(started_at, :now), last_report_at = :now
	WHERE id = :id AND attempt = :attempt AND assigned_worker = :worker AND status IN ('ASSIGNED','UNKNOWN')
	RETURNING status, pool, queued_at, started_at`

// HeartbeatInput is what a worker's heartbeat carries, already authenticated.
type HeartbeatInput struct {
	WorkerID string
	BootID   string
	// SeenGen is the worker's last seen generation of this head epoch, or
	// -1 when the worker's generation belongs to another epoch.
	SeenGen int64
	Reports []Report
}

// HeartbeatResult says what a heartbeat changed.
type HeartbeatResult struct {
	// Changed counts instances whose status changed.
	Changed int
	// Requeued counts instances put back to PENDING by their restart policy.
	Requeued int
	// Freed counts instances that released their resources.
	Freed int
	// Started lists the attempts that this heartbeat showed RUNNING for the
	// first time.
	Started []Started
	// Late lists the late completions this heartbeat accepted: COMPLETED
	// reports of attempts whose instance had been requeued from this worker
	// and not placed since (see lateCompletedSQL). They count in Changed and
	// Freed too.
	Late []LateCompletion
}

// LateCompletion is a COMPLETED report accepted from the worker an
// instance had been requeued from (OFFLINE or removed) before any new
// attempt began: the instance ended COMPLETED instead of running again.
type LateCompletion struct {
	InstanceID string
	Attempt    int64
	Pool       string
}

// Started is an attempt seen RUNNING for the first time.
type Started struct {
	InstanceID string
	Pool       string
	// Wait is from when the instance (last) became PENDING, its creation
	// for a first attempt, to its first RUNNING report.
	Wait time.Duration
}

// ApplyHeartbeat records a heartbeat in one transaction: the worker becomes
// ONLINE, each report is applied with attempt fencing, and cancelled
// instances the worker has provably never started (it has seen the
// generation that dropped them and does not report them) become CANCELLED.
// If anything changed, the worker's generation is bumped. ErrNotFound when
// the worker is unknown.
func (s *Store) ApplyHeartbeat(ctx context.Context, in HeartbeatInput, now time.Time) (HeartbeatResult, error) {
	var res HeartbeatResult
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("heartbeat %s: begin: %w", in.WorkerID, err)
	}
	defer tx.Rollback()
	var host string
	err = tx.QueryRowContext(ctx, `UPDATE workers SET status = 'ONLINE', last_heartbeat_at = ?, boot_id = ?
		WHERE id = ? RETURNING host`, now.UnixNano(), in.BootID, in.WorkerID).Scan(&host)
	if errors.Is(err, sql.ErrNoRows) {
		return res, fmt.Errorf("heartbeat %s: worker: %w", in.WorkerID, ErrNotFound)
	}
	if err != nil {
		return res, fmt.Errorf("heartbeat %s: %w", in.WorkerID, err)
	}
	reported := make([]string, 0, len(in.Reports))
	for _, r := range in.Reports {
		reported = append(reported, r.InstanceID)
		st, started, err := applyReport(ctx, tx, in.WorkerID, host, r, now)
		if err != nil {
			return res, fmt.Errorf("heartbeat %s: %w", in.WorkerID, err)
		}
		if st == "" && r.Status == ReportCompleted {
			var late *LateCompletion
			if late, err = applyLateCompletion(ctx, tx, in.WorkerID, r, now); err != nil {
				return res, fmt.Errorf("heartbeat %s: %w", in.WorkerID, err)
			}
			if late != nil {
				res.Late = append(res.Late, *late)
				st = StatusCompleted
			}
		}
		if st == "" {
			continue
		}
		if started != nil {
			res.Started = append(res.Started, *started)
		}
		res.Changed++
		if st == StatusPending {
			res.Requeued++
		}
		if st != StatusRunning {
			res.Freed++
		}
	}
	if in.SeenGen >= 0 {
		args := []any{now.UnixNano(), now.UnixNano(), in.WorkerID, in.SeenGen}
		for _, id := range reported {
			args = append(args, id)
		}
		q := `UPDATE instances SET status = 'CANCELLED', ended_at = ?, last_report_at = ?
			WHERE assigned_worker = ? AND status IN ('ASSIGNED','RUNNING','UNKNOWN')
			AND cancel_requested_at IS NOT NULL AND cancel_gen > 0 AND cancel_gen <= ?`
		if len(reported) > 0 {
			q += ` AND id NOT IN (` + inList(len(reported)) + `)`
		}
		r, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return res, fmt.Errorf("heartbeat %s: finish unconfirmed cancels: %w", in.WorkerID, err)
		}
		n, _ := r.RowsAffected()
		res.Changed += int(n)
		res.Freed += int(n)
	}
	if res.Changed > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ?`, in.WorkerID); err != nil {
			return res, fmt.Errorf("heartbeat %s: bump generation: %w", in.WorkerID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("heartbeat %s: commit: %w", in.WorkerID, err)
	}
	return res, nil
}

// applyReport applies one report; it returns the new status, or "" when the
// report was fenced off (stale attempt, other worker, wrong state) or
// ignored, and the first start of an attempt, if this report is it.
func applyReport(ctx context.Context, tx *sql.Tx, worker, host string, r Report, now time.Time) (Status, *Started, error) {
	args := []any{
		sql.Named("id", r.InstanceID), sql.Named("attempt", r.Attempt), sql.Named("worker", worker),
		sql.Named("now", now.UnixNano()),
	}
	var q string
	switch r.Status {
	case ReportRunning:
		if r.Port != nil {
			args = append(args, sql.Named("port", int64(*r.Port)), sql.Named("endpoint", joinHostPort(host, *r.Port)))
		} else {
			args = append(args, sql.Named("port", nil), sql.Named("endpoint", ""))
		}
		q = runningSQL
	case ReportCompleted:
		q = finishCompleted
		args = append(args, sql.Named("failure", 0), sql.Named("exit", nullInt(r.ExitCode)))
	case ReportFailed:
		q = finishFailed
		args = append(args, sql.Named("failure", 1), sql.Named("exit", nullInt(r.ExitCode)), sql.Named("reason", r.FailureReason))
	case ReportCancelled:
		q = finishCancelled
		args = append(args, sql.Named("failure", 1), sql.Named("exit", nullInt(r.ExitCode)),
			sql.Named("reason", ReasonKilledByWorker))
	case ReportNotFound:
		q = finishCancelled
		args = append(args, sql.Named("failure", 1), sql.Named("exit", nil), sql.Named("reason", ReasonLostAfterRejoin))
	default: // STOPPING and anything unknown change nothing
		return "", nil, nil
	}
	var (
		st              string
		pool            string
		queued, started sql.NullInt64
		err             error
	)
	if q == runningSQL {
		err = tx.QueryRowContext(ctx, q, args...).Scan(&st, &pool, &queued, &started)
	} else {
		err = tx.QueryRowContext(ctx, q, args...).Scan(&st)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("apply report %s@%d %s: %w", r.InstanceID, r.Attempt, r.Status, err)
	}
	// started_at keeps the first RUNNING report of an attempt (Assign
	// clears it), so it equals now only for this report's first start.
	if started.Valid && started.Int64 == now.UnixNano() && queued.Valid {
		return Status(st), &Started{InstanceID: r.InstanceID, Pool: pool,
			Wait: max(time.Duration(started.Int64-queued.Int64), 0)}, nil
	}
	return Status(st), nil, nil
}

// applyLateCompletion applies a COMPLETED report that applyReport fenced
// off when it is a late completion (lateCompletedSQL); nil otherwise.
func applyLateCompletion(ctx context.Context, tx *sql.Tx, worker string, r Report, now time.Time) (*LateCompletion, error) {
	args := []any{sql.Named("id", r.InstanceID), sql.Named("attempt", r.Attempt), sql.Named("worker", worker),
		sql.Named("now", now.UnixNano()), sql.Named("exit", nullInt(r.ExitCode))}
	var st, pool string
	err := tx.QueryRowContext(ctx, lateCompletedSQL, args...).Scan(&st, &pool)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("late completion %s@%d: %w", r.InstanceID, r.Attempt, err)
	}
	if _, err := tx.ExecContext(ctx, lateAttemptSQL, args...); err != nil {
		return nil, fmt.Errorf("late completion %s@%d: attempt: %w", r.InstanceID, r.Attempt, err)
	}
	return &LateCompletion{InstanceID: r.InstanceID, Attempt: r.Attempt, Pool: pool}, nil
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// Assign applies placements in one transaction. Each is one conditional
// UPDATE: it applies only if the instance is still PENDING at the given
// attempt with no cancel requested, and the worker is ONLINE and not
// cordoned. It increments the attempt, records the GPU allocation, and bumps
// the generation of every worker that got work. It returns the placements
// that applied.
func (s *Store) Assign(ctx context.Context, as []Assignment, now time.Time) ([]Assignment, error) {
	if len(as) == 0 {
		return nil, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("assign: begin: %w", err)
	}
	defer tx.Rollback()
	up, err := tx.PrepareContext(ctx, `UPDATE instances SET status = 'ASSIGNED', attempt = attempt + 1,
		assigned_worker = :worker, assigned_at = :now, port = NULL, endpoint = '', exit_code = NULL,
		failure_reason = '', started_at = NULL, ended_at = NULL, not_before = NULL, held_by = ''
		WHERE id = :id AND status = 'PENDING' AND attempt = :attempt AND cancel_requested_at IS NULL
		AND (not_before IS NULL OR not_before <= :now)
		AND EXISTS (SELECT 1 FROM workers w WHERE w.id = :worker AND w.status = 'ONLINE')
		AND NOT EXISTS (SELECT 1 FROM cordons c WHERE c.worker_id = :worker)
		RETURNING attempt`)
	if err != nil {
		return nil, fmt.Errorf("assign: prepare: %w", err)
	}
	defer up.Close()
	alloc, err := tx.PrepareContext(ctx, `INSERT INTO instance_allocations (instance_id, attempt, worker_id, gpu_index, exclusive)
		VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, fmt.Errorf("assign: prepare allocation: %w", err)
	}
	defer alloc.Close()
	applied := make([]Assignment, 0, len(as))
	workers := map[string]bool{}
	for _, a := range as {
		var attempt int64
		err := up.QueryRowContext(ctx, sql.Named("worker", a.Worker), sql.Named("now", now.UnixNano()),
			sql.Named("id", a.InstanceID), sql.Named("attempt", a.Attempt)).Scan(&attempt)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("assign %s to %s: %w", a.InstanceID, a.Worker, err)
		}
		for _, g := range a.GPUIndices {
			if _, err := alloc.ExecContext(ctx, a.InstanceID, attempt, a.Worker, g, b2i(a.Exclusive)); err != nil {
				return nil, fmt.Errorf("assign %s to %s: gpu %d: %w", a.InstanceID, a.Worker, g, err)
			}
		}
		a.Attempt = attempt
		applied = append(applied, a)
		workers[a.Worker] = true
	}
	for w := range workers {
		if _, err := tx.ExecContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ?`, w); err != nil {
			return nil, fmt.Errorf("assign: bump generation of %s: %w", w, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("assign: commit: %w", err)
	}
	return applied, nil
}

// CancelOutcome says what RequestCancel did.
type CancelOutcome int

// Cancel outcomes.
const (
	// CancelDone: the instance was PENDING or UNKNOWN and is now CANCELLED.
	CancelDone CancelOutcome = iota + 1
	// CancelRequested: the worker was told to stop it.
	CancelRequested
	// CancelAlreadyRequested: a cancel was already in progress.
	CancelAlreadyRequested
	// CancelTerminal: the instance had already ended.
	CancelTerminal
)

// CancelResult is RequestCancel's answer.
type CancelResult struct {
	Outcome CancelOutcome
	// Status is the instance's status after the call.
	Status Status
	// Worker is the worker whose desired set changed, if any.
	Worker string
}

// RequestCancel cancels an instance. PENDING and UNKNOWN instances (no
// worker can be running them under this attempt's authority) become
// CANCELLED at once. ASSIGNED and RUNNING ones get cancel_requested_at and
// the grace period, and leave the worker's desired set (its generation is
// bumped); they become CANCELLED when the worker reports the stop, when it
// shows it never started them, or when it goes offline. ErrNotFound if the
// id is unknown.
func (s *Store) RequestCancel(ctx context.Context, id string, grace time.Duration, now time.Time) (CancelResult, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return CancelResult{}, fmt.Errorf("cancel %s: begin: %w", id, err)
	}
	defer tx.Rollback()
	var worker sql.NullString
	err = tx.QueryRowContext(ctx, `UPDATE instances SET status = 'CANCELLED', failure_reason = '',
		cancel_requested_at = COALESCE(cancel_requested_at, :now), ended_at = :now, grace_period_ns = :grace
		WHERE id = :id AND status IN ('PENDING','UNKNOWN') RETURNING assigned_worker`,
		sql.Named("now", now.UnixNano()), sql.Named("grace", int64(grace)), sql.Named("id", id)).Scan(&worker)
	switch {
	case err == nil:
		if worker.Valid {
			if _, err := tx.ExecContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ?`, worker.String); err != nil {
				return CancelResult{}, fmt.Errorf("cancel %s: bump generation: %w", id, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return CancelResult{}, fmt.Errorf("cancel %s: commit: %w", id, err)
		}
		return CancelResult{Outcome: CancelDone, Status: StatusCancelled, Worker: worker.String}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return CancelResult{}, fmt.Errorf("cancel %s: %w", id, err)
	}
	var st string
	err = tx.QueryRowContext(ctx, `UPDATE instances SET cancel_requested_at = :now, grace_period_ns = :grace
		WHERE id = :id AND status IN ('ASSIGNED','RUNNING') AND cancel_requested_at IS NULL
		RETURNING assigned_worker, status`,
		sql.Named("now", now.UnixNano()), sql.Named("grace", int64(grace)), sql.Named("id", id)).Scan(&worker, &st)
	switch {
	case err == nil:
		var gen int64
		if err := tx.QueryRowContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ? RETURNING generation`,
			worker.String).Scan(&gen); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return CancelResult{}, fmt.Errorf("cancel %s: bump generation: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE instances SET cancel_gen = ? WHERE id = ?`, gen, id); err != nil {
			return CancelResult{}, fmt.Errorf("cancel %s: record generation: %w", id, err)
		}
		if err := tx.Commit(); err != nil {
			return CancelResult{}, fmt.Errorf("cancel %s: commit: %w", id, err)
		}
		return CancelResult{Outcome: CancelRequested, Status: Status(st), Worker: worker.String}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return CancelResult{}, fmt.Errorf("cancel %s: %w", id, err)
	}
	err = tx.QueryRowContext(ctx, `SELECT status FROM instances WHERE id = ?`, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return CancelResult{}, fmt.Errorf("cancel %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return CancelResult{}, fmt.Errorf("cancel %s: %w", id, err)
	}
	if Status(st).Terminal() {
		return CancelResult{Outcome: CancelTerminal, Status: Status(st)}, nil
	}
	return CancelResult{Outcome: CancelAlreadyRequested, Status: Status(st)}, nil
}

// FailPending ends FAILED, with reason, those of ids that are still
// PENDING (waiting for a worker): a deadline such as max_wait gave up on
// them. Instances in any other status (assigned, running, ended) and
// unknown ids are left alone, so a deadline never fails work that started.
// The call is one transaction: all the PENDING ones fail or none does. It
// returns the ids it failed, in the order given.
func (s *Store) FailPending(ctx context.Context, ids []string, reason string, now time.Time) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("fail pending: begin: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `UPDATE instances SET status = 'FAILED', failure_reason = :reason,
		ended_at = :now WHERE id = :id AND status = 'PENDING' RETURNING assigned_worker`)
	if err != nil {
		return nil, fmt.Errorf("fail pending: prepare: %w", err)
	}
	defer stmt.Close()
	var failed []string
	for _, id := range ids {
		var worker sql.NullString
		err := stmt.QueryRowContext(ctx, sql.Named("reason", reason), sql.Named("now", now.UnixNano()),
			sql.Named("id", id)).Scan(&worker)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fail pending %s: %w", id, err)
		}
		if worker.Valid {
			if _, err := tx.ExecContext(ctx, `UPDATE workers SET generation = generation + 1 WHERE id = ?`, worker.String); err != nil {
				return nil, fmt.Errorf("fail pending %s: bump generation: %w", id, err)
			}
		}
		failed = append(failed, id)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("fail pending: commit: %w", err)
	}
	return failed, nil
}
