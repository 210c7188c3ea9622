package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/sdk/provider"
)

func openAt(t *testing.T, path string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func journalOf(t *testing.T, s *store.Store, pool string) *store.PoolJournal {
	t.Helper()
	j, err := s.Journal(pool)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// outcome is what one journal call gave, in a form two journals can be
// compared on: the value, and the error's kind.
type outcome struct {
	value any
	err   string // "", "stale", "invalid" or "other: <message>"
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

// TestJournalBehavesLikeMemJournal drives the SQLite journal and the
// in-memory reference with the same random calls (takeovers, stale and
// future epochs, invalid records) and compares every answer and the loaded
// state; every 40 calls the database is closed and opened again, so what is
// compared after it is what survived on disk.
func TestJournalBehavesLikeMemJournal(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "tide.db")
			s := openAt(t, path)
			sj := journalOf(t, s, "gpu")
			mem := controller.NewMemJournal()
			rng := rand.New(rand.NewPCG(seed, 99))
			ids := []string{"gpu-0-1", "gpu-1-2", "gpu-2-3", "stray"}
			intents := []controller.Intent{controller.IntentCreate, controller.IntentDelete, "keep"}
			var epoch uint64 // the highest handed out
			for i := range 400 {
				if i > 0 && i%40 == 0 {
					s.Close()
					s = openAt(t, path)
					sj = journalOf(t, s, "gpu")
				}
				e := uint64(rng.IntN(int(epoch) + 2)) // stale, current or ahead
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
					t.Fatalf("call %d, %s: sqlite %+v, memory %+v", i, what, got, want)
				}
				gs, err := sj.Load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ms, _ := mem.Load(ctx)
				if !reflect.DeepEqual(gs, ms) {
					t.Fatalf("call %d, %s: states differ\nsqlite %+v\nmemory %+v", i, what, gs, ms)
				}
			}
		})
	}
}

// TestJournalFencesAcrossHandles: the epoch lives in the database, so two
// heads on one file (two Store handles) never get the same epoch, and the
// deposed one's writes are refused.
func TestJournalFencesAcrossHandles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tide.db")
	a, b := journalOf(t, openAt(t, path), "gpu"), journalOf(t, openAt(t, path), "gpu")
	const per = 15
	var mu sync.Mutex
	var got []uint64
	var wg sync.WaitGroup
	for _, j := range []*store.PoolJournal{a, b} {
		for range per {
			wg.Go(func() {
				e, err := j.RaiseEpoch(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, e)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	slices.Sort(got)
	for i, e := range got {
		if e != uint64(i+1) {
			t.Fatalf("epochs handed out: %v; want 1..%d, each once", got, 2*per)
		}
	}
	// a takes over at the top epoch; b, still on an older one, is deposed.
	top, err := a.RaiseEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetDesired(ctx, top, 3); err != nil {
		t.Fatal(err)
	}
	err = b.Put(ctx, top-1, controller.Record{MachineID: "gpu-0-9", Ordinal: 0, Intent: controller.IntentCreate})
	if !errors.Is(err, controller.ErrStaleEpoch) || !strings.Contains(err.Error(), `journal of pool "gpu": put "gpu-0-9"`) {
		t.Fatalf("write of the deposed handle: %v, want ErrStaleEpoch naming the pool and the call", err)
	}
	if st, _ := b.Load(ctx); len(st.Records) != 0 || st.Desired != 3 || st.Epoch != top {
		t.Fatalf("state seen by the other handle: %+v", st)
	}
	// Pools are fenced independently.
	other := journalOf(t, openAt(t, path), "cpu")
	if e, err := other.RaiseEpoch(ctx); err != nil || e != 1 {
		t.Fatalf("first epoch of another pool: %d, %v", e, err)
	}
	if _, err := (&store.Store{}).Journal(""); err == nil || !strings.Contains(err.Error(), "pool: must be set") {
		t.Fatalf("journal without a pool: %v", err)
	}
}

// The controller tests below run a pool on the simulated cloud with the
// journal in SQLite, and restart the "head": the store is closed, the file
// opened again and a new controller built on it.

const (
	pool     = "gpu"
	interval = time.Minute
)

var start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// head is one pool's controller on a simulated cloud, journaled in the
// SQLite file at path. The cloud and its clock outlive the head.
type head struct {
	t     *testing.T
	ctx   context.Context
	path  string
	clk   *clock.Fake
	cloud *sim.Cloud
	rec   *providertest.Recorder
	cfg   controller.Config
	cr    *crasher

	st      *store.Store
	journal controller.Journal
	ctl     *controller.Controller
}

func newHead(t *testing.T, seed uint64) *head {
	t.Helper()
	res := capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}
	off := sim.Offering{
		Offering: capacity.Offering{Type: "m8", Zone: "z1", Kind: capacity.OnDemand, Resources: res, PricePerHour: 0.4},
		Boot:     sim.Fixed(40 * time.Second), Configure: sim.Fixed(10 * time.Second),
		Drain: sim.Fixed(5 * time.Second), Delete: sim.Fixed(15 * time.Second),
	}
	clk := clock.NewFake(start)
	cloud, err := sim.New(sim.Config{Offerings: []sim.Offering{off}}, clk, rand.New(rand.NewPCG(seed, seed^0x5eed)))
	if err != nil {
		t.Fatal(err)
	}
	h := &head{
		t: t, ctx: context.Background(), path: filepath.Join(t.TempDir(), "tide.db"), clk: clk, cloud: cloud,
		rec: providertest.NewRecorder(cloud), cr: &crasher{},
		cfg: controller.Config{
			Pool: pool, Reconcile: reconcile.Config{Nodes: capacity.Elastic(0, 6)},
			Offerings: []capacity.Offering{off.Offering}, ControllerID: "head",
			Bootstrap:         []byte(`{"version":1,"head":"http://10.0.0.1:8000","token":"t0k3n"}`),
			ReconcileInterval: interval, LaunchTimeout: 5 * time.Minute,
		},
	}
	h.rec.Before = func(c providertest.Call) error {
		h.cr.step(fmt.Sprintf("before %s %s", c.Op, c.MachineID))
		return nil
	}
	h.rec.After = func(c providertest.Call) { h.cr.step(fmt.Sprintf("after %s %s", c.Op, c.MachineID)) }
	h.restart()
	return h
}

// restart drops the controller, closes the store, opens the file again and
// builds a new controller on it.
func (h *head) restart() {
	h.t.Helper()
	if h.st != nil {
		if err := h.st.Close(); err != nil {
			h.t.Fatal(err)
		}
	}
	h.st = openAt(h.t, h.path)
	h.journal = crashJournal{Journal: journalOf(h.t, h.st, pool), cr: h.cr}
	ctl, err := controller.New(h.cfg, controller.Deps{Provider: h.rec, Journal: h.journal,
		Workload: controller.IdleWorkload{}, Clock: h.clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.ctl = ctl
}

func (h *head) setDesired(n int) {
	h.ctl.SetDesired(policy.Decision{Desired: n, Reason: policy.NewReason("test", "test asks for %d", int64(n))})
}

// tickUntil ticks until the pool converged on want, at most max ticks.
func (h *head) tickUntil(want, max int) {
	h.t.Helper()
	var err error
	for range max {
		h.clk.Advance(interval)
		if terr := h.ctl.Tick(h.ctx); terr != nil && !provider.IsTransient(terr) {
			h.t.Fatalf("tick: %v", terr)
		}
		if err = h.converged(want); err == nil {
			return
		}
	}
	h.t.Fatalf("not converged on %d nodes after %d ticks: %v", want, max, err)
}

// converged checks that the pool holds exactly want joined nodes: the
// cloud bills exactly the machines the controller holds (nothing leaked),
// none was provisioned twice, and the journal on disk records exactly them.
func (h *head) converged(want int) error {
	st := h.ctl.Status()
	var errs []error
	if st.Desired != want || st.Current != want || st.Pending != 0 || st.Draining != 0 || len(st.Deleting) > 0 {
		errs = append(errs, fmt.Errorf("reconciler: desired %d, current %d, pending %d, draining %d, deleting %v",
			st.Desired, st.Current, st.Pending, st.Draining, st.Deleting))
	}
	var held []string
	for _, n := range st.Nodes {
		if !n.Joined {
			errs = append(errs, fmt.Errorf("node %d (%s) has not joined", n.ID, n.MachineID))
		}
		held = append(held, n.MachineID)
	}
	slices.Sort(held)
	led := h.cloud.Ledger()
	if live := led.Live(pool); !slices.Equal(live, held) {
		errs = append(errs, fmt.Errorf("cloud bills %v, controller holds %v", live, held))
	}
	if dup := led.Duplicates(); len(dup) > 0 {
		errs = append(errs, fmt.Errorf("machines provisioned twice: %v", dup))
	}
	js, err := h.journal.Load(h.ctx)
	if err != nil {
		errs = append(errs, err)
	}
	var recs []string
	for _, r := range js.Records {
		recs = append(recs, r.MachineID)
		if r.Intent != controller.IntentCreate {
			errs = append(errs, fmt.Errorf("journal still means to %s %s", r.Intent, r.MachineID))
		}
	}
	if !slices.Equal(recs, held) {
		errs = append(errs, fmt.Errorf("journal records %v, controller holds %v", recs, held))
	}
	return errors.Join(errs...)
}

// TestControllerAdoptsFromReopenedStore: a pool scaled up on a SQLite
// journal is adopted whole by a controller built on the reopened file:
// the same machines, nothing bought again, nothing leaked; the new
// controller holds a higher epoch and keeps the journaled desired count.
func TestControllerAdoptsFromReopenedStore(t *testing.T) {
	h := newHead(t, 1)
	h.setDesired(4)
	h.tickUntil(4, 10)
	before := h.ctl.Status()
	bought := len(h.cloud.Ledger().Machines)

	h.restart() // no SetDesired: the journaled count is kept
	h.tickUntil(4, 3)
	after := h.ctl.Status()
	if !reflect.DeepEqual(after.Nodes, before.Nodes) {
		t.Fatalf("nodes after the restart:\n%+v\nbefore:\n%+v", after.Nodes, before.Nodes)
	}
	if after.Epoch <= before.Epoch {
		t.Fatalf("epoch %d after the restart, %d before", after.Epoch, before.Epoch)
	}
	if n := len(h.cloud.Ledger().Machines); n != bought {
		t.Fatalf("the restart bought machines: %d, was %d", n, bought)
	}
	// The adopted pool scales down and up like its own.
	h.setDesired(1)
	h.tickUntil(1, 10)
	h.setDesired(2)
	h.tickUntil(2, 10)
	if n := len(h.cloud.Ledger().Machines); n != bought+1 {
		t.Fatalf("%d machines bought in all, want %d", n, bought+1)
	}
}

// TestControllerCrashAtEveryStep is the controller's crash proof on the
// SQLite journal: for a scale-up 0→3 and a scale-down 3→1, the controller
// dies at every step in turn (before and after each provider call and
// journal write), the store is closed and reopened, and a new controller
// converges with nothing leaked and nothing provisioned twice.
func TestControllerCrashAtEveryStep(t *testing.T) {
	scenarios := []struct {
		name         string
		from, target int
		maxMachines  int
	}{
		{"scale-up 0→3", 0, 3, 3},
		{"scale-down 3→1", 3, 1, 3},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			steps := 0
			for k := 1; ; k++ {
				h := newHead(t, 7)
				if sc.from > 0 {
					h.setDesired(sc.from)
					h.tickUntil(sc.from, 10)
				}
				h.cr.arm(k)
				step, crashed := survive(func() { h.setDesired(sc.target); h.tickUntil(sc.target, 20) })
				if !crashed {
					steps = k - 1
					break
				}
				h.cr.arm(0)
				h.restart()
				h.setDesired(sc.target)
				func() {
					defer func() {
						if t.Failed() {
							t.Logf("crash at step %d: %s", k, step)
						}
					}()
					h.tickUntil(sc.target, 12)
					if n := len(h.cloud.Ledger().Machines); n < sc.maxMachines || n > sc.maxMachines {
						t.Errorf("crash at step %d (%s): %d machines provisioned, want %d", k, step, n, sc.maxMachines)
					}
				}()
				if t.Failed() {
					return
				}
			}
			if steps < 10 {
				t.Fatalf("only %d crash points: the hooks do not see the steps", steps)
			}
			t.Logf("%d crash points, each recovered", steps)
		})
	}
}

// crash is the panic that kills a controller mid-step.
type crash struct{ step string }

// crasher numbers the steps (each provider call and journal write, before
// and after it) and panics at step k.
type crasher struct {
	mu   sync.Mutex
	k, n int
}

func (c *crasher) step(what string) {
	c.mu.Lock()
	c.n++
	hit := c.k > 0 && c.n == c.k
	c.mu.Unlock()
	if hit {
		panic(crash{step: what})
	}
}

func (c *crasher) arm(k int) {
	c.mu.Lock()
	c.k, c.n = k, 0
	c.mu.Unlock()
}

// survive runs fn and reports the crash that stopped it, if any.
func survive(fn func()) (step string, crashed bool) {
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(crash)
			if !ok {
				panic(r)
			}
			step, crashed = c.step, true
		}
	}()
	fn()
	return "", false
}

// crashJournal puts a crash point before and after every journal write.
type crashJournal struct {
	controller.Journal
	cr *crasher
}

func (j crashJournal) around(what string, fn func() error) error {
	j.cr.step("before journal " + what)
	err := fn()
	j.cr.step("after journal " + what)
	return err
}

func (j crashJournal) RaiseEpoch(ctx context.Context) (e uint64, err error) {
	err = j.around("raise epoch", func() error { e, err = j.Journal.RaiseEpoch(ctx); return err })
	return e, err
}

func (j crashJournal) NextSerial(ctx context.Context, epoch uint64) (s uint64, err error) {
	err = j.around("next serial", func() error { s, err = j.Journal.NextSerial(ctx, epoch); return err })
	return s, err
}

func (j crashJournal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	return j.around("put "+r.MachineID+" "+string(r.Intent), func() error { return j.Journal.Put(ctx, epoch, r) })
}

func (j crashJournal) Remove(ctx context.Context, epoch uint64, id string) error {
	return j.around("remove "+id, func() error { return j.Journal.Remove(ctx, epoch, id) })
}

func (j crashJournal) SetDesired(ctx context.Context, epoch uint64, d int) error {
	return j.around(fmt.Sprint("set desired ", d), func() error { return j.Journal.SetDesired(ctx, epoch, d) })
}
