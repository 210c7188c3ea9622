package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCordonBlocksAssignAndSurvives: a cordoned worker gets no new
// assignment, even one decided before the cordon (the guard is in Assign's
// UPDATE); a cordon set before registration holds once the worker joins,
// survives re-registration and a reopen, and goes with the worker.
func TestCordonBlocksAssignAndSurvives(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	mustWorker(t, s, "w", 0)
	mustInsert(t, s, newInst("a"), newInst("b"))

	tests := []struct {
		name    string
		worker  string
		on      bool
		changed bool
	}{
		{"cordon", "w", true, true},
		{"cordon again keeps the first time", "w", true, false},
		{"cordon before registration", "later", true, true},
		{"uncordon unknown", "nobody", false, false},
	}
	for _, tc := range tests {
		changed, err := s.SetCordoned(ctx, tc.worker, tc.on, t0.Add(time.Minute))
		if err != nil || changed != tc.changed {
			t.Fatalf("%s: changed %t, %v; want %t", tc.name, changed, err, tc.changed)
		}
	}
	if _, err := s.SetCordoned(ctx, "", true, t0); err == nil {
		t.Fatal("cordon of an empty id succeeded")
	}
	w, err := s.GetWorker(ctx, "w")
	if err != nil || !w.Cordoned() || !w.CordonedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("cordoned worker: %+v %v", w, err)
	}
	got, err := s.Assign(ctx, []Assignment{{InstanceID: "a", Worker: "w"}}, t0)
	if err != nil || len(got) != 0 {
		t.Fatalf("assign to a cordoned worker applied: %v %v", got, err)
	}
	mustWorker(t, s, "later", 0)
	if got, _ := s.Assign(ctx, []Assignment{{InstanceID: "a", Worker: "later"}}, t0); len(got) != 0 {
		t.Fatal("assign to a worker cordoned before it registered applied")
	}
	mustWorker(t, s, "w", 0) // re-registration keeps the cordon
	s.Close()
	if s, err = Open(ctx, path, Options{}); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ListWorkers(ctx)
	if err != nil || len(ws) != 2 || !ws[0].Cordoned() || !ws[1].Cordoned() {
		t.Fatalf("after reopen: %+v %v", ws, err)
	}
	if changed, err := s.SetCordoned(ctx, "w", false, t0); err != nil || !changed {
		t.Fatalf("uncordon: %t %v", changed, err)
	}
	if got, _ := s.Assign(ctx, []Assignment{{InstanceID: "a", Worker: "w"}}, t0); len(got) != 1 {
		t.Fatal("assign after uncordon did not apply")
	}
	// Deleting the (offline) worker deletes its cordon: a worker of the
	// same name registering later is schedulable.
	if _, err := s.MarkOffline(ctx, t0.Add(time.Hour), t0.Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorker(ctx, "later", t0); err != nil {
		t.Fatal(err)
	}
	mustWorker(t, s, "later", 0)
	if got, _ := s.Assign(ctx, []Assignment{{InstanceID: "b", Worker: "later"}}, t0); len(got) != 1 {
		t.Fatal("a cordon outlived its deleted worker")
	}
}

// TestWorkerBusy: only ASSIGNED and RUNNING non-daemon instances make a
// worker busy.
func TestWorkerBusy(t *testing.T) {
	ctx := context.Background()
	daemon := func(id string) Instance { in := newInst(id); in.Daemon = true; return in }
	tests := []struct {
		name string
		run  func(t *testing.T, s *Store) // w is registered
		want bool
	}{
		{"empty", func(t *testing.T, s *Store) {}, false},
		{"pending only", func(t *testing.T, s *Store) { mustInsert(t, s, newInst("a")) }, false},
		{"assigned", func(t *testing.T, s *Store) { mustInsert(t, s, newInst("a")); assign(t, s, "a", "w") }, true},
		{"running", func(t *testing.T, s *Store) {
			mustInsert(t, s, newInst("a"))
			at := assign(t, s, "a", "w")
			report(t, s, "w", -1, Report{InstanceID: "a", Attempt: at, Status: ReportRunning})
		}, true},
		{"daemon running", func(t *testing.T, s *Store) {
			mustInsert(t, s, daemon("d"))
			at := assign(t, s, "d", "w")
			report(t, s, "w", -1, Report{InstanceID: "d", Attempt: at, Status: ReportRunning})
		}, false},
		{"completed", func(t *testing.T, s *Store) {
			mustInsert(t, s, newInst("a"))
			at := assign(t, s, "a", "w")
			report(t, s, "w", -1, Report{InstanceID: "a", Attempt: at, Status: ReportCompleted, ExitCode: ip(0)})
		}, false},
		{"unknown after offline", func(t *testing.T, s *Store) {
			mustInsert(t, s, newInst("a"))
			assign(t, s, "a", "w")
			if _, err := s.MarkOffline(ctx, t0.Add(time.Hour), t0.Add(time.Hour), 0); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"on another worker", func(t *testing.T, s *Store) {
			mustWorker(t, s, "x", 0)
			mustInsert(t, s, newInst("a"))
			assign(t, s, "a", "x")
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			mustWorker(t, s, "w", 0)
			tc.run(t, s)
			busy, err := s.WorkerBusy(ctx, "w")
			if err != nil || busy != tc.want {
				t.Fatalf("WorkerBusy = %t, %v; want %t", busy, err, tc.want)
			}
		})
	}
	s := openTest(t)
	if busy, err := s.WorkerBusy(ctx, "unknown"); err != nil || busy {
		t.Fatalf("unknown worker busy = %t, %v", busy, err)
	}
}

// TestHeartbeatReportsFirstStarts: the first RUNNING report of an attempt
// is returned with its wait since it was queued; a repeated report and a
// return from UNKNOWN of an attempt that had started are not.
func TestHeartbeatReportsFirstStarts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustWorker(t, s, "w", 0)
	a := newInst("a")
	a.Pool = "p"
	a.RestartPolicy, a.MaxRestarts = RestartAlways, 5
	mustInsert(t, s, a)
	at := assign(t, s, "a", "w")
	hb := func(at time.Time, rs ...Report) HeartbeatResult {
		t.Helper()
		res, err := s.ApplyHeartbeat(ctx, HeartbeatInput{WorkerID: "w", SeenGen: -1, Reports: rs}, at)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := hb(t0.Add(7*time.Second), Report{InstanceID: "a", Attempt: at, Status: ReportRunning})
	if len(res.Started) != 1 || res.Started[0] != (Started{InstanceID: "a", Pool: "p", Wait: 7 * time.Second}) {
		t.Fatalf("first RUNNING: %+v", res.Started)
	}
	if res := hb(t0.Add(8*time.Second), Report{InstanceID: "a", Attempt: at, Status: ReportRunning}); len(res.Started) != 0 {
		t.Fatalf("repeated RUNNING counted: %+v", res.Started)
	}
	// The worker goes offline and comes back: the attempt already started.
	if _, err := s.MarkOffline(ctx, t0.Add(time.Minute), t0.Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	// Restart policy always: offline requeued it; assign the new attempt.
	in := mustGet(t, s, "a")
	if in.Status != StatusPending {
		t.Fatalf("after offline: %s", in.Status)
	}
	hb(t0.Add(time.Minute + time.Second)) // back ONLINE
	at = assign(t, s, "a", "w")
	res = hb(t0.Add(time.Minute+3*time.Second), Report{InstanceID: "a", Attempt: at, Status: ReportRunning})
	if len(res.Started) != 1 || res.Started[0].Wait != 3*time.Second {
		t.Fatalf("second attempt's wait counts from its requeue: %+v", res.Started)
	}
	// An UNKNOWN attempt that had started is not started again.
	b := newInst("b")
	mustInsert(t, s, b)
	bt := assign(t, s, "b", "w")
	hb(t0.Add(2*time.Minute), Report{InstanceID: "b", Attempt: bt, Status: ReportRunning})
	if _, err := s.MarkOffline(ctx, t0.Add(3*time.Minute), t0.Add(3*time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	if st := mustGet(t, s, "b").Status; st != StatusUnknown {
		t.Fatalf("b after offline: %s", st)
	}
	res = hb(t0.Add(4*time.Minute), Report{InstanceID: "b", Attempt: bt, Status: ReportRunning})
	if res.Changed != 1 || len(res.Started) != 0 {
		t.Fatalf("UNKNOWN→RUNNING counted as a start: %+v", res)
	}
}

func TestEventsInsertListAndRetention(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "tide.db"), Options{EventRetention: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.InsertEvents(ctx, []Event{{Type: "Normal"}}, t0); err == nil {
		t.Fatal("an event without a reason was stored")
	}
	var all []Event
	for i := 1; i <= 95; i++ {
		pool := []string{"a", "b", ""}[i%3]
		evs, err := s.InsertEvents(ctx, []Event{{Pool: pool, Type: "Normal", Reason: "r", Message: fmt.Sprint(i)}},
			t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].ID != int64(i) || !evs[0].Time.Equal(t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("event %d: %+v", i, evs[0])
		}
		all = append(all, evs[0])
	}
	rows, err := s.ListEvents(ctx, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// Retention 20 trims every 2 ids: between 20 and 22 rows, the newest.
	if n := len(rows); n < 20 || n > 22 || rows[len(rows)-1].ID != 95 {
		t.Fatalf("after 95 inserts with retention 20: %d rows, last %+v", n, rows[len(rows)-1])
	}
	a, b := "a", ""
	tests := []struct {
		name string
		f    EventFilter
		want []int64
	}{
		{"after", EventFilter{After: 90}, []int64{91, 92, 93, 94, 95}},
		{"after with limit takes the oldest", EventFilter{After: 90, Limit: 2}, []int64{91, 92}},
		{"tail takes the newest, in order", EventFilter{Limit: 3, Tail: true}, []int64{93, 94, 95}},
		{"pool", EventFilter{Pool: &a, After: 85}, []int64{87, 90, 93}},
		{"default pool", EventFilter{Pool: &b, After: 85, Limit: 2, Tail: true}, []int64{92, 95}},
		{"nothing newer", EventFilter{After: 95}, nil},
	}
	for _, tc := range tests {
		got, err := s.ListEvents(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ids []int64
		for _, e := range got {
			ids = append(ids, e.ID)
			if want := all[e.ID-1]; e != want {
				t.Fatalf("%s: read %+v, stored %+v", tc.name, e, want)
			}
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, ids, tc.want)
		}
	}
	if _, err := s.ListEvents(ctx, EventFilter{Limit: -1}); err == nil {
		t.Fatal("negative limit accepted")
	}
}

func TestEventFieldsAreBounded(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	long := strings.Repeat("é", MaxEventMessage) // 2 bytes each
	evs, err := s.InsertEvents(ctx, []Event{{Pool: long, Type: "Warning", Reason: "r", Message: long + "x"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	e := evs[0]
	if len(e.Pool) > MaxEventField || len(e.Message) > MaxEventMessage || !utf8.ValidString(e.Message) ||
		!utf8.ValidString(e.Pool) || len(e.Message) < MaxEventMessage-1 {
		t.Fatalf("bounded fields: pool %d bytes, message %d bytes", len(e.Pool), len(e.Message))
	}
	got, err := s.ListEvents(ctx, EventFilter{})
	if err != nil || len(got) != 1 || got[0] != e {
		t.Fatalf("read back: %v %v", got, err)
	}
}
