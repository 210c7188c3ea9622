package head

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tide-project/tide/internal/etcdstore"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// Store is the cluster state the head keeps: every method the head, its
// tests and the pool controllers (through Journal) call. Two
// implementations satisfy it: the SQLite store (internal/store, the
// embedded default) and the etcd store (internal/etcdstore, for several
// heads). Both run the one conformance suite in internal/store/storetest;
// the guarantees each method must keep are documented on the SQLite
// store's method of the same name.
type Store interface {
	// StartEpoch increments and returns the head epoch.
	StartEpoch(ctx context.Context) (int64, error)
	// Close releases the store.
	Close() error

	InsertInstances(ctx context.Context, ins []store.Instance, now time.Time) error
	GetInstance(ctx context.Context, id string) (*store.Instance, error)
	GetInstanceByName(ctx context.Context, name string) (*store.Instance, error)
	ListInstances(ctx context.Context, f store.Filter) ([]*store.Instance, error)
	DeleteInstance(ctx context.Context, id string) error
	DeleteTerminalInstances(ctx context.Context, status store.Status) ([]string, error)
	ApplyHeartbeat(ctx context.Context, in store.HeartbeatInput, now time.Time) (store.HeartbeatResult, error)
	Assign(ctx context.Context, as []store.Assignment, now time.Time) ([]store.Assignment, error)
	RequestCancel(ctx context.Context, id string, grace time.Duration, now time.Time) (store.CancelResult, error)
	// FailPending fails those of ids still PENDING (a deadline such as
	// max_wait gave up on them) and returns the ids it failed.
	FailPending(ctx context.Context, ids []string, reason string, now time.Time) ([]string, error)
	CountInstances(ctx context.Context, f store.Filter) (int, error)
	Attempts(ctx context.Context, instanceID string) ([]store.AttemptRecord, error)
	MoveInstance(ctx context.Context, id string, attempt int64, worker, reason string, now time.Time) (bool, error)

	RegisterWorker(ctx context.Context, r store.Registration, now time.Time) (*store.Worker, error)
	GetWorker(ctx context.Context, id string) (*store.Worker, error)
	ListWorkers(ctx context.Context) ([]*store.Worker, error)
	MarkSuspect(ctx context.Context, cutoff time.Time) (int, error)
	MarkOffline(ctx context.Context, cutoff, now time.Time, hold time.Duration) ([]string, error)
	ReleaseHold(ctx context.Context, worker string, now time.Time) ([]string, error)
	DeleteWorker(ctx context.Context, id string, now time.Time) error
	RemoveWorker(ctx context.Context, id string, now time.Time, hold time.Duration) error
	DeleteOfflineWorkers(ctx context.Context, now time.Time) ([]string, error)
	DesiredFor(ctx context.Context, worker string) (store.DesiredState, error)
	SchedulingState(ctx context.Context) (*store.SchedulingState, error)
	SetCordoned(ctx context.Context, worker string, on bool, now time.Time) (bool, error)
	WorkerBusy(ctx context.Context, worker string) (bool, error)

	InsertEvents(ctx context.Context, evs []store.Event, now time.Time) ([]store.Event, error)
	ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error)

	AddCredential(ctx context.Context, c store.Credential) error
	UseCredential(ctx context.Context, hash, machineID, pool string, now time.Time) error
	RevokeCredentials(ctx context.Context, machineID string) (int, error)
	Credentials(ctx context.Context, machineID string) ([]store.Credential, error)

	// Journal returns the durable journal of one pool's controller.
	Journal(pool string) (controller.Journal, error)
}

// sqliteStore adapts the SQLite store to Store: its Journal returns the
// concrete *store.PoolJournal, which Go does not accept for an interface
// method returning controller.Journal.
type sqliteStore struct{ *store.Store }

// Journal returns the pool's journal in the SQLite database.
func (s sqliteStore) Journal(pool string) (controller.Journal, error) {
	j, err := s.Store.Journal(pool)
	if err != nil {
		return nil, err
	}
	return j, nil
}

var _ Store = sqliteStore{}

// ParseStoreURL parses Config.Store: it returns the etcd endpoints (none
// for SQLite) and the key prefix. The form is
// etcd://host:port,host:port[/prefix]; the prefix defaults to /tide/.
func ParseStoreURL(u string) (endpoints []string, prefix string, err error) {
	if u == "" || u == "sqlite" {
		return nil, "", nil
	}
	rest, ok := strings.CutPrefix(u, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("store %q: want sqlite or etcd://host:port,...[/prefix]", u)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	for _, h := range strings.Split(hosts, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, "", fmt.Errorf("store %q: endpoint %q: want host:port", u, h)
		}
		endpoints = append(endpoints, h)
	}
	prefix = etcdstore.DefaultPrefix
	if path = strings.Trim(path, "/"); path != "" {
		prefix = "/" + path + "/"
	}
	return endpoints, prefix, nil
}

// openStore opens the store cfg names: the SQLite file under DataDir, or
// the etcd cluster of cfg.Store.
func openStore(ctx context.Context, cfg Config) (Store, error) {
	eps, prefix, err := ParseStoreURL(cfg.Store)
	if err != nil {
		return nil, err
	}
	if len(eps) > 0 {
		return openEtcd(ctx, cfg, eps, prefix)
	}
	st, err := store.Open(ctx, cfg.dbPath(), store.Options{Durable: cfg.Durable, EventRetention: cfg.EventRetention})
	if err != nil {
		return nil, err
	}
	return sqliteStore{st}, nil
}

// openEtcd connects to the etcd cluster (TLS when cfg.EtcdCA is set) and
// checks that it answers.
func openEtcd(ctx context.Context, cfg Config, eps []string, prefix string) (Store, error) {
	scheme := "http://"
	var tlsCfg *tls.Config
	if cfg.EtcdCA != "" {
		scheme = "https://"
		pem, err := os.ReadFile(cfg.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("etcd ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd ca %s: no PEM certificate in it", cfg.EtcdCA)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if cfg.EtcdCert != "" {
			cert, err := tls.LoadX509KeyPair(cfg.EtcdCert, cfg.EtcdKey)
			if err != nil {
				return nil, fmt.Errorf("etcd client certificate: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{cert}
		}
	}
	urls := make([]string, len(eps))
	for i, e := range eps {
		urls[i] = scheme + e
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, TLS: tlsCfg,
		Logger: zap.NewNop(), DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", urls, err)
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(c, prefix+"meta/epoch"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v: %w", urls, err)
	}
	st, err := etcdstore.New(cli, etcdstore.Options{Prefix: prefix, EventRetention: cfg.EventRetention})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return etcdStore{st}, nil
}

// etcdStore is the etcd store; Close closes its client too.
type etcdStore struct{ *etcdstore.Store }

// Close closes the etcd client.
func (s etcdStore) Close() error { return s.Client().Close() }

var _ Store = etcdStore{}
