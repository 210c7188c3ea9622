package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

func mustAttempts(t *testing.T, s *Store, id string) []AttemptRecord {
	t.Helper()
	as, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// outcomes lists each attempt's worker and status, for comparing in one line.
func outcomes(as []AttemptRecord) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Worker + ":" + string(a.Status)
	}
	return out
}

// A database made before the history existed gains it on open: the current
// attempt of every placed instance is backfilled.
func TestAttemptHistoryBackfill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustWorker(t, s, "w", 0)
	mustInsert(t, s, newInst("old"), newInst("queued"))
	assign(t, s, "old", "w")
	// Roll the schema back to before the history: what an older build left.
	for _, q := range append(rollback9, `DROP TRIGGER attempts_begin`, `DROP TRIGGER attempts_progress`, `DROP TABLE attempts`,
		`ALTER TABLE instances DROP COLUMN not_before`, `ALTER TABLE instances DROP COLUMN held_by`,
		`ALTER TABLE instances DROP COLUMN max_wait_ns`, `PRAGMA user_version = 5`) {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := outcomes(mustAttempts(t, s, "old")); !slices.Equal(got, []string{"w:ASSIGNED"}) {
		t.Fatalf("backfilled: %v", got)
	}
	if got := mustAttempts(t, s, "queued"); len(got) != 0 {
		t.Fatalf("never-placed instance backfilled: %v", outcomes(got))
	}
}
