package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// StartEpoch increments and returns the head epoch. Every head sharing the
// cluster takes its own epoch at start.
func (s *Store) StartEpoch(ctx context.Context) (int64, error) {
	var e int64
	err := s.update(ctx, "start epoch", func(t *txn) error {
		b, err := t.get(s.kEpoch())
		if err != nil {
			return err
		}
		if e, err = parseInt(b, "epoch"); err != nil {
			return err
		}
		e++
		t.put(s.kEpoch(), []byte(strconv.FormatInt(e, 10)))
		return nil
	})
	if err != nil {
		return 0, err
	}
	return e, nil
}

// Epoch returns the current head epoch without changing it.
func (s *Store) Epoch(ctx context.Context) (int64, error) {
	b, err := s.snapshot(ctx).get(s.kEpoch())
	if err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	return parseInt(b, "epoch")
}

// cut bounds s to n bytes; a rune torn by the cut is dropped.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// InsertEvents appends events and returns them with their ids, as the
// SQLite store's InsertEvents does. Ids come from the counter key
// meta/event-seq, incremented in the same transaction. When the new ids
// cross a trim boundary, events older than the newest EventRetention are
// deleted in the same transaction (one range delete).
func (s *Store) InsertEvents(ctx context.Context, evs []store.Event, now time.Time) ([]store.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]store.Event, len(evs))
	for i, e := range evs {
		if e.Type == "" || e.Reason == "" {
			return nil, fmt.Errorf("insert event %d: type and reason are required", i)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Time = e.Time.UTC()
		e.Pool, e.Node = cut(e.Pool, store.MaxEventField), cut(e.Node, store.MaxEventField)
		e.Type, e.Reason = cut(e.Type, store.MaxEventField), cut(e.Reason, store.MaxEventField)
		e.Message = cut(e.Message, store.MaxEventMessage)
		out[i] = e
	}
	for start := 0; start < len(out); {
		n := min(len(out)-start, s.maxOps-2)
		chunk := out[start : start+n]
		err := s.update(ctx, "insert events", func(t *txn) error {
			b, err := t.get(s.kEventSeq())
			if err != nil {
				return err
			}
			seq, err := parseInt(b, "event-seq")
			if err != nil {
				return err
			}
			first := seq + 1
			for i := range chunk {
				seq++
				chunk[i].ID = seq
				if err := t.putJSON(s.kEvent(seq), &chunk[i]); err != nil {
					return err
				}
			}
			t.put(s.kEventSeq(), []byte(strconv.FormatInt(seq, 10)))
			if (first-1)/s.eventTrim != seq/s.eventTrim && seq-s.eventKeep > 0 {
				t.ranges = append(t.ranges, clientv3.OpDelete(s.kEvent(0), clientv3.WithRange(s.kEvent(seq-s.eventKeep+1))))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		start += n
	}
	return out, nil
}

// eventPage is how many events ListEvents reads per request.
const eventPage = 1000

// ListEvents returns the matching events in id order.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	if f.Limit < 0 {
		return nil, errors.New("list events: limit must not be negative")
	}
	var out []store.Event
	lo, hi := s.kEvent(f.After+1), clientv3.GetPrefixRangeEnd(s.kEvents())
	rev := int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(hi), clientv3.WithLimit(eventPage)}
		if f.Tail {
			opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		c, cancel := s.ctx(ctx)
		resp, err := s.cli.Get(c, lo, opts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list events: %w", unavailable(err))
		}
		rev = resp.Header.Revision
		for _, x := range resp.Kvs {
			var e store.Event
			if err := json.Unmarshal(x.Value, &e); err != nil {
				return nil, fmt.Errorf("list events: decode %s: %w", x.Key, err)
			}
			if f.Pool != nil && e.Pool != *f.Pool {
				continue
			}
			out = append(out, e)
			if f.Limit > 0 && len(out) == f.Limit {
				break
			}
		}
		if !resp.More || len(resp.Kvs) == 0 || (f.Limit > 0 && len(out) >= f.Limit) {
			break
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if f.Tail {
			hi = last
		} else {
			lo = last + "\x00"
		}
	}
	if f.Tail {
		slices.Reverse(out)
	}
	return out, nil
}

// AddCredential stores a credential minted for a machine; expired unused
// credentials are removed in the same transaction (as many as fit).
func (s *Store) AddCredential(ctx context.Context, c store.Credential) error {
	if c.Hash == "" || c.MachineID == "" {
		return errors.New("add credential: hash and machine id must be set")
	}
	c.CreatedAt, c.ExpiresAt, c.UsedAt = c.CreatedAt.UTC(), c.ExpiresAt.UTC(), time.Time{}
	return s.update(ctx, "add credential for machine "+c.MachineID, func(t *txn) error {
		kvs, err := t.list(s.kCreds())
		if err != nil {
			return err
		}
		room := s.maxOps - 1
		for _, x := range kvs {
			var o store.Credential
			if err := json.Unmarshal(x.val, &o); err != nil {
				return fmt.Errorf("decode %s: %w", x.key, err)
			}
			if room > 0 && o.UsedAt.IsZero() && !o.ExpiresAt.After(c.CreatedAt) {
				t.del(x.key)
				room--
			}
		}
		k := s.kCred(c.Hash)
		if b, err := t.get(k); err != nil {
			return err
		} else if b != nil {
			return fmt.Errorf("add credential for machine %s: hash already stored", c.MachineID)
		}
		return t.putJSON(k, &c)
	})
}

// UseCredential checks a credential against the machine id and pool it
// registers as and marks it used; store.ErrCredential unless the hash is
// known, minted for exactly that machine and pool, and either used before
// or not yet expired at now.
func (s *Store) UseCredential(ctx context.Context, hash, machineID, pool string, now time.Time) error {
	return s.update(ctx, "use credential", func(t *txn) error {
		var c store.Credential
		ok, err := t.getJSON(s.kCred(hash), &c)
		if err != nil {
			return fmt.Errorf("use credential: %w", err)
		}
		if !ok || c.MachineID != machineID || c.Pool != pool || (c.UsedAt.IsZero() && !c.ExpiresAt.After(now)) {
			return fmt.Errorf("machine %s, pool %q: %w", machineID, pool, store.ErrCredential)
		}
		if !c.UsedAt.IsZero() {
			return nil
		}
		c.UsedAt = now.UTC()
		return t.putJSON(s.kCred(hash), &c)
	})
}

// credentials lists the credentials of a machine as t sees them.
func (t *txn) credentials(machineID string) ([]store.Credential, []string, error) {
	kvs, err := t.list(t.s.kCreds())
	if err != nil {
		return nil, nil, err
	}
	var out []store.Credential
	var keys []string
	for _, x := range kvs {
		var c store.Credential
		if err := json.Unmarshal(x.val, &c); err != nil {
			return nil, nil, fmt.Errorf("decode %s: %w", x.key, err)
		}
		if c.MachineID == machineID {
			out = append(out, c)
			keys = append(keys, x.key)
		}
	}
	return out, keys, nil
}

// RevokeCredentials removes every credential of a machine and reports how
// many there were.
func (s *Store) RevokeCredentials(ctx context.Context, machineID string) (int, error) {
	n := 0
	err := s.update(ctx, "revoke credentials of machine "+machineID, func(t *txn) error {
		_, keys, err := t.credentials(machineID)
		if err != nil {
			return err
		}
		for _, k := range keys {
			t.del(k)
		}
		n = len(keys)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Credentials lists the stored credentials of a machine (hashes only), by
// creation time.
func (s *Store) Credentials(ctx context.Context, machineID string) ([]store.Credential, error) {
	out, _, err := s.snapshot(ctx).credentials(machineID)
	if err != nil {
		return nil, fmt.Errorf("credentials of machine %s: %w", machineID, err)
	}
	slices.SortStableFunc(out, func(a, b store.Credential) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// journalRecord is the value of a pool's journal key.
type journalRecord struct {
	Epoch   uint64
	Serial  uint64
	Desired *int
}

// PoolJournal is controller.Journal in etcd: the pool's epoch, serial and
// desired count in one key, its machine records in one key each. Every
// write is a transaction that reads the pool's key, refuses an older epoch
// with an error wrapping controller.ErrStaleEpoch, and commits only if the
// pool's key is unchanged, so it fences controllers in every head sharing
// the cluster. Writes are also fenced by the store's leader fence.
type PoolJournal struct {
	s    *Store
	pool string
}

var _ controller.Journal = (*PoolJournal)(nil)

// Journal returns the journal of pool (no I/O).
func (s *Store) Journal(pool string) (controller.Journal, error) {
	if pool == "" {
		return nil, errors.New("journal: pool: must be set")
	}
	return &PoolJournal{s: s, pool: pool}, nil
}

func (j *PoolJournal) errorf(op string, err error) error {
	return fmt.Errorf("journal of pool %q: %s: %w", j.pool, op, err)
}

// Load returns the journal's state, read at one revision.
func (j *PoolJournal) Load(ctx context.Context) (controller.JournalState, error) {
	t := j.s.snapshot(ctx)
	var jr journalRecord
	ok, err := t.getJSON(j.s.kJournal(j.pool), &jr)
	if err != nil {
		return controller.JournalState{}, j.errorf("load", err)
	}
	st := controller.JournalState{Records: []controller.Record{}}
	if !ok {
		return st, nil
	}
	st.Epoch, st.Serial = jr.Epoch, jr.Serial
	if jr.Desired != nil {
		st.Desired, st.HasDesired = *jr.Desired, true
	}
	kvs, err := t.list(j.s.kRecords(j.pool))
	if err != nil {
		return controller.JournalState{}, j.errorf("load records", err)
	}
	for _, x := range kvs {
		var r controller.Record
		if err := json.Unmarshal(x.val, &r); err != nil {
			return controller.JournalState{}, j.errorf("load records", fmt.Errorf("decode %s: %w", x.key, err))
		}
		st.Records = append(st.Records, r)
	}
	slices.SortFunc(st.Records, func(a, b controller.Record) int { return strings.Compare(a.MachineID, b.MachineID) })
	return st, nil
}

// RaiseEpoch increments the pool's epoch and returns the new value.
func (j *PoolJournal) RaiseEpoch(ctx context.Context) (uint64, error) {
	var e uint64
	err := j.s.update(ctx, "raise epoch", func(t *txn) error {
		t.fenced = true
		var jr journalRecord
		if _, err := t.getJSON(j.s.kJournal(j.pool), &jr); err != nil {
			return err
		}
		jr.Epoch++
		e = jr.Epoch
		return t.putJSON(j.s.kJournal(j.pool), &jr)
	})
	if err != nil {
		return 0, j.errorf("raise epoch", err)
	}
	return e, nil
}

// fenced runs fn on the pool's record after checking epoch; the record is
// written back (made if absent) in the same transaction.
func (j *PoolJournal) fenced(ctx context.Context, epoch uint64, fn func(t *txn, jr *journalRecord) error) error {
	if epoch > math.MaxInt64 {
		return fmt.Errorf("epoch: %d is out of range", epoch)
	}
	return j.s.update(ctx, "journal write", func(t *txn) error {
		t.fenced = true
		var jr journalRecord
		if _, err := t.getJSON(j.s.kJournal(j.pool), &jr); err != nil {
			return err
		}
		if epoch < jr.Epoch {
			return fmt.Errorf("epoch %d, journal is at %d: %w", epoch, jr.Epoch, controller.ErrStaleEpoch)
		}
		if err := fn(t, &jr); err != nil {
			return err
		}
		return t.putJSON(j.s.kJournal(j.pool), &jr)
	})
}

// NextSerial increments the serial counter and returns the new value.
func (j *PoolJournal) NextSerial(ctx context.Context, epoch uint64) (uint64, error) {
	var n uint64
	err := j.fenced(ctx, epoch, func(_ *txn, jr *journalRecord) error {
		jr.Serial++
		n = jr.Serial
		return nil
	})
	if err != nil {
		return 0, j.errorf("next serial", err)
	}
	return n, nil
}

// Put validates r and writes it, replacing the record of r.MachineID.
func (j *PoolJournal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	op := fmt.Sprintf("put %q", r.MachineID)
	if err := r.Validate(); err != nil {
		return j.errorf(op, err)
	}
	if r.Serial > math.MaxInt64 {
		return j.errorf(op, fmt.Errorf("serial: %d is out of range", r.Serial))
	}
	err := j.fenced(ctx, epoch, func(t *txn, _ *journalRecord) error {
		return t.putJSON(j.s.kRecord(j.pool, r.MachineID), &r)
	})
	if err != nil {
		return j.errorf(op, err)
	}
	return nil
}

// Remove deletes the record of machineID; an absent record is not an error.
func (j *PoolJournal) Remove(ctx context.Context, epoch uint64, machineID string) error {
	err := j.fenced(ctx, epoch, func(t *txn, _ *journalRecord) error {
		t.del(j.s.kRecord(j.pool, machineID))
		return nil
	})
	if err != nil {
		return j.errorf(fmt.Sprintf("remove %q", machineID), err)
	}
	return nil
}

// SetDesired records the reconciler's desired node count.
func (j *PoolJournal) SetDesired(ctx context.Context, epoch uint64, desired int) error {
	if desired < 0 {
		return j.errorf("set desired", fmt.Errorf("desired: must not be negative, got %d", desired))
	}
	err := j.fenced(ctx, epoch, func(_ *txn, jr *journalRecord) error {
		jr.Desired = &desired
		return nil
	})
	if err != nil {
		return j.errorf("set desired", err)
	}
	return nil
}
