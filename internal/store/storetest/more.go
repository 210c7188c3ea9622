package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/store"
)

func testEpochIncrements(t *testing.T, open Opener) {
	s := open(t)
	for want := int64(1); want <= 3; want++ {
		if e, err := s.StartEpoch(context.Background()); err != nil || e != want {
			t.Fatalf("StartEpoch = %d, %v; want %d", e, err, want)
		}
	}
}

func testCordonBlocksAssignAndBusy(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	d := newInst("d")
	d.Daemon = true
	mustInsert(t, s, newInst("a"), newInst("b"), d)
	if busy, err := s.WorkerBusy(ctx, "w"); err != nil || busy {
		t.Fatalf("idle worker busy = %v, %v", busy, err)
	}
	assign(t, s, "d", "w")
	if busy, _ := s.WorkerBusy(ctx, "w"); busy {
		t.Fatal("a daemon made the worker busy")
	}
	assign(t, s, "a", "w")
	if busy, _ := s.WorkerBusy(ctx, "w"); !busy {
		t.Fatal("worker with an ASSIGNED instance is not busy")
	}
	if ch, err := s.SetCordoned(ctx, "w", true, t0); err != nil || !ch {
		t.Fatalf("cordon = %v, %v", ch, err)
	}
	if ch, _ := s.SetCordoned(ctx, "w", true, t0.Add(time.Hour)); ch {
		t.Fatal("cordoning twice changed something")
	}
	if w, _ := s.GetWorker(ctx, "w"); !w.CordonedAt.Equal(t0) {
		t.Fatalf("cordoned at %v, want the first time %v", w.CordonedAt, t0)
	}
	if got, _ := s.Assign(ctx, []store.Assignment{{InstanceID: "b", Worker: "w"}}, t0); len(got) != 0 {
		t.Fatal("assign to a cordoned worker applied")
	}
	// A cordon set before the worker registers holds after it registers.
	if ch, _ := s.SetCordoned(ctx, "later", true, t0); !ch {
		t.Fatal("cordon of an unregistered worker changed nothing")
	}
	mustWorker(t, s, "later", 0)
	if got, _ := s.Assign(ctx, []store.Assignment{{InstanceID: "b", Worker: "later"}}, t0); len(got) != 0 {
		t.Fatal("assign to a worker cordoned before it registered applied")
	}
	if ch, _ := s.SetCordoned(ctx, "w", false, t0); !ch {
		t.Fatal("uncordon changed nothing")
	}
	if got, _ := s.Assign(ctx, []store.Assignment{{InstanceID: "b", Worker: "w"}}, t0); len(got) != 1 {
		t.Fatal("assign after uncordon did not apply")
	}
	ws, _ := s.ListWorkers(ctx)
	for _, w := range ws {
		if (w.ID == "later") != w.Cordoned() {
			t.Fatalf("worker %s cordoned = %v", w.ID, w.Cordoned())
		}
	}
}

func testRemoveWorker(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	r := newInst("r")
	r.RestartPolicy, r.MaxRestarts = store.RestartOnFailure, 1
	mustInsert(t, s, newInst("a"), r)
	assign(t, s, "a", "w")
	assign(t, s, "r", "w")
	s.SetCordoned(ctx, "w", true, t0)
	hold := 90 * time.Second
	if err := s.RemoveWorker(ctx, "w", t0, hold); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorker(ctx, "w"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removed worker still there: %v", err)
	}
	if got := mustGet(t, s, "a"); got.Status != store.StatusFailed || got.FailureReason != store.ReasonWorkerDeleted {
		t.Fatalf("a: %s %q", got.Status, got.FailureReason)
	}
	// Requeued, and held as from an OFFLINE worker: the removed worker's
	// machine may still run the old attempt until its fence stops it.
	if got := mustGet(t, s, "r"); got.Status != store.StatusPending || got.AssignedWorker != "" ||
		!got.NotBefore.Equal(t0.Add(hold)) || got.HeldBy != "w" {
		t.Fatalf("r: %s on %q, not before %v held by %q; want requeued, held until %v by w",
			got.Status, got.AssignedWorker, got.NotBefore, got.HeldBy, t0.Add(hold))
	}
	if err := s.RemoveWorker(ctx, "w", t0, hold); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	// Its cordon went with it.
	mustWorker(t, s, "w", 0)
	if w, _ := s.GetWorker(ctx, "w"); w.Cordoned() {
		t.Fatal("cordon survived the removal of its worker")
	}
	// Without a hold (a head that fences nothing) nothing is held.
	z := newInst("z")
	z.RestartPolicy, z.MaxRestarts = store.RestartOnFailure, 1
	mustInsert(t, s, z)
	assign(t, s, "z", "w")
	if err := s.RemoveWorker(ctx, "w", t0, 0); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "z"); got.Status != store.StatusPending || !got.NotBefore.IsZero() || got.HeldBy != "" {
		t.Fatalf("z: %s, not before %v held by %q; want PENDING, unheld", got.Status, got.NotBefore, got.HeldBy)
	}
}

func testEvents(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	if _, err := s.InsertEvents(ctx, []store.Event{{Type: "Normal"}}, t0); err == nil {
		t.Fatal("event without reason accepted")
	}
	var evs []store.Event
	for i := range 30 {
		pool := []string{"a", "b"}[i%2]
		evs = append(evs, store.Event{Pool: pool, Type: "Normal", Reason: fmt.Sprint("r", i), Message: strings.Repeat("x", 5000)})
	}
	got, err := s.InsertEvents(ctx, evs, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID <= got[i-1].ID {
			t.Fatalf("ids not increasing: %d then %d", got[i-1].ID, got[i].ID)
		}
	}
	if len(got[0].Message) != store.MaxEventMessage || !got[0].Time.Equal(t0) {
		t.Fatalf("message %d bytes, time %v", len(got[0].Message), got[0].Time)
	}
	all, err := s.ListEvents(ctx, store.EventFilter{})
	if err != nil || len(all) != 30 || all[0].ID != got[0].ID || all[0].Reason != "r0" {
		t.Fatalf("list all: %d events, %v", len(all), err)
	}
	a := "a"
	pa, _ := s.ListEvents(ctx, store.EventFilter{Pool: &a, After: got[4].ID, Limit: 3})
	if len(pa) != 3 || pa[0].Reason != "r6" || pa[2].Reason != "r10" {
		t.Fatalf("pool a after r4, 3: %+v", reasons(pa))
	}
	tail, _ := s.ListEvents(ctx, store.EventFilter{Pool: &a, Limit: 2, Tail: true})
	if !slices.Equal(reasons(tail), []string{"r26", "r28"}) {
		t.Fatalf("tail: %v", reasons(tail))
	}
	if _, err := s.ListEvents(ctx, store.EventFilter{Limit: -1}); err == nil {
		t.Fatal("negative limit accepted")
	}
}

func reasons(evs []store.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func testCredentials(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	add := func(hash, machine string, created time.Time) {
		t.Helper()
		if err := s.AddCredential(ctx, store.Credential{Hash: hash, MachineID: machine, Pool: "p",
			CreatedAt: created, ExpiresAt: created.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	add("h1", "m1", t0)
	add("h2", "m2", t0)
	if err := s.UseCredential(ctx, "h1", "m2", "p", t0); !errors.Is(err, store.ErrCredential) {
		t.Fatalf("credential of another machine: %v", err)
	}
	if err := s.UseCredential(ctx, "h1", "m1", "q", t0); !errors.Is(err, store.ErrCredential) {
		t.Fatalf("credential of another pool: %v", err)
	}
	if err := s.UseCredential(ctx, "h1", "m1", "p", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Used once, it stays good after its expiry.
	if err := s.UseCredential(ctx, "h1", "m1", "p", t0.Add(time.Hour)); err != nil {
		t.Fatalf("reuse after expiry: %v", err)
	}
	if err := s.UseCredential(ctx, "h2", "m2", "p", t0.Add(time.Hour)); !errors.Is(err, store.ErrCredential) {
		t.Fatalf("expired unused credential: %v", err)
	}
	// Adding a credential later drops expired unused ones.
	add("h3", "m1", t0.Add(time.Hour))
	if cs, _ := s.Credentials(ctx, "m2"); len(cs) != 0 {
		t.Fatalf("expired unused credential kept: %+v", cs)
	}
	cs, err := s.Credentials(ctx, "m1")
	if err != nil || len(cs) != 2 || cs[0].Hash != "h1" || !cs[0].UsedAt.Equal(t0.Add(time.Second)) || cs[1].Hash != "h3" {
		t.Fatalf("credentials of m1: %+v, %v", cs, err)
	}
	if n, err := s.RevokeCredentials(ctx, "m1"); err != nil || n != 2 {
		t.Fatalf("revoke = %d, %v", n, err)
	}
	if err := s.UseCredential(ctx, "h1", "m1", "p", t0); !errors.Is(err, store.ErrCredential) {
		t.Fatalf("revoked credential: %v", err)
	}
}

// testConcurrentAssignPlacesOnce races two schedulers (two heads) placing
// the same pending instances on different workers: each is placed exactly
// once, and each worker's desired set holds exactly what was placed there.
func testConcurrentAssignPlacesOnce(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w1", 0)
	mustWorker(t, s, "w2", 0)
	var ins []store.Instance
	for i := range 40 {
		ins = append(ins, newInst(fmt.Sprint("i", i)))
	}
	mustInsert(t, s, ins...)
	placed := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, in := range ins {
				got, err := s.Assign(ctx, []store.Assignment{{InstanceID: in.ID, Worker: w}}, t0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, a := range got {
					placed[a.InstanceID] = append(placed[a.InstanceID], w)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, w := range []string{"w1", "w2"} {
		ds := mustDesired(t, s, w)
		for _, d := range ds.Instances {
			n++
			if ws := placed[d.InstanceID]; len(ws) != 1 || ws[0] != w {
				t.Fatalf("%s desired on %s but placed on %v", d.InstanceID, w, ws)
			}
		}
	}
	if n != len(ins) || len(placed) != len(ins) {
		t.Fatalf("%d desired, %d placed, want %d each", n, len(placed), len(ins))
	}
}

// testLargeBatches: batches larger than one etcd transaction may hold still
// work (inserts, placements, bulk deletes).
func testLargeBatches(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	var ins []store.Instance
	var as []store.Assignment
	for i := range 300 {
		ins = append(ins, newInst(fmt.Sprintf("i%03d", i)))
		as = append(as, store.Assignment{InstanceID: ins[i].ID, Worker: "w"})
	}
	mustInsert(t, s, ins...)
	got, err := s.Assign(ctx, as, t0)
	if err != nil || len(got) != len(as) {
		t.Fatalf("assign %d: %d applied, %v", len(as), len(got), err)
	}
	ds := mustDesired(t, s, "w")
	if len(ds.Instances) != len(as) {
		t.Fatalf("desired %d, want %d", len(ds.Instances), len(as))
	}
	var rs []store.Report
	for _, a := range got {
		rs = append(rs, store.Report{InstanceID: a.InstanceID, Attempt: a.Attempt, Status: store.ReportCompleted, ExitCode: ip(0)})
	}
	for len(rs) > 0 {
		n := min(len(rs), 150) // more reports than one etcd transaction holds
		if res := report(t, s, "w", -1, rs[:n]...); res.Changed != n {
			t.Fatalf("heartbeat changed %d, want %d", res.Changed, n)
		}
		rs = rs[n:]
	}
	ids, err := s.DeleteTerminalInstances(ctx, "")
	if err != nil || len(ids) != len(as) {
		t.Fatalf("deleted %d, %v", len(ids), err)
	}
	if left, _ := s.ListInstances(ctx, store.Filter{}); len(left) != 0 {
		t.Fatalf("%d instances left", len(left))
	}
	// The names are free again.
	mustInsert(t, s, ins[0])
}

type outcome struct {
	value any
	err   string
}

func outcomeOf(v any, err error) outcome {
	switch {
	case err == nil:
		return outcome{value: v}
	case errors.Is(err, controller.ErrStaleEpoch):
		return outcome{err: "stale"}
	case strings.Contains(err.Error(), "must be set") || strings.Contains(err.Error(), "intent:") ||
		strings.Contains(err.Error(), "ordinal:") || strings.Contains(err.Error(), "must not be negative"):
		return outcome{err: "invalid"}
	}
	return outcome{err: "other: " + err.Error()}
}

// testJournal drives the store's journal and the in-memory reference with
// the same random calls and compares every answer and the loaded state.
func testJournal(t *testing.T, open Opener, journal JournalOpener) {
	ctx := context.Background()
	s := open(t)
	sj := journal(t, s, "gpu")
	other := journal(t, s, "gpu2") // a second pool is not disturbed
	if _, err := other.RaiseEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	mem := controller.NewMemJournal()
	rng := rand.New(rand.NewPCG(7, 99))
	ids := []string{"gpu-0-1", "gpu-1-2", "gpu-2-3", "stray/x"}
	intents := []controller.Intent{controller.IntentCreate, controller.IntentDelete, "keep"}
	var epoch uint64
	for i := range 200 {
		e := uint64(rng.IntN(int(epoch) + 2))
		var got, want outcome
		var what string
		switch op := rng.IntN(10); {
		case op == 0:
			what = "raise epoch"
			got = outcomeOf(sj.RaiseEpoch(ctx))
			want = outcomeOf(mem.RaiseEpoch(ctx))
			if want.err == "" {
				epoch = want.value.(uint64)
			}
		case op <= 2:
			what = fmt.Sprint("next serial at ", e)
			got = outcomeOf(sj.NextSerial(ctx, e))
			want = outcomeOf(mem.NextSerial(ctx, e))
		case op <= 5:
			r := controller.Record{MachineID: ids[rng.IntN(len(ids))], Ordinal: reconcile.NodeID(rng.IntN(4) - 1),
				Offering: fmt.Sprint("o", rng.IntN(2)), Serial: uint64(rng.IntN(50)), Intent: intents[rng.IntN(len(intents))]}
			if rng.IntN(20) == 0 {
				r.MachineID = ""
			}
			what = fmt.Sprintf("put %+v at %d", r, e)
			got = outcomeOf(nil, sj.Put(ctx, e, r))
			want = outcomeOf(nil, mem.Put(ctx, e, r))
		case op <= 7:
			id := ids[rng.IntN(len(ids))]
			what = fmt.Sprintf("remove %s at %d", id, e)
			got = outcomeOf(nil, sj.Remove(ctx, e, id))
			want = outcomeOf(nil, mem.Remove(ctx, e, id))
		default:
			d := rng.IntN(6) - 1
			what = fmt.Sprintf("set desired %d at %d", d, e)
			got = outcomeOf(nil, sj.SetDesired(ctx, e, d))
			want = outcomeOf(nil, mem.SetDesired(ctx, e, d))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d, %s: store %+v, memory %+v", i, what, got, want)
		}
		gs, err := sj.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := mem.Load(ctx)
		if !reflect.DeepEqual(gs, ms) {
			t.Fatalf("call %d, %s: states differ\nstore  %+v\nmemory %+v", i, what, gs, ms)
		}
	}
	if os, _ := other.Load(ctx); os.Epoch != 1 || len(os.Records) != 0 {
		t.Fatalf("other pool's journal changed: %+v", os)
	}
}
