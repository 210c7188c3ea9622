// Package store keeps the head's cluster state (workers, instances, GPU
// allocations) and the pool controllers' journals in SQLite through the
// pure-Go modernc.org/sqlite driver.
//
// Guarantees:
//   - The database runs in WAL mode with synchronous=NORMAL: a committed
//     transaction survives a crash of the process (kill -9) at any moment.
//     Options.Durable selects synchronous=FULL to survive power loss too.
//   - Every state transition is one conditional UPDATE guarded by the
//     expected status and, for anything a worker reports, by the attempt and
//     the assigned worker: a stale or racing writer changes nothing, and no
//     transition is decided on a value read earlier (no read-then-write).
//   - Each change of a worker's desired set bumps that worker's generation in
//     the same transaction, so generations are durable.
//   - Writes go through one connection (SQLite has one writer); reads use a
//     separate pool of read-only connections and never block writers.
//
// Instance lifecycle (PyLet's, plus requeue by restart policy):
//
//	PENDING ──assign──► ASSIGNED ──► RUNNING ──► COMPLETED | FAILED
//	   ▲  │                 │           │
//	   │  └─cancel─► CANCELLED ◄────────┴── UNKNOWN (worker offline)
//	   └──── restart policy (attempt+1 on the next assignment) ◄──┘
//
// The store takes time as an argument (now) and never reads a clock.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Options tunes Open.
type Options struct {
	// Durable makes every commit fsync (synchronous=FULL). Without it a
	// commit survives a process crash but may be lost on power loss.
	Durable bool
	// ReadConns is the size of the read pool; 4 when zero.
	ReadConns int
	// EventRetention is how many of the newest events the events table
	// keeps; DefaultEventRetention when zero.
	EventRetention int
}

// Store is the SQLite-backed state. It is safe for concurrent use.
type Store struct {
	w    *sql.DB // single writer connection
	r    *sql.DB // read-only pool
	path string
	// eventKeep and eventTrim bound the events table: every eventTrim
	// event ids, rows older than the newest eventKeep are deleted.
	eventKeep, eventTrim int64

	// insertInstance and insertLabel are the hot submit statements,
	// prepared once on the writer connection and bound to each transaction,
	// so a submit does not parse SQL.
	insertInstance, insertLabel *sql.Stmt
}

// Open opens (creating if needed) the database at path and applies pending
// migrations.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("open store: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store: create directory: %w", err)
	}
	if err := checkWAL(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	sync := "NORMAL"
	if opts.Durable {
		sync = "FULL"
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	common := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(" + sync + ")"
	w, err := sql.Open("sqlite", base+"?"+common+"&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	s := &Store{w: w, path: path}
	s.eventKeep, s.eventTrim = eventBounds(opts.EventRetention)
	if err := s.quickCheck(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if s.insertInstance, err = w.PrepareContext(ctx, insertInstanceSQL); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: prepare: %w", path, err)
	}
	if s.insertLabel, err = w.PrepareContext(ctx, insertLabelSQL); err != nil {
		s.insertInstance.Close()
		w.Close()
		return nil, fmt.Errorf("open store %s: prepare: %w", path, err)
	}
	n := opts.ReadConns
	if n <= 0 {
		n = 4
	}
	r, err := sql.Open("sqlite", base+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: read pool: %w", path, err)
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	return s, nil
}

// Path returns the database file path.
func (s *Store) Path() string { return s.path }

// Close closes both connection pools.
func (s *Store) Close() error {
	return errors.Join(s.insertInstance.Close(), s.insertLabel.Close(), s.r.Close(), s.w.Close())
}

// migrations are applied in order; user_version records how many ran.
var migrations = []string{
	// 1: PyLet's schema (A9) extended with resources in tide units, restart
	// policy, pools, labels table, generations and the head epoch.
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
INSERT INTO meta(key, value) VALUES ('epoch', '0');

CREATE TABLE workers (
	id                TEXT PRIMARY KEY,
	host              TEXT NOT NULL,
	pool              TEXT NOT NULL DEFAULT '',
	status            TEXT NOT NULL DEFAULT 'ONLINE',
	token_hash        TEXT NOT NULL DEFAULT '',
	boot_id           TEXT NOT NULL DEFAULT '',
	cpu_milli         INTEGER NOT NULL DEFAULT 0,
	memory_bytes      INTEGER NOT NULL DEFAULT 0,
	gpus              INTEGER NOT NULL DEFAULT 0,
	labels            TEXT NOT NULL DEFAULT '{}',
	log_port          INTEGER NOT NULL DEFAULT 0,
	generation        INTEGER NOT NULL DEFAULT 0,
	ordinal           INTEGER NOT NULL DEFAULT 0,
	registered_at     INTEGER NOT NULL,
	last_heartbeat_at INTEGER NOT NULL
);
CREATE INDEX workers_status ON workers(status);

CREATE TABLE instances (
	id                    TEXT PRIMARY KEY,
	name                  TEXT NOT NULL UNIQUE,
	command               TEXT NOT NULL,
	status                TEXT NOT NULL DEFAULT 'PENDING',
	attempt               INTEGER NOT NULL DEFAULT 0,
	assigned_worker       TEXT,
	pool                  TEXT NOT NULL DEFAULT '',
	cpu_milli             INTEGER NOT NULL DEFAULT 0,
	memory_bytes          INTEGER NOT NULL DEFAULT 0,
	gpus                  INTEGER NOT NULL DEFAULT 0,
	exclusive             INTEGER NOT NULL DEFAULT 1,
	daemon                INTEGER NOT NULL DEFAULT 0,
	labels                TEXT NOT NULL DEFAULT '{}',
	env                   TEXT NOT NULL DEFAULT '{}',
	target_worker         TEXT NOT NULL DEFAULT '',
	requested_gpu_indices TEXT NOT NULL DEFAULT '[]',
	venv                  TEXT NOT NULL DEFAULT '',
	exit_code             INTEGER,
	port                  INTEGER,
	endpoint              TEXT NOT NULL DEFAULT '',
	failure_reason        TEXT NOT NULL DEFAULT '',
	restart_policy        TEXT NOT NULL DEFAULT 'never',
	max_restarts          INTEGER NOT NULL DEFAULT 0,
	restarts              INTEGER NOT NULL DEFAULT 0,
	grace_period_ns       INTEGER NOT NULL DEFAULT 0,
	cancel_gen            INTEGER NOT NULL DEFAULT 0,
	created_at            INTEGER NOT NULL,
	queued_at             INTEGER NOT NULL,
	assigned_at           INTEGER,
	started_at            INTEGER,
	ended_at              INTEGER,
	last_report_at        INTEGER,
	cancel_requested_at   INTEGER
);
CREATE INDEX instances_status ON instances(status, queued_at);
CREATE INDEX instances_worker ON instances(assigned_worker, status);
CREATE INDEX instances_created ON instances(created_at);

CREATE TABLE instance_labels (
	instance_id TEXT NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
	key         TEXT NOT NULL,
	value       TEXT NOT NULL,
	PRIMARY KEY (instance_id, key)
);
CREATE INDEX instance_labels_kv ON instance_labels(key, value);

CREATE TABLE instance_allocations (
	instance_id TEXT NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
	attempt     INTEGER NOT NULL,
	worker_id   TEXT NOT NULL,
	gpu_index   INTEGER NOT NULL,
	exclusive   INTEGER NOT NULL,
	PRIMARY KEY (instance_id, attempt, gpu_index)
);
CREATE INDEX instance_allocations_worker ON instance_allocations(worker_id);
`,
	// 2: the pool controllers' journals (journal.go).
	journalSchema,
	// 3: cordoned workers (cordon.go) and the events table (events.go).
	cordonSchema + eventsSchema,
	// 4: machines' join credentials (credentials.go).
	credentialsSchema,
	// 5: instances that consolidation may move (Instance.Restartable).
	`ALTER TABLE instances ADD COLUMN restartable INTEGER NOT NULL DEFAULT 0;`,
	// 6: every attempt of an instance (attempts.go).
	attemptsSchema,
	// 7: a PENDING instance requeued from an offline worker is held out of
	// scheduling until that worker's fence has stopped the old attempt
	// (Instance.NotBefore, Instance.HeldBy; issue 16).
	`ALTER TABLE instances ADD COLUMN not_before INTEGER;
ALTER TABLE instances ADD COLUMN held_by TEXT NOT NULL DEFAULT '';`,
	// 8: an instance's own max_wait (Instance.MaxWait; issue 35).
	`ALTER TABLE instances ADD COLUMN max_wait_ns INTEGER NOT NULL DEFAULT 0;`,
	// 9: priorities and gangs (Instance.Priority, Instance.Gang*; issue 36).
	`ALTER TABLE instances ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN gang_id TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN gang_name TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN gang_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN gang_rank INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN gang_max_wait_ns INTEGER NOT NULL DEFAULT 0;`,
}

// SchemaVersion is the number of migrations this build knows.
var SchemaVersion = len(migrations)

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: read user_version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("migrate: database schema version %d is newer than this build (%d)", v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migrate: apply migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(len(migrations))); err != nil {
		return fmt.Errorf("migrate: set user_version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// StartEpoch increments and returns the head epoch. A head calls it once at
// start; wire generations are scoped by it, so a worker that saw a previous
// head's generation is answered at once with a full desired set.
func (s *Store) StartEpoch(ctx context.Context) (int64, error) {
	var e int64
	err := s.w.QueryRowContext(ctx,
		`UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch' RETURNING CAST(value AS INTEGER)`).Scan(&e)
	if err != nil {
		return 0, fmt.Errorf("start epoch: %w", err)
	}
	return e, nil
}

// Epoch returns the current head epoch without changing it.
func (s *Store) Epoch(ctx context.Context) (int64, error) {
	var e int64
	if err := s.r.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch'`).Scan(&e); err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	return e, nil
}
