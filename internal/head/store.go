package head

import (
	"context"
	"time"

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

	RegisterWorker(ctx context.Context, r store.Registration, now time.Time) (*store.Worker, error)
	GetWorker(ctx context.Context, id string) (*store.Worker, error)
	ListWorkers(ctx context.Context) ([]*store.Worker, error)
	MarkSuspect(ctx context.Context, cutoff time.Time) (int, error)
	MarkOffline(ctx context.Context, cutoff, now time.Time) ([]string, error)
	DeleteWorker(ctx context.Context, id string, now time.Time) error
	RemoveWorker(ctx context.Context, id string, now time.Time) error
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

// openStore opens the store cfg names: the SQLite file under DataDir.
func openStore(ctx context.Context, cfg Config) (Store, error) {
	st, err := store.Open(ctx, cfg.dbPath(), store.Options{Durable: cfg.Durable, EventRetention: cfg.EventRetention})
	if err != nil {
		return nil, err
	}
	return sqliteStore{st}, nil
}
