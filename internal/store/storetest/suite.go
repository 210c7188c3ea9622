// Package storetest is the conformance suite of the head's store: the same
// tests run against every implementation (the SQLite store in
// internal/store, the etcd store in internal/etcdstore), so both keep the
// invariants the head relies on (an instance placed once, attempt fencing,
// generations bumped with every change of a desired set, journal fencing).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// Store is what the suite drives: the head's store without its journal
// (which Journals returns, since the two implementations return different
// concrete journal types).
type Store interface {
	StartEpoch(ctx context.Context) (int64, error)
	InsertInstances(ctx context.Context, ins []store.Instance, now time.Time) error
	GetInstance(ctx context.Context, id string) (*store.Instance, error)
	GetInstanceByName(ctx context.Context, name string) (*store.Instance, error)
	ListInstances(ctx context.Context, f store.Filter) ([]*store.Instance, error)
	DeleteInstance(ctx context.Context, id string) error
	DeleteTerminalInstances(ctx context.Context, status store.Status) ([]string, error)
	ApplyHeartbeat(ctx context.Context, in store.HeartbeatInput, now time.Time) (store.HeartbeatResult, error)
	Assign(ctx context.Context, as []store.Assignment, now time.Time) ([]store.Assignment, error)
	RequestCancel(ctx context.Context, id string, grace time.Duration, now time.Time) (store.CancelResult, error)
	FailPending(ctx context.Context, ids []string, reason string, now time.Time) ([]string, error)
	CountInstances(ctx context.Context, f store.Filter) (int, error)
	Attempts(ctx context.Context, instanceID string) ([]store.AttemptRecord, error)
	MoveInstance(ctx context.Context, id string, attempt int64, worker, reason string, now time.Time) (bool, error)
	RegisterWorker(ctx context.Context, r store.Registration, now time.Time) (*store.Worker, error)
	GetWorker(ctx context.Context, id string) (*store.Worker, error)
	ListWorkers(ctx context.Context) ([]*store.Worker, error)
	MarkSuspect(ctx context.Context, cutoff time.Time) (int, error)
	MarkOffline(ctx context.Context, cutoff, now time.Time, hold time.Duration) ([]string, error)
	ReleaseHold(ctx context.Context, worker string, now time.Time) ([]string, error)
	DeleteWorker(ctx context.Context, id string, now time.Time) error
	RemoveWorker(ctx context.Context, id string, now time.Time, hold time.Duration) error
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
}

// Opener opens an empty store for one test (closed by the test's cleanup)
// and a function returning its pool journals.
type Opener func(t *testing.T) Store

// JournalOpener returns the journal of pool in the store s.
type JournalOpener func(t *testing.T, s Store, pool string) controller.Journal

// Run runs every test of the suite against the stores open makes.
func Run(t *testing.T, open Opener, journal JournalOpener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"InsertGetAndDuplicateName", testInsertGetAndDuplicateName},
		{"ListInstancesFilters", testListInstancesFilters},
		{"AssignIsConditional", testAssignIsConditional},
		{"ReportFencing", testReportFencing},
		{"RestartPolicies", testRestartPolicies},
		{"CancelCompletesInEveryState", testCancelCompletesInEveryState},
		{"LivenessAndRescheduleOnOffline", testLivenessAndRescheduleOnOffline},
		{"DeleteWorkerAndInstances", testDeleteWorkerAndInstances},
		{"ConcurrentReportsApplyOnce", testConcurrentReportsApplyOnce},
		{"RegisterReconnectKeepsOrdinalAndBumpsGeneration", testRegisterReconnectKeepsOrdinalAndBumpsGeneration},
		{"SchedulingState", testSchedulingState},
		{"EpochIncrements", testEpochIncrements},
		{"CordonBlocksAssignAndBusy", testCordonBlocksAssignAndBusy},
		{"RemoveWorker", testRemoveWorker},
		{"Events", testEvents},
		{"Credentials", testCredentials},
		{"ConcurrentAssignPlacesOnce", testConcurrentAssignPlacesOnce},
		{"LargeBatches", testLargeBatches},
		{"AttemptHistory", testAttemptHistory},
		{"CountInstances", testCountInstances},
		{"MoveInstance", testMoveInstance},
		{"UnknownInstanceSaysWhy", testUnknownInstanceSaysWhy},
		{"OfflineHoldsRequeued", testOfflineHoldsRequeued},
		{"ReleaseHold", testReleaseHold},
		{"LateCompletion", testLateCompletion},
		{"LateCompletionRacesAssign", testLateCompletionRacesAssign},
		{"FailPending", testFailPending},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
	t.Run("JournalBehavesLikeMemJournal", func(t *testing.T) { testJournal(t, open, journal) })
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newInst(id string) store.Instance {
	return store.Instance{ID: id, Name: "n-" + id, Command: "echo " + id,
		Requests: capacity.Resources{MilliCPU: 1000, Memory: 512 << 20}, Exclusive: true}
}

func mustInsert(t *testing.T, s Store, ins ...store.Instance) {
	t.Helper()
	if err := s.InsertInstances(context.Background(), ins, t0); err != nil {
		t.Fatal(err)
	}
}

func mustWorker(t *testing.T, s Store, id string, gpus int64) {
	t.Helper()
	_, err := s.RegisterWorker(context.Background(), store.Registration{ID: id, Host: "10.0.0.1",
		Capacity: capacity.Resources{MilliCPU: 8000, Memory: 16 << 30, GPUs: gpus}}, t0)
	if err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, s Store, id string) *store.Instance {
	t.Helper()
	in, err := s.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// assign places id on worker at its current attempt and returns the new attempt.
func assign(t *testing.T, s Store, id, worker string, gpus ...int) int64 {
	t.Helper()
	in := mustGet(t, s, id)
	got, err := s.Assign(context.Background(), []store.Assignment{{InstanceID: id, Attempt: in.Attempt, Worker: worker,
		GPUIndices: gpus, Exclusive: true}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("assign %s to %s: not applied", id, worker)
	}
	return got[0].Attempt
}

func report(t *testing.T, s Store, worker string, seen int64, rs ...store.Report) store.HeartbeatResult {
	t.Helper()
	res, err := s.ApplyHeartbeat(context.Background(), store.HeartbeatInput{WorkerID: worker, BootID: "b", SeenGen: seen, Reports: rs}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ip(n int) *int { return &n }

func testInsertGetAndDuplicateName(t *testing.T, open Opener) {
	s := open(t)
	in := newInst("a")
	in.Labels = map[string]string{"team": "x"}
	in.Env = map[string]string{"K": "V"}
	in.RequestedGPUIndices = []int{1, 0}
	in.RestartPolicy = store.RestartOnFailure
	in.MaxRestarts = 2
	mustInsert(t, s, in)
	got := mustGet(t, s, "a")
	if got.Status != store.StatusPending || got.Attempt != 0 || got.Labels["team"] != "x" || got.Env["K"] != "V" ||
		!slices.Equal(got.RequestedGPUIndices, []int{1, 0}) || got.RestartPolicy != store.RestartOnFailure ||
		got.MaxRestarts != 2 || !got.CreatedAt.Equal(t0) || !got.Exclusive || got.Requests.MilliCPU != 1000 {
		t.Fatalf("round trip mismatch: %+v", got)
	}
	if byName, err := s.GetInstanceByName(context.Background(), "n-a"); err != nil || byName.ID != "a" {
		t.Fatalf("GetInstanceByName = %v, %v", byName, err)
	}
	// A batch with a duplicate name inserts nothing.
	dup := newInst("c")
	dup.Name = "n-a"
	err := s.InsertInstances(context.Background(), []store.Instance{newInst("b"), dup}, t0)
	var nt *store.NameTakenError
	if !errors.As(err, &nt) || !errors.Is(err, store.ErrNameTaken) || nt.Name != "n-a" {
		t.Fatalf("duplicate name error = %v", err)
	}
	if _, err := s.GetInstance(context.Background(), "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("batch was not atomic: b exists (%v)", err)
	}
}

func testListInstancesFilters(t *testing.T, open Opener) {
	s := open(t)
	mk := func(id string, labels map[string]string) store.Instance {
		in := newInst(id)
		in.Labels = labels
		return in
	}
	mustInsert(t, s, mk("a", map[string]string{"app": "x", "tier": "gpu"}), mk("b", map[string]string{"app": "x"}),
		mk("c", map[string]string{"app": "y", "tier": "gpu"}), mk("d", map[string]string{"it's": "x"}))
	mustWorker(t, s, "w", 0)
	assign(t, s, "b", "w")
	ids := func(f store.Filter) []string {
		got, err := s.ListInstances(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range got {
			out = append(out, in.ID)
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name string
		f    store.Filter
		want []string
	}{
		{"all", store.Filter{}, []string{"a", "b", "c", "d"}},
		{"one label", store.Filter{Labels: map[string]string{"app": "x"}}, []string{"a", "b"}},
		{"two labels", store.Filter{Labels: map[string]string{"app": "x", "tier": "gpu"}}, []string{"a"}},
		{"status and label", store.Filter{Status: store.StatusAssigned, Labels: map[string]string{"app": "x"}}, []string{"b"}},
		{"quote in key is data", store.Filter{Labels: map[string]string{"it's": "x"}}, []string{"d"}},
		{"json path injection matches nothing", store.Filter{Labels: map[string]string{"app') OR 1=1 --": "x"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(tc.f); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func testAssignIsConditional(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 2)
	mustInsert(t, s, newInst("a"), newInst("b"), newInst("c"))
	gen0 := mustDesired(t, s, "w").Generation
	if a := assign(t, s, "a", "w", 1); a != 1 {
		t.Fatalf("attempt = %d, want 1", a)
	}
	// Same attempt again: the instance is no longer PENDING.
	got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "a", Attempt: 0, Worker: "w"}}, t0)
	if err != nil || len(got) != 0 {
		t.Fatalf("second assign applied: %v %v", got, err)
	}
	// Stale attempt read.
	got, _ = s.Assign(ctx, []store.Assignment{{InstanceID: "b", Attempt: 7, Worker: "w"}}, t0)
	if len(got) != 0 {
		t.Fatal("assign with a stale attempt applied")
	}
	// Unknown worker and non-ONLINE worker.
	got, _ = s.Assign(ctx, []store.Assignment{{InstanceID: "b", Attempt: 0, Worker: "nope"}}, t0)
	if len(got) != 0 {
		t.Fatal("assign to unknown worker applied")
	}
	if _, err := s.MarkSuspect(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Assign(ctx, []store.Assignment{{InstanceID: "b", Attempt: 0, Worker: "w"}}, t0)
	if len(got) != 0 {
		t.Fatal("assign to a SUSPECT worker applied")
	}
	report(t, s, "w", -1) // back ONLINE
	if _, err := s.RequestCancel(ctx, "c", 0, t0); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Assign(ctx, []store.Assignment{{InstanceID: "c", Attempt: 0, Worker: "w"}}, t0)
	if len(got) != 0 {
		t.Fatal("assign of a cancelled instance applied")
	}
	in := mustGet(t, s, "a")
	if in.Status != store.StatusAssigned || in.AssignedWorker != "w" || !slices.Equal(in.GPUIndices, []int{1}) {
		t.Fatalf("after assign: %+v", in)
	}
	ds := mustDesired(t, s, "w")
	if ds.Generation <= gen0 || len(ds.Instances) != 1 || ds.Instances[0].ExpectedStatus != store.StatusAssigned ||
		!slices.Equal(ds.Instances[0].GPUIndices, []int{1}) {
		t.Fatalf("desired after assign: %+v (gen0 %d)", ds, gen0)
	}
}

func mustDesired(t *testing.T, s Store, w string) store.DesiredState {
	t.Helper()
	ds, err := s.DesiredFor(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestReportFencing ports PyLet's report table (A5) with tide's fixes:
// ASSIGNED→COMPLETED is accepted (A14.3) and a cancelled exit keeps its code.
func testReportFencing(t *testing.T, open Opener) {
	tests := []struct {
		name       string
		setup      func(s Store) // instance "a" assigned to w at attempt 1 before setup
		rep        store.Report
		worker     string
		wantStatus store.Status
		wantReason string
		wantExit   *int
	}{
		{"running from assigned", nil, store.Report{Status: store.ReportRunning, Port: ip(15600)}, "w", store.StatusRunning, "", nil},
		{"completed from assigned (fast exit)", nil, store.Report{Status: store.ReportCompleted, ExitCode: ip(0)}, "w", store.StatusCompleted, "", ip(0)},
		{"failed from assigned", nil, store.Report{Status: store.ReportFailed, ExitCode: ip(3)}, "w", store.StatusFailed, "", ip(3)},
		{"cancelled without request", nil, store.Report{Status: store.ReportCancelled, ExitCode: ip(-15)}, "w", store.StatusFailed, store.ReasonKilledByWorker, ip(-15)},
		{"not found", nil, store.Report{Status: store.ReportNotFound}, "w", store.StatusFailed, store.ReasonLostAfterRejoin, nil},
		{"stopping is ignored", nil, store.Report{Status: store.ReportStopping}, "w", store.StatusAssigned, "", nil},
		{"stale attempt ignored", nil, store.Report{Status: store.ReportCompleted, Attempt: 0, ExitCode: ip(0)}, "w", store.StatusAssigned, "", nil},
		{"other worker ignored", nil, store.Report{Status: store.ReportCompleted, ExitCode: ip(0)}, "w2", store.StatusAssigned, "", nil},
		{"cancelled with request keeps exit code", func(s Store) {
			s.RequestCancel(context.Background(), "a", time.Second, t0)
		}, store.Report{Status: store.ReportCancelled, ExitCode: ip(-9)}, "w", store.StatusCancelled, "", ip(-9)},
		{"running after completed ignored", func(s Store) {
			s.ApplyHeartbeat(context.Background(), store.HeartbeatInput{WorkerID: "w", SeenGen: -1,
				Reports: []store.Report{{InstanceID: "a", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)}}}, t0)
		}, store.Report{Status: store.ReportRunning, Port: ip(1)}, "w", store.StatusCompleted, "", ip(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			mustWorker(t, s, "w", 0)
			mustWorker(t, s, "w2", 0)
			mustInsert(t, s, newInst("a"))
			assign(t, s, "a", "w")
			if tc.setup != nil {
				tc.setup(s)
			}
			r := tc.rep
			r.InstanceID = "a"
			if r.Attempt == 0 && tc.name != "stale attempt ignored" {
				r.Attempt = 1
			}
			report(t, s, tc.worker, -1, r)
			in := mustGet(t, s, "a")
			if in.Status != tc.wantStatus || in.FailureReason != tc.wantReason {
				t.Fatalf("status %s reason %q, want %s %q", in.Status, in.FailureReason, tc.wantStatus, tc.wantReason)
			}
			if (in.ExitCode == nil) != (tc.wantExit == nil) || (in.ExitCode != nil && *in.ExitCode != *tc.wantExit) {
				t.Fatalf("exit code %v, want %v", in.ExitCode, tc.wantExit)
			}
			if tc.wantStatus == store.StatusRunning && (in.Endpoint != "10.0.0.1:15600" || in.Port == nil || *in.Port != 15600) {
				t.Fatalf("endpoint %q port %v", in.Endpoint, in.Port)
			}
		})
	}
}

func testRestartPolicies(t *testing.T, open Opener) {
	tests := []struct {
		name   string
		policy store.RestartPolicy
		max    int
		exits  []int // exit code of each attempt
		want   store.Status
		tries  int64 // attempts used
	}{
		{"never fails once", store.RestartNever, 0, []int{1}, store.StatusFailed, 1},
		{"on-failure retries up to max", store.RestartOnFailure, 2, []int{1, 1, 1}, store.StatusFailed, 3},
		{"on-failure stops at success", store.RestartOnFailure, 5, []int{1, 0}, store.StatusCompleted, 2},
		{"always restarts success", store.RestartAlways, 2, []int{0, 0, 0}, store.StatusCompleted, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			mustWorker(t, s, "w", 0)
			in := newInst("a")
			in.RestartPolicy, in.MaxRestarts = tc.policy, tc.max
			mustInsert(t, s, in)
			for i, code := range tc.exits {
				att := assign(t, s, "a", "w")
				if att != int64(i+1) {
					t.Fatalf("attempt %d, want %d", att, i+1)
				}
				st := store.ReportCompleted
				if code != 0 {
					st = store.ReportFailed
				}
				report(t, s, "w", -1, store.Report{InstanceID: "a", Attempt: att, Status: st, ExitCode: ip(code)})
				got := mustGet(t, s, "a")
				if i < len(tc.exits)-1 {
					if got.Status != store.StatusPending || got.AssignedWorker != "" || got.Restarts != i+1 {
						t.Fatalf("after attempt %d: %s worker %q restarts %d; want requeued", att, got.Status, got.AssignedWorker, got.Restarts)
					}
					// A late report of the finished attempt changes nothing.
					report(t, s, "w", -1, store.Report{InstanceID: "a", Attempt: att, Status: store.ReportRunning, Port: ip(1)})
					if again := mustGet(t, s, "a"); again.Status != store.StatusPending {
						t.Fatalf("stale report moved a requeued instance to %s", again.Status)
					}
				}
			}
			got := mustGet(t, s, "a")
			if got.Status != tc.want || got.Attempt != tc.tries {
				t.Fatalf("final %s attempt %d, want %s %d", got.Status, got.Attempt, tc.want, tc.tries)
			}
		})
	}
}

func testCancelCompletesInEveryState(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	for _, id := range []string{"pending", "assigned", "running", "unknown", "done", "never"} {
		mustInsert(t, s, newInst(id))
	}
	for _, id := range []string{"assigned", "running", "done", "never"} {
		assign(t, s, id, "w")
	}
	report(t, s, "w", -1, store.Report{InstanceID: "running", Attempt: 1, Status: store.ReportRunning, Port: ip(1)},
		store.Report{InstanceID: "done", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)})

	check := func(id string, want store.CancelOutcome, wantStatus store.Status) {
		t.Helper()
		r, err := s.RequestCancel(ctx, id, 5*time.Second, t0)
		if err != nil || r.Outcome != want || r.Status != wantStatus {
			t.Fatalf("cancel %s = %+v, %v; want outcome %d status %s", id, r, err, want, wantStatus)
		}
	}
	check("pending", store.CancelDone, store.StatusCancelled)
	check("done", store.CancelTerminal, store.StatusCompleted)
	check("running", store.CancelRequested, store.StatusRunning)
	check("running", store.CancelAlreadyRequested, store.StatusRunning)
	check("assigned", store.CancelRequested, store.StatusAssigned)
	if _, err := s.RequestCancel(ctx, "missing", 0, t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel missing: %v", err)
	}
	if got := mustGet(t, s, "running").DisplayStatus(); got != "CANCELLING" {
		t.Fatalf("display status %s, want CANCELLING", got)
	}
	ds := mustDesired(t, s, "w")
	if len(ds.Stopping) != 2 || ds.Stopping[0].GracePeriod != 5*time.Second {
		t.Fatalf("stopping = %+v", ds.Stopping)
	}
	for _, d := range ds.Instances {
		if d.InstanceID == "running" || d.InstanceID == "assigned" {
			t.Fatalf("cancelled instance %s still desired", d.InstanceID)
		}
	}
	// A heartbeat from before the cancel's generation proves nothing.
	report(t, s, "w", ds.Generation-1, store.Report{InstanceID: "running", Attempt: 1, Status: store.ReportStopping})
	if got := mustGet(t, s, "assigned").Status; got != store.StatusAssigned {
		t.Fatalf("assigned finalized by a stale-generation heartbeat: %s", got)
	}
	// The worker saw the generation and reports only "running" (stopping):
	// "assigned" was never started, so it is CANCELLED (PyLet hangs, A14.2).
	report(t, s, "w", ds.Generation, store.Report{InstanceID: "running", Attempt: 1, Status: store.ReportStopping},
		store.Report{InstanceID: "never", Attempt: 1, Status: store.ReportRunning})
	if got := mustGet(t, s, "assigned").Status; got != store.StatusCancelled {
		t.Fatalf("never-started cancelled instance is %s, want CANCELLED", got)
	}
	if got := mustGet(t, s, "running").Status; got != store.StatusRunning {
		t.Fatalf("stopping instance is %s, want RUNNING until the worker reports", got)
	}
	report(t, s, "w", ds.Generation, store.Report{InstanceID: "running", Attempt: 1, Status: store.ReportCancelled, ExitCode: ip(-15)})
	if got := mustGet(t, s, "running"); got.Status != store.StatusCancelled || *got.ExitCode != -15 {
		t.Fatalf("running after cancelled report: %s %v", got.Status, got.ExitCode)
	}
	// UNKNOWN on an offline worker: cancel completes at once (A14.2).
	mustWorker(t, s, "dead", 0)
	assign(t, s, "unknown", "dead")
	report(t, s, "w", -1) // w is fresh; dead is not
	if _, err := s.ApplyHeartbeat(ctx, store.HeartbeatInput{WorkerID: "w", SeenGen: -1}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.MarkOffline(ctx, t0.Add(time.Minute), t0.Add(time.Hour), 0); err != nil || !slices.Equal(ids, []string{"dead"}) {
		t.Fatalf("MarkOffline = %v, %v", ids, err)
	}
	if got := mustGet(t, s, "unknown").Status; got != store.StatusUnknown {
		t.Fatalf("instance on offline worker is %s, want UNKNOWN", got)
	}
	check("unknown", store.CancelDone, store.StatusCancelled)
}

func testLivenessAndRescheduleOnOffline(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	keep := newInst("keep")
	retry := newInst("retry")
	retry.RestartPolicy, retry.MaxRestarts = store.RestartOnFailure, 3
	cancelling := newInst("cancelling")
	mustInsert(t, s, keep, retry, cancelling)
	assign(t, s, "keep", "w")
	assign(t, s, "retry", "w")
	assign(t, s, "cancelling", "w")
	s.RequestCancel(ctx, "cancelling", 0, t0)
	if n, _ := s.MarkSuspect(ctx, t0); n != 0 {
		t.Fatalf("worker seen at the cutoff marked suspect")
	}
	if n, _ := s.MarkSuspect(ctx, t0.Add(time.Second)); n != 1 {
		t.Fatalf("MarkSuspect = %d, want 1", n)
	}
	if w, _ := s.GetWorker(ctx, "w"); w.Status != store.WorkerSuspect {
		t.Fatalf("worker %s, want SUSPECT", w.Status)
	}
	if _, err := s.MarkOffline(ctx, t0.Add(time.Second), t0.Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	want := map[string]store.Status{"keep": store.StatusUnknown, "retry": store.StatusPending, "cancelling": store.StatusCancelled}
	for id, st := range want {
		if got := mustGet(t, s, id); got.Status != st {
			t.Fatalf("%s: %s, want %s", id, got.Status, st)
		}
	}
	// The worker returns: its old attempt of "retry" is fenced, "keep" resumes.
	mustWorker(t, s, "w2", 0)
	att := assign(t, s, "retry", "w2")
	report(t, s, "w", -1, store.Report{InstanceID: "retry", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)},
		store.Report{InstanceID: "keep", Attempt: 1, Status: store.ReportRunning, Port: ip(2)})
	if got := mustGet(t, s, "retry"); got.Status != store.StatusAssigned || got.Attempt != att || got.AssignedWorker != "w2" {
		t.Fatalf("stale attempt changed the rescheduled instance: %+v", got)
	}
	if got := mustGet(t, s, "keep").Status; got != store.StatusRunning {
		t.Fatalf("keep after rejoin: %s, want RUNNING", got)
	}
}

func testDeleteWorkerAndInstances(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	mustInsert(t, s, newInst("a"), newInst("b"))
	assign(t, s, "a", "w")
	if err := s.DeleteWorker(ctx, "w", t0); !errors.Is(err, store.ErrWorkerOnline) {
		t.Fatalf("delete online worker: %v", err)
	}
	if err := s.DeleteWorker(ctx, "zz", t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete unknown worker: %v", err)
	}
	s.MarkOffline(ctx, t0.Add(time.Second), t0, 0)
	ids, err := s.DeleteOfflineWorkers(ctx, t0)
	if err != nil || !slices.Equal(ids, []string{"w"}) {
		t.Fatalf("DeleteOfflineWorkers = %v, %v", ids, err)
	}
	if got := mustGet(t, s, "a"); got.Status != store.StatusFailed || got.FailureReason != store.ReasonWorkerDeleted {
		t.Fatalf("instance of deleted worker: %s %q", got.Status, got.FailureReason)
	}
	if err := s.DeleteInstance(ctx, "b"); !errors.Is(err, store.ErrNotTerminal) {
		t.Fatalf("delete pending instance: %v", err)
	}
	if err := s.DeleteInstance(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	s.RequestCancel(ctx, "b", 0, t0)
	if ids, err := s.DeleteTerminalInstances(ctx, store.StatusCancelled); err != nil || !slices.Equal(ids, []string{"b"}) {
		t.Fatalf("DeleteTerminalInstances = %v, %v", ids, err)
	}
	if _, err := s.DeleteTerminalInstances(ctx, store.StatusRunning); !errors.Is(err, store.ErrNotTerminal) {
		t.Fatalf("bulk delete of RUNNING: %v", err)
	}
}

// TestConcurrentReportsApplyOnce holds invariant 2 under races: many
// goroutines deliver the same terminal report and assignments race; exactly
// one of each wins.
func testConcurrentReportsApplyOnce(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	ins := newInst("a")
	ins.RestartPolicy, ins.MaxRestarts = store.RestartAlways, 100
	mustInsert(t, s, ins)
	assign(t, s, "a", "w")
	var wg sync.WaitGroup
	var mu sync.Mutex
	requeued, applied := 0, 0
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.ApplyHeartbeat(ctx, store.HeartbeatInput{WorkerID: "w", SeenGen: -1,
				Reports: []store.Report{{InstanceID: "a", Attempt: 1, Status: store.ReportCompleted, ExitCode: ip(0)}}}, t0)
			if err != nil {
				t.Error(err)
			}
			got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "a", Attempt: 1, Worker: "w"}}, t0)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			requeued += res.Requeued
			applied += len(got)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if requeued != 1 || applied != 1 {
		t.Fatalf("requeued %d, assigned %d; want exactly one each", requeued, applied)
	}
	if got := mustGet(t, s, "a"); got.Restarts != 1 || got.Attempt != 2 {
		t.Fatalf("restarts %d attempt %d; want 1 and 2", got.Restarts, got.Attempt)
	}
}

func testRegisterReconnectKeepsOrdinalAndBumpsGeneration(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	w1, _ := s.RegisterWorker(ctx, store.Registration{ID: "a", Host: "h", Pool: "gpu"}, t0)
	w2, _ := s.RegisterWorker(ctx, store.Registration{ID: "b", Host: "h", Pool: "gpu"}, t0)
	w3, err := s.RegisterWorker(ctx, store.Registration{ID: "a", Host: "h2", Pool: "gpu", Capacity: capacity.CPU(500),
		Labels: map[string]string{"k": "v"}, TokenHash: "t2"}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if w1.Ordinal != 0 || w2.Ordinal != 1 || w3.Ordinal != 0 || w3.Generation != w1.Generation+1 ||
		w3.Host != "h2" || w3.TokenHash != "t2" || w3.Capacity.MilliCPU != 500 || w3.Labels["k"] != "v" {
		t.Fatalf("reconnect: w1 %+v w2 %+v w3 %+v", w1, w2, w3)
	}
}

func testSchedulingState(t *testing.T, open Opener) {
	s := open(t)
	mustWorker(t, s, "w", 4)
	for i := 0; i < 3; i++ {
		in := newInst(fmt.Sprint(i))
		in.QueuedAt = t0.Add(time.Duration(3-i) * time.Second) // reverse order
		mustInsert(t, s, in)
	}
	assign(t, s, "2", "w", 2, 3)
	st, err := s.SchedulingState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Workers) != 1 || len(st.Active) != 1 || !slices.Equal(st.Active[0].GPUIndices, []int{2, 3}) {
		t.Fatalf("state: %+v", st)
	}
	if len(st.Pending) != 2 || st.Pending[0].ID != "1" || st.Pending[1].ID != "0" {
		t.Fatalf("pending not in FIFO order of queued_at: %+v", st.Pending)
	}
}
