package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/controller"
)

func TestMemJournal(t *testing.T) {
	ctx := context.Background()
	j := controller.NewMemJournal()
	e1, err := j.RaiseEpoch(ctx)
	if err != nil || e1 != 1 {
		t.Fatalf("first epoch %d, %v; want 1", e1, err)
	}
	for i, want := range []uint64{1, 2} {
		if s, err := j.NextSerial(ctx, e1); err != nil || s != want {
			t.Fatalf("serial %d: %d, %v; want %d", i, s, err, want)
		}
	}
	recs := []controller.Record{
		{MachineID: "p-1-2", Ordinal: 1, Offering: "o", Serial: 2, Intent: controller.IntentCreate},
		{MachineID: "p-0-1", Ordinal: 0, Offering: "o", Serial: 1, Intent: controller.IntentDelete},
		{MachineID: "stray", Ordinal: -1, Intent: controller.IntentDelete},
	}
	for _, r := range recs {
		if err := j.Put(ctx, e1, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.SetDesired(ctx, e1, 3); err != nil {
		t.Fatal(err)
	}
	st, err := j.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 1 || st.Serial != 2 || st.Desired != 3 || !st.HasDesired || len(st.Records) != 3 ||
		st.Records[0].MachineID != "p-0-1" || st.Records[2].MachineID != "stray" {
		t.Fatalf("load: %+v", st)
	}
	st.Records[0].MachineID = "changed"
	if again, _ := j.Load(ctx); again.Records[0].MachineID != "p-0-1" {
		t.Error("Load shares its slice with the journal")
	}
	if err := j.Remove(ctx, e1, "p-0-1"); err != nil {
		t.Fatal(err)
	}
	if err := j.Remove(ctx, e1, "absent"); err != nil {
		t.Errorf("removing an absent record: %v", err)
	}

	// A takeover fences every write of the older epoch.
	e2, _ := j.RaiseEpoch(ctx)
	if e2 != 2 {
		t.Fatalf("second epoch %d, want 2", e2)
	}
	stale := map[string]error{
		"put":         j.Put(ctx, e1, recs[0]),
		"remove":      j.Remove(ctx, e1, "p-1-2"),
		"set desired": j.SetDesired(ctx, e1, 0),
	}
	_, stale["next serial"] = j.NextSerial(ctx, e1)
	for op, err := range stale {
		if !errors.Is(err, controller.ErrStaleEpoch) {
			t.Errorf("%s at a stale epoch: %v, want ErrStaleEpoch", op, err)
		}
	}
	if st, _ := j.Load(ctx); st.Desired != 3 || st.Serial != 2 || len(st.Records) != 2 {
		t.Errorf("stale writes changed the journal: %+v", st)
	}
	if err := j.Put(ctx, e2, recs[0]); err != nil {
		t.Errorf("current epoch refused: %v", err)
	}

	bad := []struct {
		rec  controller.Record
		want string
	}{
		{controller.Record{Ordinal: 1, Intent: controller.IntentCreate}, "machine_id: must be set"},
		{controller.Record{MachineID: "m", Intent: "keep"}, `intent: want "create" or "delete", got "keep"`},
		{controller.Record{MachineID: "m", Ordinal: -1, Intent: controller.IntentCreate}, "ordinal:"},
	}
	for _, b := range bad {
		if err := j.Put(ctx, e2, b.rec); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("put %+v: %v, want %q", b.rec, err, b.want)
		}
	}
	if err := j.SetDesired(ctx, e2, -1); err == nil || !strings.Contains(err.Error(), "desired: must not be negative") {
		t.Errorf("negative desired: %v", err)
	}
}

// flakyJournal fails writes while failing is set.
type flakyJournal struct {
	*controller.MemJournal
	failing bool
}

var errDisk = errors.New("disk full")

func (j *flakyJournal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	if j.failing {
		return errDisk
	}
	return j.MemJournal.Put(ctx, epoch, r)
}

func (j *flakyJournal) Remove(ctx context.Context, epoch uint64, id string) error {
	if j.failing {
		return errDisk
	}
	return j.MemJournal.Remove(ctx, epoch, id)
}

// TestJournalErrorsAreRetried: while the journal refuses writes, nothing is
// created (the record must come first) and nothing is forgotten; every
// failure is an event, and the pool converges once the journal works.
func TestJournalErrorsAreRetried(t *testing.T) {
	e := newEnv(t, setup{})
	fj := &flakyJournal{MemJournal: e.mem, failing: true}
	e.journal = fj
	e.ctl = e.newController()
	e.setDesired(2)
	e.mustTick()
	e.mustTick()
	if got := e.spy.creates(spot) + e.spy.creates(onDemand); got != 0 {
		t.Fatalf("%d creates without a journal record", got)
	}
	if len(e.events.find(controller.ReasonJournalError, "disk full")) == 0 {
		t.Fatalf("no journal-error event:\n%s", e.events.tail(10))
	}
	fj.failing = false
	e.tickUntil(2, 4)

	// Deletes go on while the journal fails; the records are forgotten once it works.
	fj.failing = true
	e.setDesired(0)
	for range 4 {
		e.mustTick()
	}
	if st := e.ctl.Status(); len(st.Deleting) != 2 {
		t.Fatalf("want 2 machines still being deleted (records not removable), got %+v", st)
	}
	fj.failing = false
	e.tickUntil(0, 3)
}

// TestWorkloadErrorsAreRetried: a failing scheduler side delays a drain and
// says so; nothing is unbound before the node is known to be cordoned and
// empty.
func TestWorkloadErrorsAreRetried(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(1)
	e.tickUntil(1, 5)
	e.work.mu.Lock()
	e.work.fail = errors.New("scheduler unreachable")
	e.work.mu.Unlock()
	e.setDesired(0)
	e.mustTick()
	e.mustTick()
	if got := e.calls("drain"); got != 0 {
		t.Fatalf("%d provider drains before the node was cordoned", got)
	}
	if len(e.events.find(controller.ReasonWorkloadError, "cordon", "scheduler unreachable")) != 2 {
		t.Errorf("want a workload-error event per tick:\n%s", e.events.tail(10))
	}
	e.work.mu.Lock()
	e.work.fail = nil
	e.work.mu.Unlock()
	e.tickUntil(0, 4)
}
