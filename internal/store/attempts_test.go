package store

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"
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

// Every path that ends an attempt leaves it in the history with its
// outcome: a failure the restart policy retried, a worker that went offline
// (LOST), a late report of a fenced attempt (ignored), a success.
func TestAttemptHistory(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w1", 0)
	in := newInst("a")
	in.RestartPolicy, in.MaxRestarts = RestartOnFailure, 5
	mustInsert(t, s, in)
	if as := mustAttempts(t, s, "a"); len(as) != 0 {
		t.Fatalf("pending instance has attempts %v", outcomes(as))
	}

	// Attempt 1 runs and fails; the policy queues it again.
	att := assign(t, s, "a", "w1")
	report(t, s, "w1", -1, Report{InstanceID: "a", Attempt: att, Status: ReportRunning, Port: ip(80)})
	if got := outcomes(mustAttempts(t, s, "a")); !slices.Equal(got, []string{"w1:RUNNING"}) {
		t.Fatalf("running: %v", got)
	}
	report(t, s, "w1", -1, Report{InstanceID: "a", Attempt: att, Status: ReportFailed, ExitCode: ip(3), FailureReason: "boom"})

	// Attempt 2 is assigned, then its worker goes offline: LOST, requeued.
	att = assign(t, s, "a", "w1")
	off := t0.Add(time.Minute)
	if _, err := s.MarkOffline(ctx, off, off); err != nil {
		t.Fatal(err)
	}
	// A late report of attempt 2 is fenced and changes no history.
	report(t, s, "w1", -1, Report{InstanceID: "a", Attempt: att, Status: ReportCompleted, ExitCode: ip(0)})

	// Attempt 3 on another worker completes.
	mustWorker(t, s, "w2", 0)
	att = assign(t, s, "a", "w2")
	report(t, s, "w2", -1, Report{InstanceID: "a", Attempt: att, Status: ReportRunning})
	report(t, s, "w2", -1, Report{InstanceID: "a", Attempt: att, Status: ReportCompleted, ExitCode: ip(0)})

	as := mustAttempts(t, s, "a")
	if got, want := outcomes(as), []string{"w1:FAILED", "w1:LOST", "w2:COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if as[0].Reason != "boom" || as[0].ExitCode == nil || *as[0].ExitCode != 3 || as[0].StartedAt.IsZero() || as[0].EndedAt.IsZero() {
		t.Fatalf("failed attempt: %+v", as[0])
	}
	if !as[1].StartedAt.IsZero() || !as[1].EndedAt.Equal(off) {
		t.Fatalf("lost attempt: %+v, want never started, ended at %v", as[1], off)
	}
	if as[2].ExitCode == nil || *as[2].ExitCode != 0 || as[2].EndedAt.IsZero() {
		t.Fatalf("completed attempt: %+v", as[2])
	}
	for i, a := range as {
		if a.Attempt != int64(i+1) {
			t.Fatalf("attempt numbers %v", outcomes(as))
		}
	}
	if _, err := s.Attempts(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Attempts of unknown = %v, want ErrNotFound", err)
	}
}

// A cancel ends the running attempt as CANCELLED; deleting the instance
// deletes its history.
func TestAttemptHistoryCancelAndDelete(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	mustInsert(t, s, newInst("c"))
	att := assign(t, s, "c", "w")
	report(t, s, "w", -1, Report{InstanceID: "c", Attempt: att, Status: ReportRunning})
	if _, err := s.RequestCancel(ctx, "c", 0, t0); err != nil {
		t.Fatal(err)
	}
	if got := outcomes(mustAttempts(t, s, "c")); !slices.Equal(got, []string{"w:RUNNING"}) {
		t.Fatalf("cancel requested: %v", got)
	}
	report(t, s, "w", -1, Report{InstanceID: "c", Attempt: att, Status: ReportCancelled})
	if got := outcomes(mustAttempts(t, s, "c")); !slices.Equal(got, []string{"w:CANCELLED"}) {
		t.Fatalf("cancelled: %v", got)
	}
	if err := s.DeleteInstance(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM attempts`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("attempt rows after delete: %d, %v", n, err)
	}
}

// An instance restarted forever keeps only the newest MaxAttemptHistory
// attempts.
func TestAttemptHistoryBounded(t *testing.T) {
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	in := newInst("r")
	in.RestartPolicy, in.MaxRestarts = RestartAlways, MaxAttemptHistory+20
	mustInsert(t, s, in)
	for range MaxAttemptHistory + 10 {
		att := assign(t, s, "r", "w")
		report(t, s, "w", -1, Report{InstanceID: "r", Attempt: att, Status: ReportCompleted, ExitCode: ip(0)})
	}
	as := mustAttempts(t, s, "r")
	if len(as) != MaxAttemptHistory || as[0].Attempt != 11 || as[len(as)-1].Attempt != MaxAttemptHistory+10 {
		t.Fatalf("kept %d attempts %d..%d, want %d ending at %d", len(as), as[0].Attempt, as[len(as)-1].Attempt,
			MaxAttemptHistory, MaxAttemptHistory+10)
	}
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
	for _, q := range []string{`DROP TRIGGER attempts_begin`, `DROP TRIGGER attempts_progress`, `DROP TABLE attempts`,
		`PRAGMA user_version = 4`} {
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
