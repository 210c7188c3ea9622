package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/store"
)

// kAttempts is the prefix of an instance's attempt history; kAttempt one
// attempt's key (zero-padded, so the keys sort in attempt order).
func (s *Store) kAttempts(id string) string { return s.p + "attempts/" + id + "/" }
func (s *Store) kAttempt(id string, n int64) string {
	return fmt.Sprintf("%s%020d", s.kAttempts(id), n)
}

// recordAttempt keeps an instance's attempt history in step with its
// change from old (nil for a new instance) to in, in the same transaction,
// as the SQLite store's triggers do: a new attempt adds a record (and the
// one MaxAttemptHistory back is deleted); a change of the current attempt
// while it is open (ASSIGNED, RUNNING or UNKNOWN) rewrites its record, which
// ends when the instance ends or goes back to PENDING.
func (t *txn) recordAttempt(old, in *store.Instance) error {
	switch {
	case in.Attempt > 0 && (old == nil || in.Attempt > old.Attempt):
		at := in.AssignedAt
		if at.IsZero() {
			at = in.QueuedAt
		}
		if in.Attempt > store.MaxAttemptHistory {
			t.ranges = append(t.ranges, clientv3.OpDelete(t.s.kAttempt(in.ID, 0),
				clientv3.WithRange(t.s.kAttempt(in.ID, in.Attempt-store.MaxAttemptHistory+1))))
		}
		return t.putJSON(t.s.kAttempt(in.ID, in.Attempt), store.AttemptRecord{Attempt: in.Attempt,
			Worker: in.AssignedWorker, Status: in.Status, AssignedAt: at})
	case old == nil || in.Attempt != old.Attempt || in.Attempt == 0 || !old.Status.Active():
		return nil
	case in.Status == old.Status && in.StartedAt.Equal(old.StartedAt) && sameExit(in.ExitCode, old.ExitCode) &&
		in.FailureReason == old.FailureReason:
		return nil
	}
	at := old.AssignedAt
	if at.IsZero() {
		at = old.QueuedAt
	}
	rec := store.AttemptRecord{Attempt: in.Attempt, Worker: old.AssignedWorker, Status: in.Status, AssignedAt: at,
		StartedAt: in.StartedAt, ExitCode: in.ExitCode, Reason: in.FailureReason}
	if rec.StartedAt.IsZero() {
		rec.StartedAt = old.StartedAt
	}
	switch {
	case in.Status == store.StatusPending:
		rec.Status, rec.EndedAt = store.RequeuedOutcome(in.ExitCode, in.FailureReason), in.QueuedAt
	case in.Status.Terminal():
		rec.EndedAt = in.EndedAt
	}
	return t.putJSON(t.s.kAttempt(in.ID, in.Attempt), rec)
}

func sameExit(a, b *int) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// Attempts returns the recorded attempts of an instance, oldest first.
// store.ErrNotFound when the instance is unknown.
func (s *Store) Attempts(ctx context.Context, instanceID string) ([]store.AttemptRecord, error) {
	t := s.snapshot(ctx)
	in, err := t.getInstance(instanceID)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
	}
	if in == nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, store.ErrNotFound)
	}
	kvs, err := t.list(s.kAttempts(instanceID))
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", instanceID, err)
	}
	out := make([]store.AttemptRecord, 0, len(kvs))
	for _, x := range kvs {
		var a store.AttemptRecord
		if err := json.Unmarshal(x.val, &a); err != nil {
			return nil, fmt.Errorf("attempts of %s: %s: %w", instanceID, x.key, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// CountInstances returns how many instances match f (its Limit aside).
func (s *Store) CountInstances(ctx context.Context, f store.Filter) (int, error) {
	f.Limit = 0
	ins, err := s.ListInstances(ctx, f)
	return len(ins), err
}
