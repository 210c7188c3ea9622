// Package etcdstore keeps the head's cluster state in etcd, behind the same
// methods as the SQLite store (internal/store), so that several heads can
// share it and a standby can take over when the leader's machine is lost.
//
// Every record is one key whose value is the JSON encoding of the whole
// record (store.Instance, store.Worker, ...): a field added to a record
// travels without a change here. docs/etcd-store.md lists the keys.
//
// Every state transition runs as an optimistic transaction: the records it
// needs are read at one revision, the change is decided in Go exactly as the
// SQLite store's conditional UPDATE decides it, and the writes commit in one
// etcd transaction only if every key written (and every key explicitly
// guarded, such as a worker's cordon) still has the revision that was read;
// otherwise the whole step is read and decided again. So an instance is
// placed once, a stale attempt's report changes nothing, and two heads
// never overwrite each other's decision (snapshot isolation with
// first-committer-wins, plus guards where a decision rests on a key it does
// not write).
//
// The store takes time as an argument (now) and never reads a clock.
package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/store"
)

// DefaultPrefix is the key prefix of a store opened without one.
const DefaultPrefix = "/tide/"

// DefaultMaxTxnOps is etcd's default --max-txn-ops: the most comparisons
// and the most operations one transaction may carry.
const DefaultMaxTxnOps = 128

// DefaultRequestTimeout bounds one etcd request.
const DefaultRequestTimeout = 5 * time.Second

// maxRetries bounds how often a transaction that lost a race is decided
// again before ErrConflict.
const maxRetries = 200

// Options tunes Open.
type Options struct {
	// Prefix is put before every key; DefaultPrefix when empty. It must
	// end in '/'.
	Prefix string
	// MaxTxnOps is the etcd cluster's --max-txn-ops; DefaultMaxTxnOps when
	// zero. Bulk operations are split so no transaction exceeds it.
	MaxTxnOps int
	// EventRetention is how many of the newest events are kept;
	// store.DefaultEventRetention when zero.
	EventRetention int
	// RequestTimeout bounds each etcd request (a lost quorum makes requests
	// wait): DefaultRequestTimeout when zero.
	RequestTimeout time.Duration
}

// Store is the etcd-backed state. It is safe for concurrent use.
type Store struct {
	cli       *clientv3.Client
	own       bool // Close closes cli
	p         string
	maxOps    int
	timeout   time.Duration
	eventKeep int64
	eventTrim int64
	fence     atomic.Pointer[fence]
}

// fence is a comparison every fenced write carries: the leader's election
// key still exists with the creation revision it had when this head won.
type fence struct {
	key string
	rev int64
}

// ErrNotLeader is wrapped by the error of a fenced write made after this
// head lost the leadership it was fenced with.
var ErrNotLeader = errors.New("this head is no longer the leader")

// New returns a store on an existing client; Close does not close it.
func New(cli *clientv3.Client, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		return nil, fmt.Errorf("etcd store: prefix %q: must end in '/'", opts.Prefix)
	}
	if opts.MaxTxnOps == 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	if opts.MaxTxnOps < 16 {
		return nil, fmt.Errorf("etcd store: max_txn_ops %d: must be at least 16", opts.MaxTxnOps)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	s := &Store{cli: cli, p: opts.Prefix, maxOps: opts.MaxTxnOps, timeout: opts.RequestTimeout}
	s.eventKeep, s.eventTrim = eventBounds(opts.EventRetention)
	return s, nil
}

// Client returns the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.p }

// Close closes the client if Open made it.
func (s *Store) Close() error {
	if s.own {
		return s.cli.Close()
	}
	return nil
}

// MaxInsertBatch is how many instances one InsertInstances call commits in
// one transaction (two keys each); a larger call commits in chunks.
func (s *Store) MaxInsertBatch() int { return s.maxOps / 2 }

// SetFence makes every fenced write (Assign and the journals' writes)
// also require that key exists with creation revision rev: a
// head sets it to its election key when it becomes leader, so a deposed
// leader's writes fail with ErrNotLeader instead of racing the new
// leader's. rev 0 removes the fence.
func (s *Store) SetFence(key string, rev int64) {
	if rev == 0 {
		s.fence.Store(nil)
		return
	}
	s.fence.Store(&fence{key: key, rev: rev})
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// unavailable wraps an etcd request error so the head's answer says why.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: etcd did not answer (no quorum, or no member reachable): %w", store.ErrUnavailable, err)
}

// txn is one optimistic transaction: reads at one revision, buffered
// writes, committed if nothing it wrote or guarded changed since.
type txn struct {
	s       *Store
	ctx     context.Context
	rev     int64
	read    map[string]int64 // key -> ModRevision seen (0: absent)
	vals    map[string][]byte
	writes  map[string][]byte // nil value: delete
	order   []string
	guards  map[string]bool
	fenced  bool
	ranges  []clientv3.Op // extra whole-range deletes
	touched int           // count of ops, for the MaxTxnOps bound
}

func (t *txn) fetch(ctx context.Context, key string, prefix bool) (*clientv3.GetResponse, error) {
	opts := []clientv3.OpOption{}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if t.rev != 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	c, cancel := t.s.ctx(ctx)
	defer cancel()
	resp, err := t.s.cli.Get(c, key, opts...)
	if err != nil {
		return nil, unavailable(err)
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	return resp, nil
}

// get returns the value of key as this transaction sees it; nil when absent.
func (t *txn) get(key string) ([]byte, error) {
	if v, ok := t.writes[key]; ok {
		return v, nil
	}
	if _, ok := t.read[key]; ok {
		return t.vals[key], nil
	}
	resp, err := t.fetch(t.ctx, key, false)
	if err != nil {
		return nil, err
	}
	t.read[key] = 0
	t.vals[key] = nil
	if len(resp.Kvs) == 1 {
		t.read[key] = resp.Kvs[0].ModRevision
		t.vals[key] = resp.Kvs[0].Value
	}
	return t.vals[key], nil
}

// prefetch reads the keys t has not read yet in one request (at t's
// revision), so that the gets that follow need no round trip each.
func (t *txn) prefetch(keys ...string) error {
	var ops []clientv3.Op
	var want []string
	seen := map[string]bool{}
	for _, k := range keys {
		if _, ok := t.read[k]; ok || seen[k] {
			continue
		}
		if _, ok := t.writes[k]; ok {
			continue
		}
		seen[k] = true
		want = append(want, k)
	}
	for len(want) > 0 {
		n := min(len(want), t.s.maxOps)
		ops = ops[:0]
		for _, k := range want[:n] {
			var opts []clientv3.OpOption
			if t.rev != 0 {
				opts = append(opts, clientv3.WithRev(t.rev))
			}
			ops = append(ops, clientv3.OpGet(k, opts...))
		}
		c, cancel := t.s.ctx(t.ctx)
		resp, err := t.s.cli.Txn(c).Then(ops...).Commit()
		cancel()
		if err != nil {
			return unavailable(err)
		}
		if t.rev == 0 {
			t.rev = resp.Header.Revision
		}
		for i, r := range resp.Responses {
			k := want[i]
			t.read[k], t.vals[k] = 0, nil
			if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 {
				t.read[k], t.vals[k] = kvs[0].ModRevision, kvs[0].Value
			}
		}
		want = want[n:]
	}
	return nil
}

// getJSON decodes key's value into v and reports whether it exists.
func (t *txn) getJSON(key string, v any) (bool, error) {
	b, err := t.get(key)
	if err != nil || b == nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, nil
}

// kv is one key and value of a list.
type kv struct {
	key string
	val []byte
}

// list returns every key under prefix as this transaction sees it, by key.
func (t *txn) list(prefix string) ([]kv, error) {
	resp, err := t.fetch(t.ctx, prefix, true)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []kv
	for _, x := range resp.Kvs {
		k := string(x.Key)
		if _, ok := t.read[k]; !ok {
			t.read[k] = x.ModRevision
			t.vals[k] = x.Value
		}
		seen[k] = true
		v, err := t.get(k)
		if err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, kv{k, v})
		}
	}
	for k, v := range t.writes {
		if strings.HasPrefix(k, prefix) && !seen[k] && v != nil {
			out = append(out, kv{k, v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

func (t *txn) put(key string, val []byte) {
	if _, ok := t.writes[key]; !ok {
		t.order = append(t.order, key)
	}
	t.writes[key] = val
}

func (t *txn) putJSON(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if len(b) == 0 {
		b = []byte("null")
	}
	t.put(key, b)
	return nil
}

func (t *txn) del(key string) {
	if _, ok := t.writes[key]; !ok {
		t.order = append(t.order, key)
	}
	t.writes[key] = nil
}

// guard makes the commit also require key's revision to be unchanged
// (absent stays absent): the decision rested on it.
func (t *txn) guard(key string) error {
	if _, err := t.get(key); err != nil {
		return err
	}
	t.guards[key] = true
	return nil
}

// errRetry makes update decide again at a fresh revision.
var errRetry = errors.New("retry")

// update runs fn in a transaction and commits its writes; it decides again
// when a key it wrote or guarded changed meanwhile. op names the operation
// in errors. fn must set its results afresh on each run.
func (s *Store) update(ctx context.Context, op string, fn func(t *txn) error) error {
	for range maxRetries {
		t := &txn{s: s, ctx: ctx, read: map[string]int64{}, vals: map[string][]byte{},
			writes: map[string][]byte{}, guards: map[string]bool{}}
		if err := fn(t); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		ok, err := t.commit()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%s: %d conflicting writers in a row: %w", op, maxRetries, errConflict)
}

// commit writes; false when a compared key changed (or the fence failed:
// then an error wrapping ErrNotLeader).
func (t *txn) commit() (bool, error) {
	if len(t.writes) == 0 && len(t.ranges) == 0 {
		return true, nil
	}
	var cmps []clientv3.Cmp
	for _, k := range t.order {
		if rev, ok := t.read[k]; ok {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		}
	}
	for k := range t.guards {
		if _, written := t.writes[k]; !written {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", t.read[k]))
		}
	}
	var f *fence
	if t.fenced {
		if f = t.s.fence.Load(); f != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev))
		}
	}
	ops := make([]clientv3.Op, 0, len(t.order)+len(t.ranges))
	for _, k := range t.order {
		if v := t.writes[k]; v != nil {
			ops = append(ops, clientv3.OpPut(k, string(v)))
		} else {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	ops = append(ops, t.ranges...)
	c, cancel := t.s.ctx(t.ctx)
	defer cancel()
	resp, err := t.s.cli.Txn(c).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, unavailable(err)
	}
	if resp.Succeeded {
		return true, nil
	}
	if f != nil {
		c2, cancel2 := t.s.ctx(t.ctx)
		defer cancel2()
		r, err := t.s.cli.Get(c2, f.key)
		if err != nil {
			return false, unavailable(err)
		}
		if len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != f.rev {
			return false, fmt.Errorf("election key %s: %w", f.key, ErrNotLeader)
		}
	}
	return false, nil
}

// snapshot reads at one revision without writing (a consistent read).
func (s *Store) snapshot(ctx context.Context) *txn {
	return &txn{s: s, ctx: ctx, read: map[string]int64{}, vals: map[string][]byte{},
		writes: map[string][]byte{}, guards: map[string]bool{}}
}
