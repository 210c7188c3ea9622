package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/reconcile"
)

// journalSchema is migration 2: one row per pool (epoch, serial counter,
// last desired count; desired is NULL until first set) and one row per
// machine record of the pool's controller.
const journalSchema = `
CREATE TABLE pool_journals (
	pool    TEXT PRIMARY KEY,
	epoch   INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
	serial  INTEGER NOT NULL DEFAULT 0 CHECK (serial >= 0),
	desired INTEGER CHECK (desired >= 0)
);

CREATE TABLE pool_journal_records (
	pool       TEXT NOT NULL REFERENCES pool_journals(pool),
	machine_id TEXT NOT NULL,
	ordinal    INTEGER NOT NULL,
	offering   TEXT NOT NULL DEFAULT '',
	serial     INTEGER NOT NULL DEFAULT 0 CHECK (serial >= 0),
	intent     TEXT NOT NULL CHECK (intent IN ('create', 'delete')),
	PRIMARY KEY (pool, machine_id)
) WITHOUT ROWID;
`

// PoolJournal is controller.Journal in the store's SQLite database: the
// durable memory of one pool's controller, so that a head restarted on the
// same database adopts every machine its pools had (DESIGN.md invariant 5).
//
// Every write is one transaction on the store's writer connection that
// first reads the pool's epoch and refuses an older one with an error
// wrapping controller.ErrStaleEpoch, changing nothing. The check is in the
// database, not in memory, so it fences controllers in other processes (two
// heads on one database) as well as in this one. RaiseEpoch is a single
// UPDATE ... RETURNING and never returns the same epoch twice. A method
// returns once its transaction has committed: it survives a crash of the
// process (Options.Durable: of the machine).
//
// Safe for concurrent use.
type PoolJournal struct {
	s    *Store
	pool string
}

var _ controller.Journal = (*PoolJournal)(nil)

// Journal returns the journal of pool. It does no I/O: the pool's row is
// made by its first write.
func (s *Store) Journal(pool string) (*PoolJournal, error) {
	if pool == "" {
		return nil, errors.New("journal: pool: must be set")
	}
	return &PoolJournal{s: s, pool: pool}, nil
}

// Pool returns the pool the journal belongs to.
func (j *PoolJournal) Pool() string { return j.pool }

func (j *PoolJournal) errorf(op string, err error) error {
	return fmt.Errorf("journal of pool %q: %s: %w", j.pool, op, err)
}

// Load returns the journal's state, read in one transaction (a consistent
// snapshot). A pool never written to has the zero state.
func (j *PoolJournal) Load(ctx context.Context) (controller.JournalState, error) {
	var st controller.JournalState
	tx, err := j.s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return st, j.errorf("load", err)
	}
	defer tx.Rollback()
	var epoch, serial int64
	var desired sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT epoch, serial, desired FROM pool_journals WHERE pool = ?`, j.pool).
		Scan(&epoch, &serial, &desired)
	if errors.Is(err, sql.ErrNoRows) {
		return controller.JournalState{Records: []controller.Record{}}, nil
	}
	if err != nil {
		return st, j.errorf("load", err)
	}
	st.Epoch, st.Serial = uint64(epoch), uint64(serial)
	if desired.Valid {
		st.Desired, st.HasDesired = int(desired.Int64), true
	}
	rows, err := tx.QueryContext(ctx, `SELECT machine_id, ordinal, offering, serial, intent
		FROM pool_journal_records WHERE pool = ? ORDER BY machine_id`, j.pool)
	if err != nil {
		return st, j.errorf("load records", err)
	}
	defer rows.Close()
	st.Records = []controller.Record{}
	for rows.Next() {
		var r controller.Record
		var ordinal, serial int64
		if err := rows.Scan(&r.MachineID, &ordinal, &r.Offering, &serial, &r.Intent); err != nil {
			return st, j.errorf("load records", err)
		}
		r.Ordinal, r.Serial = reconcile.NodeID(ordinal), uint64(serial)
		st.Records = append(st.Records, r)
	}
	if err := rows.Err(); err != nil {
		return st, j.errorf("load records", err)
	}
	return st, nil
}

// RaiseEpoch increments the pool's epoch and returns the new value.
func (j *PoolJournal) RaiseEpoch(ctx context.Context) (uint64, error) {
	var e int64
	err := j.s.w.QueryRowContext(ctx, `INSERT INTO pool_journals(pool, epoch) VALUES (?, 1)
		ON CONFLICT(pool) DO UPDATE SET epoch = epoch + 1 RETURNING epoch`, j.pool).Scan(&e)
	if err != nil {
		return 0, j.errorf("raise epoch", err)
	}
	return uint64(e), nil
}

// fenced runs fn in one write transaction after checking that epoch is not
// below the pool's; the pool's row is made if it has none.
func (j *PoolJournal) fenced(ctx context.Context, epoch uint64, fn func(tx *sql.Tx) error) error {
	if epoch > math.MaxInt64 {
		return fmt.Errorf("epoch: %d is out of range", epoch)
	}
	tx, err := j.s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO pool_journals(pool) VALUES (?) ON CONFLICT(pool) DO NOTHING`, j.pool); err != nil {
		return err
	}
	var cur int64
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM pool_journals WHERE pool = ?`, j.pool).Scan(&cur); err != nil {
		return err
	}
	if epoch < uint64(cur) {
		return fmt.Errorf("epoch %d, journal is at %d: %w", epoch, cur, controller.ErrStaleEpoch)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// NextSerial increments the serial counter and returns the new value.
func (j *PoolJournal) NextSerial(ctx context.Context, epoch uint64) (uint64, error) {
	var s int64
	err := j.fenced(ctx, epoch, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE pool_journals SET serial = serial + 1 WHERE pool = ? RETURNING serial`, j.pool).Scan(&s)
	})
	if err != nil {
		return 0, j.errorf("next serial", err)
	}
	return uint64(s), nil
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
	err := j.fenced(ctx, epoch, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO pool_journal_records(pool, machine_id, ordinal, offering, serial, intent)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(pool, machine_id) DO UPDATE SET ordinal = excluded.ordinal, offering = excluded.offering,
				serial = excluded.serial, intent = excluded.intent`,
			j.pool, r.MachineID, int64(r.Ordinal), r.Offering, int64(r.Serial), string(r.Intent))
		return err
	})
	if err != nil {
		return j.errorf(op, err)
	}
	return nil
}

// Remove deletes the record of machineID; an absent record is not an error.
func (j *PoolJournal) Remove(ctx context.Context, epoch uint64, machineID string) error {
	err := j.fenced(ctx, epoch, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM pool_journal_records WHERE pool = ? AND machine_id = ?`, j.pool, machineID)
		return err
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
	err := j.fenced(ctx, epoch, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE pool_journals SET desired = ? WHERE pool = ?`, int64(desired), j.pool)
		return err
	})
	if err != nil {
		return j.errorf("set desired", err)
	}
	return nil
}
