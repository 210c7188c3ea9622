package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// credentialsSchema is migration 4: the join credentials of machines. A
// credential lets one machine, and only it, register as a worker: the head
// keeps the SHA-256 of the secret, never the secret, with the pool and
// machine id it was minted for. An unused credential expires; a used one
// stays good for its machine (a worker re-registers after a head restart)
// until the machine is deleted, which revokes every credential of it.
const credentialsSchema = `
CREATE TABLE machine_credentials (
	hash        TEXT PRIMARY KEY,
	machine_id  TEXT NOT NULL,
	pool        TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	used_at     INTEGER
) WITHOUT ROWID;
CREATE INDEX machine_credentials_machine ON machine_credentials(machine_id);
`

// ErrCredential is returned (wrapped) by UseCredential when the credential
// is unknown, expired, revoked or minted for another machine or pool.
var ErrCredential = errors.New("invalid machine credential")

// Credential is one machine's join credential as stored (hash only).
type Credential struct {
	Hash      string
	MachineID string
	Pool      string
	CreatedAt time.Time
	ExpiresAt time.Time
	// UsedAt is the first registration with it; zero while unused.
	UsedAt time.Time
}

// AddCredential stores a credential minted for a machine. Expired unused
// credentials of every machine are removed in the same transaction, so the
// table holds only credentials that can still be used.
func (s *Store) AddCredential(ctx context.Context, c Credential) error {
	if c.Hash == "" || c.MachineID == "" {
		return errors.New("add credential: hash and machine id must be set")
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add credential: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM machine_credentials WHERE used_at IS NULL AND expires_at <= ?`,
		c.CreatedAt.UnixNano()); err != nil {
		return fmt.Errorf("add credential: expire: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO machine_credentials (hash, machine_id, pool, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?)`, c.Hash, c.MachineID, c.Pool, c.CreatedAt.UnixNano(), c.ExpiresAt.UnixNano()); err != nil {
		return fmt.Errorf("add credential for machine %s: %w", c.MachineID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add credential: %w", err)
	}
	return nil
}

// UseCredential checks a credential presented at registration against the
// worker id and pool it registers as, and marks it used. It fails with
// ErrCredential unless the hash is known, minted for exactly that machine
// and pool, and either used before or not yet expired at now.
func (s *Store) UseCredential(ctx context.Context, hash, machineID, pool string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, `UPDATE machine_credentials SET used_at = COALESCE(used_at, ?)
		WHERE hash = ? AND machine_id = ? AND pool = ? AND (used_at IS NOT NULL OR expires_at > ?)`,
		now.UnixNano(), hash, machineID, pool, now.UnixNano())
	if err != nil {
		return fmt.Errorf("use credential: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("machine %s, pool %q: %w", machineID, pool, ErrCredential)
	}
	return nil
}

// RevokeCredentials removes every credential of a machine (it was deleted)
// and reports how many there were.
func (s *Store) RevokeCredentials(ctx context.Context, machineID string) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM machine_credentials WHERE machine_id = ?`, machineID)
	if err != nil {
		return 0, fmt.Errorf("revoke credentials of machine %s: %w", machineID, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// Credentials lists the stored credentials of a machine (hashes only).
func (s *Store) Credentials(ctx context.Context, machineID string) ([]Credential, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT hash, machine_id, pool, created_at, expires_at, used_at
		FROM machine_credentials WHERE machine_id = ? ORDER BY created_at`, machineID)
	if err != nil {
		return nil, fmt.Errorf("credentials of machine %s: %w", machineID, err)
	}
	defer rows.Close()
	var out []Credential
	for rows.Next() {
		var c Credential
		var created, expires int64
		var used sql.NullInt64
		if err := rows.Scan(&c.Hash, &c.MachineID, &c.Pool, &created, &expires, &used); err != nil {
			return nil, err
		}
		c.CreatedAt, c.ExpiresAt = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
		c.UsedAt = fromTS(used)
		out = append(out, c)
	}
	return out, rows.Err()
}
