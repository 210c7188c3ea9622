package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRestartableColumnMigrates opens a database made by a build that knew
// four migrations: the fifth adds the restartable column, old rows read as
// not restartable, and new rows keep the flag.
func TestRestartableColumnMigrates(t *testing.T) {
	s := reopenAfter(t, append(rollback9, `ALTER TABLE instances DROP COLUMN restartable`,
		`ALTER TABLE instances DROP COLUMN not_before`, `ALTER TABLE instances DROP COLUMN held_by`,
		`ALTER TABLE instances DROP COLUMN max_wait_ns`, `PRAGMA user_version = 4`)...)
	if in := mustGet(t, s, "old"); in.Restartable {
		t.Fatal("a row from schema 4 reads as restartable")
	}
	a := newInst("a")
	a.Restartable = true
	mustInsert(t, s, a, newInst("b"))
	if !mustGet(t, s, "a").Restartable || mustGet(t, s, "b").Restartable {
		t.Fatal("restartable flag not kept")
	}
}

// TestNotBeforeColumnsMigrate opens a database made by a build that knew
// six migrations: the seventh adds not_before and held_by; old rows read
// as not held, and a hold set later reads back.
func TestNotBeforeColumnsMigrate(t *testing.T) {
	s := reopenAfter(t, append(rollback9, `ALTER TABLE instances DROP COLUMN not_before`, `ALTER TABLE instances DROP COLUMN held_by`,
		`ALTER TABLE instances DROP COLUMN max_wait_ns`, `PRAGMA user_version = 6`)...)
	if in := mustGet(t, s, "old"); !in.NotBefore.IsZero() || in.HeldBy != "" {
		t.Fatalf("a row from schema 6 reads as held: %v by %q", in.NotBefore, in.HeldBy)
	}
	if _, err := s.w.Exec(`UPDATE instances SET not_before = 7, held_by = 'w' WHERE id = 'old'`); err != nil {
		t.Fatal(err)
	}
	if in := mustGet(t, s, "old"); in.NotBefore.UnixNano() != 7 || in.HeldBy != "w" {
		t.Fatalf("hold not read back: %v by %q", in.NotBefore, in.HeldBy)
	}
}

// TestMaxWaitColumnMigrates opens a database made by a build that knew
// seven migrations: the eighth adds max_wait_ns; old rows read as having
// no max_wait of their own, and a new row keeps its own.
func TestMaxWaitColumnMigrates(t *testing.T) {
	s := reopenAfter(t, append(rollback9, `ALTER TABLE instances DROP COLUMN max_wait_ns`, `PRAGMA user_version = 7`)...)
	if in := mustGet(t, s, "old"); in.MaxWait != 0 {
		t.Fatalf("a row from schema 7 reads with max_wait %v", in.MaxWait)
	}
	a := newInst("a")
	a.MaxWait = 90 * time.Second
	mustInsert(t, s, a)
	if got := mustGet(t, s, "a").MaxWait; got != 90*time.Second {
		t.Fatalf("max_wait read back as %v, want 1m30s", got)
	}
}

// rollback9 undoes migration 9 (priorities and gangs).
var rollback9 = []string{`ALTER TABLE instances DROP COLUMN priority`, `ALTER TABLE instances DROP COLUMN gang_id`,
	`ALTER TABLE instances DROP COLUMN gang_name`, `ALTER TABLE instances DROP COLUMN gang_size`,
	`ALTER TABLE instances DROP COLUMN gang_rank`, `ALTER TABLE instances DROP COLUMN gang_max_wait_ns`}

// TestPriorityGangColumnsMigrate opens a database made by a build that
// knew eight migrations: the ninth adds the priority and gang columns;
// old rows read with priority 0 and no gang, and new rows keep theirs.
func TestPriorityGangColumnsMigrate(t *testing.T) {
	s := reopenAfter(t, append(rollback9, `PRAGMA user_version = 8`)...)
	if in := mustGet(t, s, "old"); in.Priority != 0 || in.GangID != "" || in.GangSize != 0 {
		t.Fatalf("a row from schema 8 reads priority %d, gang %q of %d", in.Priority, in.GangID, in.GangSize)
	}
	a := newInst("a")
	a.Priority, a.GangID, a.GangName, a.GangSize, a.GangRank = 3, "a", "g", 2, 1
	mustInsert(t, s, a)
	if in := mustGet(t, s, "a"); in.Priority != 3 || in.GangID != "a" || in.GangName != "g" || in.GangSize != 2 || in.GangRank != 1 {
		t.Fatalf("new row: %+v", in)
	}
}

// reopenAfter creates a database, rolls it back to an older schema with
// rollback (column drops and the user_version), writes the row "old" as
// that schema would have, and opens the file again, so the migrations since
// run over it. The store is closed when the test ends.
func reopenAfter(t *testing.T, rollback ...string) *Store {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append(rollback, `INSERT INTO instances (id, name, command, created_at, queued_at) VALUES ('old', 'old', 'true', 1, 1)`) {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	if s, err = Open(ctx, path, Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
