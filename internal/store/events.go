package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// eventsSchema is part of migration 3: the events that explain what the
// autoscaler did or declined to do. AUTOINCREMENT keeps ids increasing even
// after the oldest rows are trimmed, so a reader resuming "since id" never
// sees an id twice.
const eventsSchema = `
CREATE TABLE events (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	time    INTEGER NOT NULL,
	pool    TEXT NOT NULL DEFAULT '',
	node    TEXT NOT NULL DEFAULT '',
	type    TEXT NOT NULL,
	reason  TEXT NOT NULL,
	message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_pool ON events(pool, id);
`

// DefaultEventRetention is how many events the store keeps by default.
const DefaultEventRetention = 100_000

// Field limits of an event; longer values are cut (messages carry provider
// error text, which is not bounded).
const (
	MaxEventField   = 253
	MaxEventMessage = 4096
)

// eventBounds returns how many events to keep and how often (in ids) to
// trim: a tenth of the retention, at most 1000, so the table holds between
// keep and keep+trim rows and a trim deletes a batch, not one row per insert.
func eventBounds(retention int) (keep, trim int64) {
	if retention <= 0 {
		retention = DefaultEventRetention
	}
	keep = int64(retention)
	trim = min(max(keep/10, 1), 1000)
	return keep, trim
}

// Event is one recorded event: something a pool's autoscaler decided,
// declined to do, or ran into.
type Event struct {
	// ID is assigned by the store, increasing in insertion order.
	ID   int64
	Time time.Time
	Pool string
	// Node names the node the event is about; empty for pool-wide events.
	Node string
	// Type is "Normal" or "Warning".
	Type string
	// Reason is a stable kebab-case code for tools.
	Reason string
	// Message says it in words for people.
	Message string
}

// EventFilter selects events in ListEvents.
type EventFilter struct {
	// Pool, when non-nil, keeps only that pool's events.
	Pool *string
	// After keeps only events with an ID above it.
	After int64
	// Limit bounds the answer; 0 means no bound.
	Limit int
	// Tail returns the newest Limit matching events instead of the oldest.
	// The answer is in ID order either way.
	Tail bool
}

// cut bounds s to n bytes; a rune torn by the cut is dropped.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// InsertEvents appends events in one transaction and returns them with
// their IDs. Type and Reason are required; a zero Time is now; fields longer
// than MaxEventField (MaxEventMessage for Message) are cut. When the new IDs
// cross a trim boundary, events older than the newest EventRetention are
// deleted in the same transaction.
func (s *Store) InsertEvents(ctx context.Context, evs []Event, now time.Time) ([]Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]Event, len(evs))
	for i, e := range evs {
		if e.Type == "" || e.Reason == "" {
			return nil, fmt.Errorf("insert event %d: type and reason are required", i)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Time = e.Time.UTC()
		e.Pool, e.Node = cut(e.Pool, MaxEventField), cut(e.Node, MaxEventField)
		e.Type, e.Reason = cut(e.Type, MaxEventField), cut(e.Reason, MaxEventField)
		e.Message = cut(e.Message, MaxEventMessage)
		out[i] = e
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("insert events: begin: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events (time, pool, node, type, reason, message)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`)
	if err != nil {
		return nil, fmt.Errorf("insert events: prepare: %w", err)
	}
	defer stmt.Close()
	for i := range out {
		e := &out[i]
		if err := stmt.QueryRowContext(ctx, e.Time.UnixNano(), e.Pool, e.Node, e.Type, e.Reason, e.Message).Scan(&e.ID); err != nil {
			return nil, fmt.Errorf("insert event %s/%s: %w", e.Pool, e.Reason, err)
		}
	}
	first, last := out[0].ID, out[len(out)-1].ID
	if (first-1)/s.eventTrim != last/s.eventTrim {
		if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE id <= ?`, last-s.eventKeep); err != nil {
			return nil, fmt.Errorf("insert events: trim: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("insert events: commit: %w", err)
	}
	return out, nil
}

// ListEvents returns the matching events in ID order.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit < 0 {
		return nil, errors.New("list events: limit must not be negative")
	}
	var (
		where = []string{"id > ?"}
		args  = []any{f.After}
	)
	if f.Pool != nil {
		where = append(where, "pool = ?")
		args = append(args, *f.Pool)
	}
	order := "ASC"
	if f.Tail {
		order = "DESC"
	}
	q := `SELECT id, time, pool, node, type, reason, message FROM events WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY id ` + order
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e  Event
			at sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &at, &e.Pool, &e.Node, &e.Type, &e.Reason, &e.Message); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		e.Time = fromTS(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if f.Tail {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}
