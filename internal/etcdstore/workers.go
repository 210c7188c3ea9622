package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/store"
)

// cordonRecord is the value of a cordon key.
type cordonRecord struct {
	CordonedAt time.Time
}

func decodeWorker(b []byte) (*store.Worker, error) {
	var w store.Worker
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode worker: %w", err)
	}
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	return &w, nil
}

// getWorker reads a worker (without its cordon); nil when absent.
func (t *txn) getWorker(id string) (*store.Worker, error) {
	b, err := t.get(t.s.kWorker(id))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeWorker(b)
}

// putWorker writes w; the cordon lives in its own key.
func (t *txn) putWorker(w *store.Worker) error {
	c := *w
	c.CordonedAt = time.Time{}
	return t.putJSON(t.s.kWorker(w.ID), &c)
}

// withCordon fills w.CordonedAt from the cordon key as t sees it.
func (t *txn) withCordon(w *store.Worker) error {
	var c cordonRecord
	ok, err := t.getJSON(t.s.kCordon(w.ID), &c)
	if err != nil {
		return err
	}
	if ok {
		w.CordonedAt = c.CordonedAt
	}
	return nil
}

// bumpGeneration increments a worker's generation and returns it; 0 when
// the worker does not exist (nothing changes).
func (t *txn) bumpGeneration(id string) (int64, error) {
	w, err := t.getWorker(id)
	if err != nil || w == nil {
		return 0, err
	}
	w.Generation++
	return w.Generation, t.putWorker(w)
}

// RegisterWorker inserts a worker or reconnects a known one, as the SQLite
// store's RegisterWorker does.
func (s *Store) RegisterWorker(ctx context.Context, r store.Registration, now time.Time) (*store.Worker, error) {
	if r.ID == "" {
		return nil, fmt.Errorf("register worker: empty worker_id")
	}
	var out *store.Worker
	err := s.update(ctx, "register worker "+r.ID, func(t *txn) error {
		w, err := t.getWorker(r.ID)
		if err != nil {
			return err
		}
		if w == nil {
			// A new worker takes the next ordinal of its pool: the pool's
			// workers are read, and a worker of the pool joining at the
			// same time conflicts on the pool's last-ordinal key.
			all, err := t.listWorkers()
			if err != nil {
				return err
			}
			ord := 0
			for _, o := range all {
				if o.Pool == r.Pool {
					ord = max(ord, o.Ordinal+1)
				}
			}
			w = &store.Worker{ID: r.ID, Ordinal: ord, RegisteredAt: now.UTC()}
			ko := s.p + "meta/ordinals/" + url.PathEscape(r.Pool)
			if err := t.guard(ko); err != nil {
				return err
			}
			t.put(ko, []byte(fmt.Sprint(ord)))
		}
		w.Host, w.Pool, w.Status, w.TokenHash, w.BootID = r.Host, r.Pool, store.WorkerOnline, r.TokenHash, r.BootID
		w.Capacity, w.Labels, w.LogPort = r.Capacity, nonNil(r.Labels), r.LogPort
		w.Generation++
		w.LastHeartbeatAt = now.UTC()
		if err := t.putWorker(w); err != nil {
			return err
		}
		if err := t.withCordon(w); err != nil {
			return err
		}
		out = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register worker %s: %w", r.ID, err)
	}
	return out, nil
}

// GetWorker returns one worker, or store.ErrNotFound.
func (s *Store) GetWorker(ctx context.Context, id string) (*store.Worker, error) {
	t := s.snapshot(ctx)
	w, err := t.getWorker(id)
	if err == nil && w != nil {
		err = t.withCordon(w)
	}
	if err != nil {
		return nil, fmt.Errorf("get worker %s: %w", id, err)
	}
	if w == nil {
		return nil, fmt.Errorf("worker %s: %w", id, store.ErrNotFound)
	}
	return w, nil
}

// listWorkers returns every worker with its cordon, by pool and ordinal.
func (t *txn) listWorkers() ([]*store.Worker, error) {
	kvs, err := t.list(t.s.kWorkers())
	if err != nil {
		return nil, err
	}
	cords, err := t.list(t.s.kCordons())
	if err != nil {
		return nil, err
	}
	cordoned := map[string]time.Time{}
	for _, x := range cords {
		var c cordonRecord
		if err := json.Unmarshal(x.val, &c); err != nil {
			return nil, fmt.Errorf("decode %s: %w", x.key, err)
		}
		cordoned[strings.TrimPrefix(x.key, t.s.kCordons())] = c.CordonedAt
	}
	out := make([]*store.Worker, 0, len(kvs))
	for _, x := range kvs {
		w, err := decodeWorker(x.val)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.key, err)
		}
		w.CordonedAt = cordoned[w.ID]
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *store.Worker) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), cmp.Compare(a.Ordinal, b.Ordinal), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// ListWorkers returns every worker, by pool and ordinal.
func (s *Store) ListWorkers(ctx context.Context) ([]*store.Worker, error) {
	ws, err := s.snapshot(ctx).listWorkers()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	return ws, nil
}

// MarkSuspect moves ONLINE workers whose last heartbeat is before cutoff to
// SUSPECT. It returns how many changed.
func (s *Store) MarkSuspect(ctx context.Context, cutoff time.Time) (int, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return 0, fmt.Errorf("mark suspect: %w", err)
	}
	n := 0
	for _, w0 := range ws {
		if w0.Status != store.WorkerOnline || !w0.LastHeartbeatAt.Before(cutoff) {
			continue
		}
		changed := false
		err := s.update(ctx, "mark suspect", func(t *txn) error {
			changed = false
			w, err := t.getWorker(w0.ID)
			if err != nil || w == nil || w.Status != store.WorkerOnline || !w.LastHeartbeatAt.Before(cutoff) {
				return err
			}
			w.Status = store.WorkerSuspect
			changed = true
			return t.putWorker(w)
		})
		if err != nil {
			return n, err
		}
		if changed {
			n++
		}
	}
	return n, nil
}

// lost moves the active instances (in allowed) of a lost worker on, as the
// SQLite store's lostSQL does.
func (t *txn) lost(worker string, allowed func(store.Status) bool, elseStatus store.Status, reason string, now time.Time,
	hold time.Duration) error {
	ids, err := t.placedIDs(worker)
	if err != nil {
		return err
	}
	if err := t.prefetch(t.instanceKeys(ids)...); err != nil {
		return err
	}
	for _, id := range ids {
		old, err := t.getInstance(id)
		if err != nil {
			return err
		}
		if old == nil || old.AssignedWorker != worker || !allowed(old.Status) {
			continue
		}
		in := clone(old)
		cancelled := !in.CancelRequestedAt.IsZero()
		re := restart(in, true)
		switch {
		case cancelled:
			in.Status = store.StatusCancelled
		case re:
			in.Status = store.StatusPending
		default:
			in.Status = elseStatus
		}
		if !cancelled && !re {
			in.FailureReason = reason // an UNKNOWN instance says why too
		}
		if re {
			in.Restarts++
			in.QueuedAt = now
			in.AssignedWorker = ""
			if hold > 0 {
				in.NotBefore, in.HeldBy = now.Add(hold), worker
			}
		}
		if cancelled || (!re && elseStatus == store.StatusFailed) {
			in.EndedAt = now
		}
		if err := t.putInstance(old, in); err != nil {
			return err
		}
	}
	return nil
}

func assignedOrRunning(st store.Status) bool {
	return st == store.StatusAssigned || st == store.StatusRunning
}

// MarkOffline moves workers whose last heartbeat is before cutoff to
// OFFLINE, each in one transaction with its instances, as the SQLite
// store's MarkOffline does (requeued instances held for hold). It returns
// the workers that went offline.
func (s *Store) MarkOffline(ctx context.Context, cutoff, now time.Time, hold time.Duration) ([]string, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("mark offline: %w", err)
	}
	var ids []string
	for _, w0 := range ws {
		if w0.Status == store.WorkerOffline || !w0.LastHeartbeatAt.Before(cutoff) {
			continue
		}
		changed := false
		err := s.update(ctx, "mark offline "+w0.ID, func(t *txn) error {
			changed = false
			w, err := t.getWorker(w0.ID)
			if err != nil || w == nil || w.Status == store.WorkerOffline || !w.LastHeartbeatAt.Before(cutoff) {
				return err
			}
			w.Status = store.WorkerOffline
			w.Generation++
			if err := t.putWorker(w); err != nil {
				return err
			}
			changed = true
			return t.lost(w.ID, assignedOrRunning, store.StatusUnknown, store.ReasonWorkerOffline, now.UTC(), hold)
		})
		if err != nil {
			return ids, err
		}
		if changed {
			ids = append(ids, w0.ID)
		}
	}
	return ids, nil
}

// ReleaseHold clears the fence hold of every PENDING instance held by
// worker whose hold is still in force at now, as the SQLite store's
// ReleaseHold does (the caller knows the worker's machine is deleted), and
// returns their ids in order. Instances are found in one snapshot (held
// instances have no index of their own) and released in transactions of
// at most MaxTxnOps/3, each checking the hold again.
func (s *Store) ReleaseHold(ctx context.Context, worker string, now time.Time) ([]string, error) {
	all, err := s.snapshot(ctx).listInstances()
	if err != nil {
		return nil, fmt.Errorf("release hold of %s: %w", worker, err)
	}
	held := func(in *store.Instance) bool {
		return in != nil && in.Status == store.StatusPending && in.HeldBy == worker && in.NotBefore.After(now)
	}
	var cand []string
	for _, in := range all {
		if held(in) {
			cand = append(cand, in.ID)
		}
	}
	var ids []string
	for len(cand) > 0 {
		n := min(len(cand), max(s.maxOps/3, 1))
		chunk := cand[:n]
		cand = cand[n:]
		var done []string
		err := s.update(ctx, "release hold of "+worker, func(t *txn) error {
			done = done[:0]
			if err := t.prefetch(t.instanceKeys(chunk)...); err != nil {
				return err
			}
			for _, id := range chunk {
				old, err := t.getInstance(id)
				if err != nil {
					return err
				}
				if !held(old) {
					continue
				}
				in := clone(old)
				in.NotBefore, in.HeldBy = time.Time{}, ""
				if err := t.putInstance(old, in); err != nil {
					return err
				}
				done = append(done, id)
			}
			return nil
		})
		if err != nil {
			return ids, err
		}
		ids = append(ids, done...)
	}
	slices.Sort(ids)
	return ids, nil
}

// deleteWorker removes an OFFLINE worker in t, as the SQLite store's
// deleteWorkerTx does (requeued instances held for hold).
func (t *txn) deleteWorker(id string, now time.Time, hold time.Duration) error {
	w, err := t.getWorker(id)
	if err != nil {
		return fmt.Errorf("delete worker %s: %w", id, err)
	}
	if w == nil {
		return fmt.Errorf("delete worker %s: %w", id, store.ErrNotFound)
	}
	if w.Status != store.WorkerOffline {
		return fmt.Errorf("delete worker %s: status %s: %w", id, w.Status, store.ErrWorkerOnline)
	}
	t.del(t.s.kWorker(id))
	t.del(t.s.kCordon(id))
	return t.lost(id, store.Status.Active, store.StatusFailed, store.ReasonWorkerDeleted, now.UTC(), hold)
}

// DeleteWorker removes an OFFLINE worker. Its remaining instances become
// FAILED (WORKER_DELETED), PENDING by restart policy, or CANCELLED.
// store.ErrNotFound or store.ErrWorkerOnline otherwise.
func (s *Store) DeleteWorker(ctx context.Context, id string, now time.Time) error {
	return s.update(ctx, "delete worker "+id, func(t *txn) error { return t.deleteWorker(id, now, 0) })
}

// RemoveWorker deletes a worker whatever its status, as the SQLite store's
// RemoveWorker does (requeued instances held for hold). store.ErrNotFound
// if the worker is unknown.
func (s *Store) RemoveWorker(ctx context.Context, id string, now time.Time, hold time.Duration) error {
	return s.update(ctx, "remove worker "+id, func(t *txn) error {
		w, err := t.getWorker(id)
		if err != nil {
			return fmt.Errorf("remove worker %s: %w", id, err)
		}
		if w != nil && w.Status != store.WorkerOffline {
			w.Status = store.WorkerOffline
			if err := t.putWorker(w); err != nil {
				return err
			}
		}
		return t.deleteWorker(id, now, hold)
	})
}

// DeleteOfflineWorkers removes every OFFLINE worker, each as DeleteWorker
// does, and returns their ids.
func (s *Store) DeleteOfflineWorkers(ctx context.Context, now time.Time) ([]string, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("delete offline workers: %w", err)
	}
	slices.SortFunc(ws, func(a, b *store.Worker) int { return strings.Compare(a.ID, b.ID) })
	var ids []string
	for _, w := range ws {
		if w.Status != store.WorkerOffline {
			continue
		}
		err := s.DeleteWorker(ctx, w.ID, now)
		if err != nil && !isGone(err) {
			return ids, err
		}
		if err == nil {
			ids = append(ids, w.ID)
		}
	}
	return ids, nil
}

// isGone: the worker was deleted or came back meanwhile.
func isGone(err error) bool {
	return errorsIs(err, store.ErrNotFound) || errorsIs(err, store.ErrWorkerOnline)
}

// DesiredFor reads a worker's generation and desired set at one revision.
// store.ErrNotFound if unknown.
func (s *Store) DesiredFor(ctx context.Context, worker string) (store.DesiredState, error) {
	var ds store.DesiredState
	t := s.snapshot(ctx)
	w, err := t.getWorker(worker)
	if err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	if w == nil {
		return ds, fmt.Errorf("desired for %s: worker: %w", worker, store.ErrNotFound)
	}
	ds.Generation = w.Generation
	ids, err := t.placedIDs(worker)
	if err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	ins, err := t.getInstances(ids)
	if err != nil {
		return ds, fmt.Errorf("desired for %s: %w", worker, err)
	}
	slices.SortFunc(ins, func(a, b *store.Instance) int {
		return cmp.Or(a.AssignedAt.Compare(b.AssignedAt), strings.Compare(a.ID, b.ID))
	})
	for _, in := range ins {
		if in.AssignedWorker != worker || !in.Status.Active() {
			continue
		}
		if !in.CancelRequestedAt.IsZero() {
			ds.Stopping = append(ds.Stopping, store.Stopping{InstanceID: in.ID, Attempt: in.Attempt, GracePeriod: in.GracePeriod})
			continue
		}
		ds.Instances = append(ds.Instances, store.Desired{InstanceID: in.ID, Attempt: in.Attempt, Command: in.Command,
			GPUIndices: in.GPUIndices, Env: in.Env, Venv: in.Venv, ExpectedStatus: in.Status,
			RestartPolicy: in.RestartPolicy, RequeuedIfLost: assignedOrRunning(in.Status) && restart(in, true), GangID: in.GangID})
	}
	return ds, nil
}

// getInstances reads many instances at t's revision in one request.
func (t *txn) getInstances(ids []string) ([]*store.Instance, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var out []*store.Instance
	for len(ids) > 0 {
		n := min(len(ids), t.s.maxOps)
		ops := make([]clientv3.Op, 0, n)
		for _, id := range ids[:n] {
			opts := []clientv3.OpOption{}
			if t.rev != 0 {
				opts = append(opts, clientv3.WithRev(t.rev))
			}
			ops = append(ops, clientv3.OpGet(t.s.kInstance(id), opts...))
		}
		c, cancel := t.s.ctx(t.ctx)
		resp, err := t.s.cli.Txn(c).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, unavailable(err)
		}
		if t.rev == 0 {
			t.rev = resp.Header.Revision
		}
		for _, r := range resp.Responses {
			for _, x := range r.GetResponseRange().Kvs {
				in, err := decodeInstance(x.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, in)
			}
		}
		ids = ids[n:]
	}
	return out, nil
}

// SchedulingState reads workers, active and pending instances at one
// revision.
func (s *Store) SchedulingState(ctx context.Context) (*store.SchedulingState, error) {
	t := s.snapshot(ctx)
	st := &store.SchedulingState{}
	var err error
	if st.Workers, err = t.listWorkers(); err != nil {
		return nil, fmt.Errorf("scheduling state: %w", err)
	}
	if len(st.Workers) == 0 {
		st.Workers = nil
	}
	all, err := t.listInstances()
	if err != nil {
		return nil, fmt.Errorf("scheduling state: %w", err)
	}
	slices.SortFunc(all, func(a, b *store.Instance) int {
		return cmp.Or(a.QueuedAt.Compare(b.QueuedAt), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	for _, in := range all {
		pending := in.Status == store.StatusPending && in.CancelRequestedAt.IsZero()
		if !in.Status.Active() && !pending {
			continue
		}
		si := store.SchedInstance{ID: in.ID, Status: in.Status, Attempt: in.Attempt, Worker: in.AssignedWorker,
			Pool: in.Pool, Requests: in.Requests, Exclusive: in.Exclusive, Daemon: in.Daemon,
			TargetWorker: in.TargetWorker, RequestedGPUIndices: in.RequestedGPUIndices, QueuedAt: in.QueuedAt,
			NotBefore: in.NotBefore, HeldBy: in.HeldBy, Priority: in.Priority, Restartable: in.Restartable, GangID: in.GangID, GangName: in.GangName,
			GangSize: in.GangSize, GangRank: in.GangRank, GangMaxWait: in.GangMaxWait}
		if pending {
			st.Pending = append(st.Pending, si)
		} else {
			si.GPUIndices = in.GPUIndices
			st.Active = append(st.Active, si)
		}
	}
	return st, nil
}

// SetCordoned cordons (on) or uncordons a worker by id, whether or not it
// has registered yet; Assign guards on the cordon key, so once it returns
// no placement decided earlier can land there. It reports whether anything
// changed.
func (s *Store) SetCordoned(ctx context.Context, worker string, on bool, now time.Time) (bool, error) {
	if worker == "" {
		return false, fmt.Errorf("cordon: empty worker id")
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	k := s.kCordon(worker)
	if !on {
		resp, err := s.cli.Delete(c, k)
		if err != nil {
			return false, fmt.Errorf("cordon %s (false): %w", worker, unavailable(err))
		}
		return resp.Deleted > 0, nil
	}
	b, err := json.Marshal(cordonRecord{CordonedAt: now.UTC()})
	if err != nil {
		return false, err
	}
	resp, err := s.cli.Txn(c).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return false, fmt.Errorf("cordon %s (true): %w", worker, unavailable(err))
	}
	return resp.Succeeded, nil
}

// WorkerBusy reports whether an ASSIGNED or RUNNING non-daemon instance is
// on the worker.
func (s *Store) WorkerBusy(ctx context.Context, worker string) (bool, error) {
	t := s.snapshot(ctx)
	ids, err := t.placedIDs(worker)
	if err != nil {
		return false, fmt.Errorf("worker busy %s: %w", worker, err)
	}
	ins, err := t.getInstances(ids)
	if err != nil {
		return false, fmt.Errorf("worker busy %s: %w", worker, err)
	}
	for _, in := range ins {
		if in.AssignedWorker == worker && assignedOrRunning(in.Status) && !in.Daemon {
			return true, nil
		}
	}
	return false, nil
}
