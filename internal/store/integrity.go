package store

import (
	"context"
	"fmt"
	"strings"
)

// ErrCorrupt is wrapped by the error Open returns for a database file that
// fails SQLite's quick_check.
var ErrCorrupt = fmt.Errorf("database file is corrupt")

// quickCheck runs PRAGMA quick_check (the O(N) structural check of every
// page and index, without integrity_check's index-content cross check)
// and returns an error naming the file and SQLite's first findings when
// it is not "ok". Open runs it so a head never starts on a torn or
// corrupted file it would silently misread; docs/reliability.md has its
// cost.
func (s *Store) quickCheck(ctx context.Context) error {
	rows, err := s.w.QueryContext(ctx, `PRAGMA quick_check(5)`)
	if err != nil {
		return checkFailed(err, s.path)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("%w: quick_check: %v", ErrCorrupt, err)
		}
		found = append(found, strings.ReplaceAll(strings.TrimSpace(line), "\n", "; "))
	}
	if err := rows.Err(); err != nil {
		return checkFailed(err, s.path)
	}
	if len(found) == 1 && found[0] == "ok" {
		return nil
	}
	return fmt.Errorf("%w: %s (restore the data dir from a backup, or move the file away to start empty)", ErrCorrupt, strings.Join(found, "; "))
}
