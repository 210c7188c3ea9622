package etcdstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPrefix is where the fleet keeps its state unless told otherwise.
const DefaultPrefix = "/tide/fleet"

// DefaultTimeout bounds one etcd operation unless told otherwise.
const DefaultTimeout = 2 * time.Second

// maxOps bounds the operations of one transaction (etcd's default
// --max-txn-ops is 128).
const maxOps = 100

// Errors callers tell apart.
var (
	// ErrFenced means a guarded transaction's guard failed: the shard's
	// ownership (epoch) or the coordinator's leadership (term) is gone, or
	// the record changed under the caller. The caller must stop acting on
	// what it read.
	ErrFenced = errors.New("fenced: ownership, leadership or the record changed")
	// ErrShardHeld means another controller holds the shard.
	ErrShardHeld = errors.New("shard held by another controller")
	// ErrConfigMismatch means etcd holds another fleet configuration.
	ErrConfigMismatch = errors.New("etcd holds a different fleet configuration")
	// ErrNotFound means a record does not exist.
	ErrNotFound = errors.New("not found")
)

// Store reads and writes the fleet's state in etcd under one prefix. Every
// call is bounded by the Store's timeout, so an unreachable etcd costs a
// caller at most that long. It is safe for concurrent use.
//
// Layout, under the prefix:
//
//	config                         Config (catalog, provider registry, shards)
//	quota/<shard>                  []QuotaEntry: the shard's current quota
//	owners/<shard>                 Owner, on the holder's lease; create revision = epoch
//	reports/<shard>                Report, on the holder's lease
//	machines/<shard>/<machine>     MachineRecord (machine → shard assignment)
//	clusters/<name>                ClusterRecord (permanent cluster → shard assignment)
//	shardclusters/<shard>/<name>   the cluster's id, an index for the shard
//	seq/cluster                    the last cluster id reserved (ClusterIDs)
//	coord/election/                the coordinator's leader election
//	coord/directives/<id>          Directive
//	coord/wanted                   []string: profiles with escalations
type Store struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
}

// New returns a Store on cli under prefix (DefaultPrefix when empty), each
// call bounded by timeout (DefaultTimeout when zero).
func New(cli *clientv3.Client, prefix string, timeout time.Duration) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Store{cli: cli, prefix: strings.TrimSuffix(prefix, "/"), timeout: timeout}
}

// Client returns the etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Timeout returns the bound of one call.
func (s *Store) Timeout() time.Duration { return s.timeout }

func shardKey(id uint16) string { return fmt.Sprintf("%05d", id) }

// Key returns the full key of a path under the prefix.
func (s *Store) Key(path string) string { return s.prefix + "/" + path }

// ConfigKey is the key of the fleet's configuration.
func (s *Store) ConfigKey() string { return s.Key("config") }

// QuotaKey is the key of a shard's current quota.
func (s *Store) QuotaKey(id uint16) string { return s.Key("quota/" + shardKey(id)) }

// OwnerKey is the key of a shard's ownership (on its holder's lease).
func (s *Store) OwnerKey(id uint16) string { return s.Key("owners/" + shardKey(id)) }

// ReportKey is the key of a shard's report (on its holder's lease).
func (s *Store) ReportKey(id uint16) string { return s.Key("reports/" + shardKey(id)) }

// ClusterKey is the key of a cluster's permanent assignment.
func (s *Store) ClusterKey(name string) string { return s.Key("clusters/" + name) }

// ElectionPrefix is the prefix of the coordinators' leader election.
func (s *Store) ElectionPrefix() string { return s.Key("coord/election") }

// DirectivePrefix is the prefix of the coordinator's directives.
func (s *Store) DirectivePrefix() string { return s.Key("coord/directives/") }

// WantedKey is the key of the profiles the coordinator wants summarized.
func (s *Store) WantedKey() string { return s.Key("coord/wanted") }

// MachinePrefix is the prefix of one shard's machine records.
func (s *Store) MachinePrefix(id uint16) string { return s.Key("machines/" + shardKey(id) + "/") }

// ShardClusterPrefix is the prefix of one shard's cluster index.
func (s *Store) ShardClusterPrefix(id uint16) string {
	return s.Key("shardclusters/" + shardKey(id) + "/")
}
func (s *Store) clusterSeqKey() string { return s.Key("seq/cluster") }

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", key, err)
	}
	return resp, nil
}

func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd txn: %w", err)
	}
	return resp, nil
}

// guarded commits ops under cmps in chunks of at most maxOps; ErrFenced when
// a guard fails (the chunks before it stay committed: callers make each
// chunk meaningful on its own).
func (s *Store) guarded(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), maxOps)
		resp, err := s.txn(ctx, cmps, ops[:n], nil)
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return ErrFenced
		}
		ops = ops[n:]
	}
	return nil
}

// InitFleet writes the fleet's configuration and each shard's initial quota
// if etcd holds none; if it holds the same configuration it changes nothing
// (quota already there has evolved through transfers and is kept); if it
// holds another, ErrConfigMismatch.
func (s *Store) InitFleet(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	val, err := marshal(c)
	if err != nil {
		return fmt.Errorf("fleet config: %w", err)
	}
	key := s.ConfigKey()
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, val)}, []clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) != val {
			return fmt.Errorf("%w (at %s): start with the same configuration or another prefix", ErrConfigMismatch, key)
		}
	}
	for _, sh := range c.Shards {
		q, err := marshal(sh.Quota)
		if err != nil {
			return fmt.Errorf("shards[%d].quota: %w", sh.ID, err)
		}
		qk := s.QuotaKey(sh.ID)
		if _, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(qk), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(qk, q)}, nil); err != nil {
			return err
		}
	}
	return nil
}

// LoadConfig reads the fleet's configuration; ErrNotFound before InitFleet.
func (s *Store) LoadConfig(ctx context.Context) (Config, error) {
	resp, err := s.get(ctx, s.ConfigKey())
	if err != nil {
		return Config{}, err
	}
	if len(resp.Kvs) == 0 {
		return Config{}, fmt.Errorf("fleet config at %s: %w (start a coordinator with the fleet config first)",
			s.ConfigKey(), ErrNotFound)
	}
	var c Config
	if err := unmarshal(s.ConfigKey(), resp.Kvs[0].Value, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadQuota reads a shard's quota; ErrNotFound for an undeclared shard.
func (s *Store) LoadQuota(ctx context.Context, id uint16) ([]QuotaEntry, error) {
	resp, err := s.get(ctx, s.QuotaKey(id))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("quota of shard %d: %w (not declared in the fleet config)", id, ErrNotFound)
	}
	var q []QuotaEntry
	return q, unmarshal(s.QuotaKey(id), resp.Kvs[0].Value, &q)
}

// AcquireShard makes the caller the shard's holder, on lease, unless
// another holds it (ErrShardHeld, naming the holder). It returns the epoch:
// the ownership key's create revision, higher than any earlier holder's.
func (s *Store) AcquireShard(ctx context.Context, o Owner, lease clientv3.LeaseID) (int64, error) {
	key := s.OwnerKey(o.Shard)
	val, err := marshal(o)
	if err != nil {
		return 0, err
	}
	resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(lease))}, []clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		holder := "?"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			var cur Owner
			if unmarshal(key, kvs[0].Value, &cur) == nil {
				holder = cur.Holder
			}
		}
		return 0, fmt.Errorf("shard %d: %w (%s)", o.Shard, ErrShardHeld, holder)
	}
	return resp.Header.Revision, nil
}

// ShardGuard is the guard of a shard holder's writes: its ownership key
// still has the create revision epoch.
func (s *Store) ShardGuard(id uint16, epoch int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.OwnerKey(id)), "=", epoch)
}

// OwnerInfo is a shard's current holder.
type OwnerInfo struct {
	Owner
	Epoch int64
}

// LoadOwners reads the holders of every held shard.
func (s *Store) LoadOwners(ctx context.Context) (map[uint16]OwnerInfo, error) {
	resp, err := s.get(ctx, s.Key("owners/"), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[uint16]OwnerInfo, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var o Owner
		if err := unmarshal(string(kv.Key), kv.Value, &o); err != nil {
			return nil, err
		}
		out[o.Shard] = OwnerInfo{Owner: o, Epoch: kv.CreateRevision}
	}
	return out, nil
}

// LoadMachines reads a shard's machine records, by machine id.
func (s *Store) LoadMachines(ctx context.Context, id uint16) (map[string]MachineRecord, error) {
	pfx := s.MachinePrefix(id)
	resp, err := s.get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]MachineRecord, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r MachineRecord
		if err := unmarshal(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(string(kv.Key), pfx)] = r
	}
	return out, nil
}

// PutMachines writes machine records, fenced by the shard's epoch.
func (s *Store) PutMachines(ctx context.Context, id uint16, epoch int64, recs map[string]MachineRecord) error {
	ops := make([]clientv3.Op, 0, len(recs))
	for _, m := range slices.Sorted(maps.Keys(recs)) {
		val, err := marshal(recs[m])
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(s.MachinePrefix(id)+m, val))
	}
	return s.guarded(ctx, []clientv3.Cmp{s.ShardGuard(id, epoch)}, ops)
}

// DeleteMachines removes machine records, fenced by the shard's epoch.
func (s *Store) DeleteMachines(ctx context.Context, id uint16, epoch int64, machines []string) error {
	ops := make([]clientv3.Op, 0, len(machines))
	for _, m := range machines {
		ops = append(ops, clientv3.OpDelete(s.MachinePrefix(id)+m))
	}
	return s.guarded(ctx, []clientv3.Cmp{s.ShardGuard(id, epoch)}, ops)
}

// LoadShardClusters reads the clusters assigned to a shard: name → id.
func (s *Store) LoadShardClusters(ctx context.Context, id uint16) (map[string]uint32, error) {
	pfx := s.ShardClusterPrefix(id)
	resp, err := s.get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint32, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, err := strconv.ParseUint(string(kv.Value), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), pfx)] = uint32(n)
	}
	return out, nil
}

// LoadClusters reads every cluster assignment: name → record.
func (s *Store) LoadClusters(ctx context.Context) (map[string]ClusterRecord, error) {
	pfx := s.Key("clusters/")
	resp, err := s.get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]ClusterRecord, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r ClusterRecord
		if err := unmarshal(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(string(kv.Key), pfx)] = r
	}
	return out, nil
}

// LookupCluster reads one cluster's assignment; ErrNotFound before its
// first contact.
func (s *Store) LookupCluster(ctx context.Context, name string) (ClusterRecord, error) {
	resp, err := s.get(ctx, s.ClusterKey(name))
	if err != nil {
		return ClusterRecord{}, err
	}
	if len(resp.Kvs) == 0 {
		return ClusterRecord{}, fmt.Errorf("cluster %q: %w", name, ErrNotFound)
	}
	var r ClusterRecord
	return r, unmarshal(s.ClusterKey(name), resp.Kvs[0].Value, &r)
}

// ValidClusterName checks a cluster name: 1 to 253 characters from
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidClusterName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("cluster: name must have 1 to 253 characters, got %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '-' && c != '_' && c != '.') {
			return fmt.Errorf("cluster: %q: use letters, digits, '-', '_' and '.', starting with a letter or digit", name)
		}
	}
	return nil
}

// IDBlock is how many cluster ids a ClusterIDs reserves at a time.
const IDBlock = 256

// ClusterIDs hands out fleet-wide unique cluster ids. It reserves blocks of
// IDBlock ids from a counter in etcd (one compare-and-swap per block), so
// concurrent first contacts at many replicas do not contend on the
// counter. Ids of a block unused when its replica stops are skipped. Safe
// for concurrent use.
type ClusterIDs struct {
	s         *Store
	mu        sync.Mutex
	next, end uint64 // the block: next, ..., end-1
}

// NewClusterIDs returns an id allocator of the store's fleet.
func (s *Store) NewClusterIDs() *ClusterIDs { return &ClusterIDs{s: s} }

// Next returns an id no other caller anywhere has got.
func (a *ClusterIDs) Next(ctx context.Context) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.next >= a.end {
		key := a.s.clusterSeqKey()
		resp, err := a.s.get(ctx, key)
		if err != nil {
			return 0, err
		}
		var last uint64
		var rev int64
		if len(resp.Kvs) > 0 {
			if last, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 32); err != nil {
				return 0, fmt.Errorf("%s: %w", key, err)
			}
			rev = resp.Kvs[0].ModRevision
		}
		end := last + IDBlock
		if end > math.MaxUint32 {
			return 0, errors.New("cluster: cluster ids exhausted")
		}
		tr, err := a.s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
			[]clientv3.Op{clientv3.OpPut(key, strconv.FormatUint(end, 10))}, nil)
		if err != nil {
			return 0, err
		}
		if tr.Succeeded {
			a.next, a.end = last+1, end+1
		}
	}
	id := a.next
	a.next++
	return uint32(id), nil
}

// AssignCluster returns the cluster's shard, assigning it on first contact:
// pick chooses the shard, ids gives the cluster its fleet-wide id, and one
// transaction creates the assignment (and the shard's index entry) only if
// none exists. Whoever calls concurrently (any coordinator replica, any
// goroutine), exactly one assignment is ever made and every caller gets it;
// first is set for the caller whose transaction made it.
func (s *Store) AssignCluster(ctx context.Context, name string, pick func() (uint16, error),
	ids *ClusterIDs) (ClusterRecord, bool, error) {
	if err := ValidClusterName(name); err != nil {
		return ClusterRecord{}, false, err
	}
	key := s.ClusterKey(name)
	resp, err := s.get(ctx, key)
	if err != nil {
		return ClusterRecord{}, false, err
	}
	if len(resp.Kvs) > 0 {
		var r ClusterRecord
		return r, false, unmarshal(key, resp.Kvs[0].Value, &r)
	}
	shard, err := pick()
	if err != nil {
		return ClusterRecord{}, false, err
	}
	id, err := ids.Next(ctx)
	if err != nil {
		return ClusterRecord{}, false, err
	}
	rec := ClusterRecord{Shard: shard, ID: id}
	val, err := marshal(rec)
	if err != nil {
		return ClusterRecord{}, false, err
	}
	tr, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, val),
			clientv3.OpPut(s.ShardClusterPrefix(shard)+name, strconv.FormatUint(uint64(id), 10))},
		[]clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return ClusterRecord{}, false, err
	}
	if tr.Succeeded {
		return rec, true, nil
	}
	// Another first contact of this cluster won the race: take its answer.
	kvs := tr.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return ClusterRecord{}, false, fmt.Errorf("cluster %q: assignment vanished", name)
	}
	var r ClusterRecord
	return r, false, unmarshal(key, kvs[0].Value, &r)
}

// PutReport publishes a shard's report on its lease, fenced by its epoch.
func (s *Store) PutReport(ctx context.Context, r Report, lease clientv3.LeaseID) error {
	val, err := marshal(r)
	if err != nil {
		return err
	}
	return s.guarded(ctx, []clientv3.Cmp{s.ShardGuard(r.Shard, r.Epoch)},
		[]clientv3.Op{clientv3.OpPut(s.ReportKey(r.Shard), val, clientv3.WithLease(lease))})
}

// LoadReports reads the reports of the live shards, by shard.
func (s *Store) LoadReports(ctx context.Context) (map[uint16]Report, error) {
	resp, err := s.get(ctx, s.Key("reports/"), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[uint16]Report, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r Report
		if err := unmarshal(string(kv.Key), kv.Value, &r); err != nil {
			return nil, err
		}
		r.Revision = kv.ModRevision
		out[r.Shard] = r
	}
	return out, nil
}

// Coord is the coordinator's shared state: the directives in etcd (in id
// order) and the profiles it wants summarized.
type Coord struct {
	Directives []Directive
	Wanted     []string
	// Revision is the store revision of the read.
	Revision int64
}

// LoadCoord reads the directives and the wanted profiles in one read.
func (s *Store) LoadCoord(ctx context.Context) (Coord, error) {
	resp, err := s.get(ctx, s.Key("coord/"), clientv3.WithPrefix())
	if err != nil {
		return Coord{}, err
	}
	c := Coord{Revision: resp.Header.Revision}
	dp := s.DirectivePrefix()
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case strings.HasPrefix(k, dp):
			var d Directive
			if err := unmarshal(k, kv.Value, &d); err != nil {
				return Coord{}, err
			}
			d.ModRevision = kv.ModRevision
			c.Directives = append(c.Directives, d)
		case k == s.WantedKey():
			if err := unmarshal(k, kv.Value, &c.Wanted); err != nil {
				return Coord{}, err
			}
		}
	}
	slices.SortFunc(c.Directives, func(a, b Directive) int { return strings.Compare(a.ID, b.ID) })
	return c, nil
}

// WriteDirectives writes new directives (state pending) under the
// coordinator's leadership guard; ErrFenced once it no longer leads.
func (s *Store) WriteDirectives(ctx context.Context, leader clientv3.Cmp, ds []Directive) error {
	ops := make([]clientv3.Op, 0, len(ds))
	for _, d := range ds {
		val, err := marshal(d)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(s.DirectivePrefix()+d.ID, val))
	}
	return s.guarded(ctx, []clientv3.Cmp{leader}, ops)
}

// DeleteDirectives removes finished directives under the leadership guard.
func (s *Store) DeleteDirectives(ctx context.Context, leader clientv3.Cmp, ids []string) error {
	ops := make([]clientv3.Op, 0, len(ids))
	for _, id := range ids {
		ops = append(ops, clientv3.OpDelete(s.DirectivePrefix()+id))
	}
	return s.guarded(ctx, []clientv3.Cmp{leader}, ops)
}

// PutWanted records the profiles the coordinator wants summarized, under
// the leadership guard.
func (s *Store) PutWanted(ctx context.Context, leader clientv3.Cmp, profiles []string) error {
	val, err := marshal(profiles)
	if err != nil {
		return err
	}
	return s.guarded(ctx, []clientv3.Cmp{leader}, []clientv3.Op{clientv3.OpPut(s.WantedKey(), val)})
}

// AdvanceDirective moves a directive forward for a shard holder: it writes
// d (its new state and contents) and, when quota is not nil, the shard's
// new quota, in one transaction guarded by the shard's epoch and by the
// directive being unchanged since it was read (d.ModRevision). It returns
// the directive's new revision; ErrFenced when either guard fails.
func (s *Store) AdvanceDirective(ctx context.Context, shard uint16, epoch int64, d Directive, quota []QuotaEntry) (int64, error) {
	val, err := marshal(d)
	if err != nil {
		return 0, err
	}
	key := s.DirectivePrefix() + d.ID
	ops := []clientv3.Op{clientv3.OpPut(key, val)}
	if quota != nil {
		q, err := marshal(quota)
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(s.QuotaKey(shard), q))
	}
	resp, err := s.txn(ctx, []clientv3.Cmp{s.ShardGuard(shard, epoch),
		clientv3.Compare(clientv3.ModRevision(key), "=", d.ModRevision)}, ops, nil)
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, ErrFenced
	}
	return resp.Header.Revision, nil
}
