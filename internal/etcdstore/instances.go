package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/store"
)

func decodeInstance(b []byte) (*store.Instance, error) {
	var in store.Instance
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("decode instance: %w", err)
	}
	if in.Labels == nil {
		in.Labels = map[string]string{}
	}
	if in.Env == nil {
		in.Env = map[string]string{}
	}
	return &in, nil
}

// getInstance reads one instance; nil when absent.
func (t *txn) getInstance(id string) (*store.Instance, error) {
	b, err := t.get(t.s.kInstance(id))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeInstance(b)
}

// putInstance writes in and keeps the worker index (placed/) in step with
// the change from old (nil for a new instance).
func (t *txn) putInstance(old, in *store.Instance) error {
	if err := t.putJSON(t.s.kInstance(in.ID), in); err != nil {
		return err
	}
	if err := t.recordAttempt(old, in); err != nil {
		return err
	}
	var oldKey, newKey string
	if old != nil && old.Status.Active() && old.AssignedWorker != "" {
		oldKey = t.s.kPlaced(old.AssignedWorker, old.ID)
	}
	if in.Status.Active() && in.AssignedWorker != "" {
		newKey = t.s.kPlaced(in.AssignedWorker, in.ID)
	}
	if oldKey != "" && oldKey != newKey {
		t.del(oldKey)
	}
	if newKey != "" && (oldKey != newKey || old.Attempt != in.Attempt) {
		// The value is the attempt placed there (etcd returns an empty
		// value as none, so the key must hold something).
		t.put(newKey, []byte(strconv.FormatInt(in.Attempt, 10)))
	}
	return nil
}

func clone(in *store.Instance) *store.Instance {
	c := *in
	return &c
}

// InsertInstances adds new PENDING instances. Each needs ID, Name and
// Command; CreatedAt and QueuedAt default to now. A duplicate name fails
// with a *store.NameTakenError. Up to MaxInsertBatch instances commit in one
// transaction, all or none; a larger call commits in chunks of that size,
// each all or none.
func (s *Store) InsertInstances(ctx context.Context, ins []store.Instance, now time.Time) error {
	recs := make([]*store.Instance, len(ins))
	names := make(map[string]bool, len(ins))
	for i := range ins {
		in := ins[i]
		if in.ID == "" || in.Name == "" || in.Command == "" {
			return fmt.Errorf("insert instance %d: id, name and command are required", i)
		}
		if in.RestartPolicy == "" {
			in.RestartPolicy = store.RestartNever
		}
		if !in.RestartPolicy.Valid() {
			return fmt.Errorf("insert instance %s: restart_policy %q is not never, on-failure or always", in.ID, in.RestartPolicy)
		}
		if names[in.Name] {
			return &store.NameTakenError{Name: in.Name}
		}
		names[in.Name] = true
		if in.CreatedAt.IsZero() {
			in.CreatedAt = now
		}
		if in.QueuedAt.IsZero() {
			in.QueuedAt = in.CreatedAt
		}
		in.CreatedAt, in.QueuedAt = in.CreatedAt.UTC(), in.QueuedAt.UTC()
		in.Status, in.Attempt, in.AssignedWorker = store.StatusPending, 0, ""
		in.GPUIndices, in.ExitCode, in.Port, in.Endpoint, in.FailureReason = nil, nil, nil, "", ""
		in.Restarts, in.GracePeriod, in.CancelGen = 0, 0, 0
		in.AssignedAt, in.StartedAt, in.EndedAt, in.CancelRequestedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		in.Labels, in.Env = nonNil(in.Labels), nonNil(in.Env)
		recs[i] = &in
	}
	for len(recs) > 0 {
		n := min(len(recs), s.MaxInsertBatch())
		if err := s.insertChunk(ctx, recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (s *Store) insertChunk(ctx context.Context, recs []*store.Instance) error {
	cmps := make([]clientv3.Cmp, 0, 2*len(recs))
	ops := make([]clientv3.Op, 0, 2*len(recs))
	for _, in := range recs {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("insert instance %s: %w", in.ID, err)
		}
		ki, kn := s.kInstance(in.ID), s.kName(in.Name)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(kn), "=", 0))
		ops = append(ops, clientv3.OpPut(ki, string(b)), clientv3.OpPut(kn, in.ID))
	}
	// The instance keys are compared too when the batch leaves room: a
	// reused id is refused, as the SQLite primary key refuses it.
	if 2*len(recs) <= s.maxOps {
		for _, in := range recs {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.kInstance(in.ID)), "=", 0))
		}
	}
	resp, err := s.commitInsert(ctx, recs[0].ID, cmps, ops)
	if err != nil {
		return fmt.Errorf("insert instances: %w", unavailable(err))
	}
	if resp == nil || resp.Succeeded {
		return nil
	}
	// Say which name (or id) was taken.
	t := s.snapshot(ctx)
	for _, in := range recs {
		b, err := t.get(s.kName(in.Name))
		if err != nil {
			return fmt.Errorf("insert instances: %w", err)
		}
		if b != nil {
			return &store.NameTakenError{Name: in.Name}
		}
	}
	for _, in := range recs {
		b, err := t.get(s.kInstance(in.ID))
		if err != nil {
			return fmt.Errorf("insert instances: %w", err)
		}
		if b != nil {
			return fmt.Errorf("insert instance %s: id already exists: %w", in.ID, store.ErrConflict)
		}
	}
	return fmt.Errorf("insert instances: %w", store.ErrConflict)
}

// commitInsert commits an insert within the store's request timeout,
// trying again once when the first half of it passes without an answer (a
// member killed under the client's connection, or a leader election, drops
// the request; the retry goes to the cluster as it is then). The ids are
// new, so the first record's key says whether the try that did not answer
// was applied (the transaction is all or none). It returns nil, nil when
// that earlier try was. Without quorum it fails after the timeout, as every
// other request does.
func (s *Store) commitInsert(ctx context.Context, firstID string, cmps []clientv3.Cmp, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	budget, cancel := s.ctx(ctx)
	defer cancel()
	first, cancelFirst := context.WithTimeout(budget, s.timeout/2)
	resp, err := s.cli.Txn(first).If(cmps...).Then(ops...).Commit()
	cancelFirst()
	if err == nil || budget.Err() != nil {
		return resp, err
	}
	got, gerr := s.cli.Get(budget, s.kInstance(firstID), clientv3.WithCountOnly())
	if gerr != nil {
		return nil, err
	}
	if got.Count > 0 {
		return nil, nil
	}
	return s.cli.Txn(budget).If(cmps...).Then(ops...).Commit()
}

// GetInstance returns the instance with the given id, or store.ErrNotFound.
func (s *Store) GetInstance(ctx context.Context, id string) (*store.Instance, error) {
	in, err := s.snapshot(ctx).getInstance(id)
	if err != nil {
		return nil, fmt.Errorf("get instance %s: %w", id, err)
	}
	if in == nil {
		return nil, fmt.Errorf("instance %s: %w", id, store.ErrNotFound)
	}
	return in, nil
}

// GetInstanceByName returns the instance with the given name, or
// store.ErrNotFound.
func (s *Store) GetInstanceByName(ctx context.Context, name string) (*store.Instance, error) {
	t := s.snapshot(ctx)
	id, err := t.get(s.kName(name))
	if err != nil {
		return nil, fmt.Errorf("get instance named %q: %w", name, err)
	}
	var in *store.Instance
	if id != nil {
		if in, err = t.getInstance(string(id)); err != nil {
			return nil, fmt.Errorf("get instance named %q: %w", name, err)
		}
	}
	if in == nil {
		return nil, fmt.Errorf("instance named %q: %w", name, store.ErrNotFound)
	}
	return in, nil
}

// listInstances decodes every instance as t sees it.
func (t *txn) listInstances() ([]*store.Instance, error) {
	kvs, err := t.list(t.s.kInstances())
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, 0, len(kvs))
	for _, x := range kvs {
		in, err := decodeInstance(x.val)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.key, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// ListInstances returns the matching instances, newest first.
func (s *Store) ListInstances(ctx context.Context, f store.Filter) ([]*store.Instance, error) {
	all, err := s.snapshot(ctx).listInstances()
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out := all[:0]
	for _, in := range all {
		if f.Status != "" && in.Status != f.Status {
			continue
		}
		if f.Pool != nil && in.Pool != *f.Pool {
			continue
		}
		if f.Gang != "" && in.GangID != f.Gang {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if got, ok := in.Labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *store.Instance) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// deleteInstance removes a terminal instance with its name (in t).
func (t *txn) deleteInstance(in *store.Instance) {
	t.del(t.s.kInstance(in.ID))
	t.del(t.s.kName(in.Name))
	t.ranges = append(t.ranges, clientv3.OpDelete(t.s.kAttempts(in.ID), clientv3.WithPrefix()))
}

// DeleteInstance removes a terminal instance. It returns store.ErrNotFound
// or store.ErrNotTerminal otherwise.
func (s *Store) DeleteInstance(ctx context.Context, id string) error {
	return s.update(ctx, "delete instance "+id, func(t *txn) error {
		in, err := t.getInstance(id)
		if err != nil {
			return fmt.Errorf("delete instance %s: %w", id, err)
		}
		if in == nil {
			return fmt.Errorf("delete instance %s: %w", id, store.ErrNotFound)
		}
		if !in.Status.Terminal() {
			return fmt.Errorf("delete instance %s: status %s: %w", id, in.Status, store.ErrNotTerminal)
		}
		// The name key is compared too: it is read before it is deleted.
		if _, err := t.get(s.kName(in.Name)); err != nil {
			return err
		}
		t.deleteInstance(in)
		return nil
	})
}

// DeleteTerminalInstances removes every terminal instance, or only those in
// status when it is set (it must then be terminal), in transactions of at
// most MaxTxnOps/3 instances (three deletes each: record, name, history).
// It returns their ids.
func (s *Store) DeleteTerminalInstances(ctx context.Context, status store.Status) ([]string, error) {
	if status != "" && !status.Terminal() {
		return nil, fmt.Errorf("delete instances: status %s: %w", status, store.ErrNotTerminal)
	}
	all, err := s.snapshot(ctx).listInstances()
	if err != nil {
		return nil, fmt.Errorf("delete instances: %w", err)
	}
	var cand []string
	for _, in := range all {
		if in.Status.Terminal() && (status == "" || in.Status == status) {
			cand = append(cand, in.ID)
		}
	}
	var ids []string
	for len(cand) > 0 {
		n := min(len(cand), s.maxOps/3)
		chunk := cand[:n]
		cand = cand[n:]
		var done []string
		err := s.update(ctx, "delete instances", func(t *txn) error {
			done = done[:0]
			for _, id := range chunk {
				in, err := t.getInstance(id)
				if err != nil {
					return err
				}
				if in == nil || !in.Status.Terminal() || (status != "" && in.Status != status) {
					continue
				}
				t.deleteInstance(in)
				done = append(done, id)
			}
			return nil
		})
		if err != nil {
			return ids, err
		}
		ids = append(ids, done...)
	}
	return ids, nil
}

// restart reports whether the attempt that just ended is queued again.
func restart(in *store.Instance, failure bool) bool {
	return in.CancelRequestedAt.IsZero() && in.Restarts < in.MaxRestarts &&
		(in.RestartPolicy == store.RestartAlways || (in.RestartPolicy == store.RestartOnFailure && failure))
}

// finish ends the current attempt as the SQLite store's finishSQL does.
func finish(in *store.Instance, final store.Status, reason string, failure bool, exit *int, now time.Time) {
	if restart(in, failure) {
		in.Status = store.StatusPending
		in.Restarts++
		in.QueuedAt = now
		in.AssignedWorker = ""
		in.EndedAt = time.Time{}
	} else {
		in.Status = final
		in.EndedAt = now
	}
	in.FailureReason = reason
	in.ExitCode = exit
}

// applyReport applies one report in t; "" when fenced off or ignored.
func (t *txn) applyReport(worker, host string, r store.Report, now time.Time) (store.Status, *store.Started, error) {
	old, err := t.getInstance(r.InstanceID)
	if err != nil || old == nil {
		return "", nil, err
	}
	if old.Attempt != r.Attempt || old.AssignedWorker != worker {
		return "", nil, nil
	}
	in := clone(old)
	var started *store.Started
	switch r.Status {
	case store.ReportRunning:
		if in.Status != store.StatusAssigned && in.Status != store.StatusUnknown {
			return "", nil, nil
		}
		in.Status, in.FailureReason = store.StatusRunning, ""
		in.Port, in.Endpoint = nil, ""
		if r.Port != nil {
			p := *r.Port
			in.Port, in.Endpoint = &p, joinHostPort(host, p)
		}
		if in.StartedAt.IsZero() {
			in.StartedAt = now
			started = &store.Started{InstanceID: in.ID, Pool: in.Pool, Wait: max(now.Sub(in.QueuedAt), 0)}
		}
	case store.ReportCompleted, store.ReportFailed, store.ReportCancelled, store.ReportNotFound:
		if !in.Status.Active() {
			return "", nil, nil
		}
		switch r.Status {
		case store.ReportCompleted:
			finish(in, store.StatusCompleted, "", false, r.ExitCode, now)
		case store.ReportFailed:
			finish(in, store.StatusFailed, r.FailureReason, true, r.ExitCode, now)
		default:
			reason, exit := store.ReasonKilledByWorker, r.ExitCode
			if r.Status == store.ReportNotFound {
				reason, exit = store.ReasonLostAfterRejoin, nil
			}
			final := store.StatusFailed
			if !in.CancelRequestedAt.IsZero() {
				final, reason = store.StatusCancelled, ""
			}
			finish(in, final, reason, true, exit, now)
		}
	default:
		return "", nil, nil
	}
	if err := t.putInstance(old, in); err != nil {
		return "", nil, err
	}
	return in.Status, started, nil
}

// lateCompletion reports whether r is a late completion of old, as the
// SQLite store's lateCompletedSQL decides: a successful COMPLETED report
// of the very attempt old was requeued at, from the worker it was requeued
// from (HeldBy), old still PENDING, unassigned, not cancelled, not
// restart-always, its requeue counted in Restarts.
func lateCompletion(old *store.Instance, worker string, r store.Report) bool {
	return r.Status == store.ReportCompleted && (r.ExitCode == nil || *r.ExitCode == 0) &&
		old.Status == store.StatusPending && old.Attempt == r.Attempt && old.HeldBy != "" && old.HeldBy == worker &&
		old.AssignedWorker == "" && old.CancelRequestedAt.IsZero() && old.RestartPolicy != store.RestartAlways &&
		old.Restarts > 0
}

// applyLateCompletion ends old COMPLETED from worker's late report r (see
// lateCompletion) in t, with its attempt record: the instance key's
// revision is compared at commit, so an Assign that commits first makes
// this decide again (and find the instance placed), and one that commits
// after finds it COMPLETED.
func (t *txn) applyLateCompletion(old *store.Instance, worker string, r store.Report, now time.Time) (*store.LateCompletion, error) {
	in := clone(old)
	in.Status, in.ExitCode, in.FailureReason = store.StatusCompleted, r.ExitCode, ""
	in.EndedAt, in.Restarts, in.AssignedWorker = now, old.Restarts-1, worker
	in.NotBefore, in.HeldBy = time.Time{}, ""
	if err := t.putInstance(old, in); err != nil {
		return nil, err
	}
	k := t.s.kAttempt(in.ID, in.Attempt)
	var rec store.AttemptRecord
	ok, err := t.getJSON(k, &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		rec = store.AttemptRecord{Attempt: in.Attempt, Worker: worker, AssignedAt: old.AssignedAt, StartedAt: old.StartedAt}
	}
	rec.Status, rec.EndedAt, rec.ExitCode, rec.Reason = store.StatusCompleted, now, r.ExitCode, ""
	if err := t.putJSON(k, rec); err != nil {
		return nil, err
	}
	return &store.LateCompletion{InstanceID: in.ID, Attempt: in.Attempt, Pool: in.Pool}, nil
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// placedIDs lists the ids in a worker's index as t sees it.
func (t *txn) placedIDs(worker string) ([]string, error) {
	pre := t.s.kPlacedAll(worker)
	kvs, err := t.list(pre)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(kvs))
	for _, x := range kvs {
		ids = append(ids, strings.TrimPrefix(x.key, pre))
	}
	return ids, nil
}

// ApplyHeartbeat records a heartbeat in one transaction, as the SQLite
// store's ApplyHeartbeat does. store.ErrNotFound when the worker is unknown.
func (s *Store) ApplyHeartbeat(ctx context.Context, hb store.HeartbeatInput, now time.Time) (store.HeartbeatResult, error) {
	// A report changes up to three keys (record, placement, attempt): a
	// heartbeat with more reports than fit one transaction is applied in
	// chunks, each fenced per report as one would be, the unconfirmed
	// cancels (SeenGen) with the last.
	chunk := max(s.maxOps/4, 1)
	var total store.HeartbeatResult
	for len(hb.Reports) > chunk {
		part := hb
		part.Reports, part.SeenGen = hb.Reports[:chunk], -1
		res, err := s.applyHeartbeat(ctx, part, now)
		if err != nil {
			return store.HeartbeatResult{}, err
		}
		total = addResults(total, res)
		hb.Reports = hb.Reports[chunk:]
	}
	res, err := s.applyHeartbeat(ctx, hb, now)
	if err != nil {
		return store.HeartbeatResult{}, err
	}
	return addResults(total, res), nil
}

func addResults(a, b store.HeartbeatResult) store.HeartbeatResult {
	a.Changed += b.Changed
	a.Requeued += b.Requeued
	a.Freed += b.Freed
	a.Started = append(a.Started, b.Started...)
	a.Late = append(a.Late, b.Late...)
	return a
}

func (s *Store) applyHeartbeat(ctx context.Context, hb store.HeartbeatInput, now time.Time) (store.HeartbeatResult, error) {
	var res store.HeartbeatResult
	err := s.update(ctx, "heartbeat "+hb.WorkerID, func(t *txn) error {
		res = store.HeartbeatResult{}
		w, err := t.getWorker(hb.WorkerID)
		if err != nil {
			return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
		}
		if w == nil {
			return fmt.Errorf("heartbeat %s: worker: %w", hb.WorkerID, store.ErrNotFound)
		}
		w.Status, w.LastHeartbeatAt, w.BootID = store.WorkerOnline, now.UTC(), hb.BootID
		keys := make([]string, 0, len(hb.Reports))
		for _, r := range hb.Reports {
			keys = append(keys, s.kInstance(r.InstanceID))
		}
		if err := t.prefetch(keys...); err != nil {
			return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
		}
		reported := map[string]bool{}
		for _, r := range hb.Reports {
			reported[r.InstanceID] = true
			st, started, err := t.applyReport(hb.WorkerID, w.Host, r, now.UTC())
			if err != nil {
				return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
			}
			if st == "" && r.Status == store.ReportCompleted {
				old, err := t.getInstance(r.InstanceID)
				if err != nil {
					return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
				}
				if old != nil && lateCompletion(old, hb.WorkerID, r) {
					late, err := t.applyLateCompletion(old, hb.WorkerID, r, now.UTC())
					if err != nil {
						return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
					}
					res.Late = append(res.Late, *late)
					st = store.StatusCompleted
				}
			}
			if st == "" {
				continue
			}
			if started != nil {
				res.Started = append(res.Started, *started)
			}
			res.Changed++
			if st == store.StatusPending {
				res.Requeued++
			}
			if st != store.StatusRunning {
				res.Freed++
			}
		}
		if hb.SeenGen >= 0 {
			ids, err := t.placedIDs(hb.WorkerID)
			if err != nil {
				return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
			}
			if err := t.prefetch(t.instanceKeys(ids)...); err != nil {
				return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
			}
			for _, id := range ids {
				if reported[id] {
					continue
				}
				old, err := t.getInstance(id)
				if err != nil {
					return fmt.Errorf("heartbeat %s: %w", hb.WorkerID, err)
				}
				if old == nil || !old.Status.Active() || old.AssignedWorker != hb.WorkerID ||
					old.CancelRequestedAt.IsZero() || old.CancelGen <= 0 || old.CancelGen > hb.SeenGen {
					continue
				}
				in := clone(old)
				in.Status, in.EndedAt = store.StatusCancelled, now.UTC()
				if err := t.putInstance(old, in); err != nil {
					return err
				}
				res.Changed++
				res.Freed++
			}
		}
		if res.Changed > 0 {
			w.Generation++
		}
		return t.putWorker(w)
	})
	if err != nil {
		return store.HeartbeatResult{}, err
	}
	return res, nil
}

// assignChunk bounds the placements of one transaction: three keys each
// (record, placement, attempt), the worker's, and room for the deletes that
// bound attempt histories.
func (s *Store) assignChunk() int { return max(s.maxOps/5, 1) }

// Assign applies placements, as the SQLite store's Assign does: each
// applies only if the instance is still PENDING at the given attempt with
// no cancel requested, and the worker is ONLINE and not cordoned. Up to
// MaxTxnOps/4 placements commit in one transaction. Assign is a fenced
// write (SetFence).
func (s *Store) Assign(ctx context.Context, as []store.Assignment, now time.Time) ([]store.Assignment, error) {
	if len(as) == 0 {
		return nil, nil
	}
	applied := make([]store.Assignment, 0, len(as))
	for len(as) > 0 {
		n := min(len(as), s.assignChunk())
		chunk := as[:n]
		as = as[n:]
		var got []store.Assignment
		err := s.update(ctx, "assign", func(t *txn) error {
			t.fenced = true
			got = got[:0]
			keys := make([]string, 0, 3*len(chunk))
			for _, a := range chunk {
				keys = append(keys, s.kInstance(a.InstanceID), s.kWorker(a.Worker), s.kCordon(a.Worker))
			}
			if err := t.prefetch(keys...); err != nil {
				return fmt.Errorf("assign: %w", err)
			}
			workers := map[string]*store.Worker{}
			for _, a := range chunk {
				old, err := t.getInstance(a.InstanceID)
				if err != nil {
					return fmt.Errorf("assign %s to %s: %w", a.InstanceID, a.Worker, err)
				}
				if old == nil || old.Status != store.StatusPending || old.Attempt != a.Attempt || !old.CancelRequestedAt.IsZero() ||
					old.NotBefore.After(now) {
					continue
				}
				w, ok := workers[a.Worker]
				if !ok {
					if w, err = t.getWorker(a.Worker); err != nil {
						return fmt.Errorf("assign %s to %s: %w", a.InstanceID, a.Worker, err)
					}
					if err := t.guard(s.kCordon(a.Worker)); err != nil {
						return err
					}
					cord, _ := t.get(s.kCordon(a.Worker))
					if w != nil && (w.Status != store.WorkerOnline || cord != nil) {
						w = nil
					}
					workers[a.Worker] = w
				}
				if w == nil {
					continue
				}
				in := clone(old)
				in.Status, in.Attempt, in.AssignedWorker, in.AssignedAt = store.StatusAssigned, old.Attempt+1, a.Worker, now.UTC()
				in.Port, in.Endpoint, in.ExitCode, in.FailureReason = nil, "", nil, ""
				in.StartedAt, in.EndedAt = time.Time{}, time.Time{}
				in.GPUIndices = nil
				in.NotBefore, in.HeldBy = time.Time{}, ""
				if len(a.GPUIndices) > 0 {
					in.GPUIndices = slices.Sorted(slices.Values(a.GPUIndices))
				}
				if err := t.putInstance(old, in); err != nil {
					return err
				}
				a.Attempt = in.Attempt
				got = append(got, a)
			}
			for _, a := range got {
				if w := workers[a.Worker]; w != nil {
					w.Generation++
					if err := t.putWorker(w); err != nil {
						return err
					}
					workers[a.Worker] = nil // bumped once
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		applied = append(applied, got...)
	}
	return applied, nil
}

// RequestCancel cancels an instance as the SQLite store's RequestCancel
// does. store.ErrNotFound if the id is unknown.
func (s *Store) RequestCancel(ctx context.Context, id string, grace time.Duration, now time.Time) (store.CancelResult, error) {
	var res store.CancelResult
	err := s.update(ctx, "cancel "+id, func(t *txn) error {
		res = store.CancelResult{}
		old, err := t.getInstance(id)
		if err != nil {
			return fmt.Errorf("cancel %s: %w", id, err)
		}
		if old == nil {
			return fmt.Errorf("cancel %s: %w", id, store.ErrNotFound)
		}
		in := clone(old)
		switch {
		case in.Status == store.StatusPending || in.Status == store.StatusUnknown:
			in.Status, in.FailureReason = store.StatusCancelled, ""
			if in.CancelRequestedAt.IsZero() {
				in.CancelRequestedAt = now.UTC()
			}
			in.EndedAt, in.GracePeriod = now.UTC(), grace
			if in.AssignedWorker != "" {
				if _, err := t.bumpGeneration(in.AssignedWorker); err != nil {
					return err
				}
			}
			res = store.CancelResult{Outcome: store.CancelDone, Status: store.StatusCancelled, Worker: in.AssignedWorker}
		case (in.Status == store.StatusAssigned || in.Status == store.StatusRunning) && in.CancelRequestedAt.IsZero():
			in.CancelRequestedAt, in.GracePeriod = now.UTC(), grace
			gen, err := t.bumpGeneration(in.AssignedWorker)
			if err != nil {
				return err
			}
			in.CancelGen = gen
			res = store.CancelResult{Outcome: store.CancelRequested, Status: in.Status, Worker: in.AssignedWorker}
		case in.Status.Terminal():
			res = store.CancelResult{Outcome: store.CancelTerminal, Status: in.Status}
			return nil
		default:
			res = store.CancelResult{Outcome: store.CancelAlreadyRequested, Status: in.Status}
			return nil
		}
		return t.putInstance(old, in)
	})
	if err != nil {
		return store.CancelResult{}, err
	}
	return res, nil
}

// instanceKeys returns the keys of the instances ids.
func (t *txn) instanceKeys(ids []string) []string {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = t.s.kInstance(id)
	}
	return keys
}

// FailPending ends FAILED, with reason, those of ids that are still
// PENDING, as the SQLite store's FailPending does. Up to a quarter of
// MaxTxnOps ids commit in one transaction (each costs a compare, a write
// and perhaps a worker's generation); a longer list commits in chunks of
// that size, each all or none.
func (s *Store) FailPending(ctx context.Context, ids []string, reason string, now time.Time) ([]string, error) {
	var failed []string
	chunk := max(1, s.maxOps/4)
	for len(ids) > 0 {
		part := ids[:min(len(ids), chunk)]
		ids = ids[len(part):]
		var done []string
		err := s.update(ctx, "fail pending", func(t *txn) error {
			done = done[:0]
			for _, id := range part {
				old, err := t.getInstance(id)
				if err != nil {
					return fmt.Errorf("fail pending %s: %w", id, err)
				}
				if old == nil || old.Status != store.StatusPending {
					continue
				}
				in := clone(old)
				in.Status, in.FailureReason, in.EndedAt = store.StatusFailed, reason, now.UTC()
				if in.AssignedWorker != "" {
					if _, err := t.bumpGeneration(in.AssignedWorker); err != nil {
						return err
					}
				}
				if err := t.putInstance(old, in); err != nil {
					return err
				}
				done = append(done, id)
			}
			return nil
		})
		if err != nil {
			return failed, err
		}
		failed = append(failed, done...)
	}
	return failed, nil
}
