package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

var start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

const (
	pool     = "gpu"
	onDemand = "m8/z1/on-demand"
	spot     = "m8/z1/spot"
	interval = time.Minute
	timeout  = 5 * time.Minute
)

// catalog is a small cloud with fixed latencies, so tick counts are exact:
// spot is the cheaper offering (effective $0.22/h against $0.40/h) and is
// never interrupted unless a test says so.
func catalog() []sim.Offering {
	res := capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}
	lat := func(o *sim.Offering) {
		o.Boot = sim.Fixed(40 * time.Second)
		o.Configure = sim.Fixed(10 * time.Second)
		o.Drain = sim.Fixed(5 * time.Second)
		o.Delete = sim.Fixed(15 * time.Second)
	}
	od := sim.Offering{Offering: capacity.Offering{Type: "m8", Zone: "z1", Kind: capacity.OnDemand, Resources: res, PricePerHour: 0.40}}
	sp := sim.Offering{Offering: capacity.Offering{Type: "m8", Zone: "z1", Kind: capacity.Spot, Resources: res, PricePerHour: 0.12,
		InterruptionPenalty: 2}}
	lat(&od)
	lat(&sp)
	return []sim.Offering{od, sp}
}

// offerings is what the controller is told the pool may launch: the cloud's
// catalog, priced as the cloud prices it, with spot's expected interruption
// cost (5 %/h × $2) making it $0.22/h effective.
func offerings(cat []sim.Offering) []capacity.Offering {
	out := make([]capacity.Offering, len(cat))
	for i, o := range cat {
		out[i] = o.Offering
		if o.Kind == capacity.Spot {
			out[i].InterruptionProbability = 0.05
		}
	}
	return out
}

// env is one pool's controller on a simulated cloud on a fake clock. The
// journal, the cloud and the workload outlive the controller, so a test can
// crash it (drop it) and start another.
type env struct {
	t       testing.TB
	ctx     context.Context
	clk     *clock.Fake
	cloud   *sim.Cloud
	rec     *providertest.Recorder
	spy     *createSpy
	journal controller.Journal
	mem     *controller.MemJournal
	work    *fakeWorkload
	events  *eventLog
	cfg     controller.Config
	ctl     *controller.Controller
	ticks   int
}

type setup struct {
	nodes capacity.NodeSpec
	seed  uint64
	sim   func(*sim.Config)
	cfg   func(*controller.Config)
}

func newEnv(t testing.TB, s setup) *env {
	t.Helper()
	if s.nodes == (capacity.NodeSpec{}) {
		s.nodes = capacity.Elastic(0, 8)
	}
	if s.seed == 0 {
		s.seed = 1
	}
	scfg := sim.Config{Offerings: catalog()}
	if s.sim != nil {
		s.sim(&scfg)
	}
	clk := clock.NewFake(start)
	cloud, err := sim.New(scfg, clk, rand.New(rand.NewPCG(s.seed, s.seed^0x5eed)))
	if err != nil {
		t.Fatal(err)
	}
	mem := controller.NewMemJournal()
	spy := &createSpy{Provider: cloud}
	e := &env{
		t: t, ctx: context.Background(), clk: clk, cloud: cloud, rec: providertest.NewRecorder(spy), spy: spy,
		journal: mem, mem: mem, work: newFakeWorkload(), events: &eventLog{},
		cfg: controller.Config{
			Pool:              pool,
			Reconcile:         reconcile.Config{Nodes: s.nodes},
			Offerings:         offerings(scfg.Offerings),
			Bootstrap:         []byte(`{"version":1,"head":"http://10.0.0.1:8000","token":"t0k3n"}`),
			ControllerID:      "ctl-a",
			ReconcileInterval: interval,
			LaunchTimeout:     timeout,
			CapacityBackoff:   2 * time.Minute,
		},
	}
	if s.cfg != nil {
		s.cfg(&e.cfg)
	}
	e.ctl = e.newController()
	return e
}

// newController builds a controller on the env's journal, cloud (through
// the recorder) and workload.
func (e *env) newController() *controller.Controller {
	e.t.Helper()
	ctl, err := controller.New(e.cfg, controller.Deps{
		Provider: e.rec, Journal: e.journal, Workload: e.work, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler), Events: e.events,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ctl
}

func (e *env) setDesired(n int) {
	e.ctl.SetDesired(policy.Decision{Desired: n, Reason: policy.NewReason("test", "test asks for %d", int64(n))})
}

// tick moves the clock one interval and runs a full pass.
func (e *env) tick() error {
	e.clk.Advance(e.cfg.ReconcileInterval)
	e.ticks++
	return e.ctl.Tick(e.ctx)
}

// mustTick ticks and fails the test on an error, except a takeover that
// failed on a provider error (the controller retries it on the next tick).
func (e *env) mustTick() {
	e.t.Helper()
	if err := e.tick(); err != nil {
		if st := e.ctl.Status(); !st.Started && !st.Deposed && provider.IsTransient(err) {
			return
		}
		e.t.Fatalf("tick %d: %v\n%s", e.ticks, err, e.events.tail(20))
	}
}

// tickUntil ticks until the pool has converged on want, at most max times,
// and returns the number of ticks it took.
func (e *env) tickUntil(want, max int) int {
	e.t.Helper()
	var err error
	for i := 1; i <= max; i++ {
		e.mustTick()
		if err = e.converged(want); err == nil {
			return i
		}
	}
	e.t.Fatalf("not converged on %d nodes after %d ticks: %v\n%s\njournal: %s\nevents:\n%s", want, max, err,
		e.describe(), e.mem, e.events.tail(30))
	return 0
}

// converged checks that the pool holds exactly want joined nodes and
// nothing else: the reconciler is watching with no pending or draining node,
// every machine the controller holds is Configured, the cloud bills exactly
// those machines (nothing leaked), none was provisioned twice, and the
// journal records exactly them.
func (e *env) converged(want int) error {
	st := e.ctl.Status()
	var errs []error
	if st.Desired != want || st.Current != want || st.Pending != 0 || st.Draining != 0 || st.State != "watching" {
		errs = append(errs, fmt.Errorf("reconciler: state %s, desired %d, current %d, pending %d, draining %d",
			st.State, st.Desired, st.Current, st.Pending, st.Draining))
	}
	if len(st.Deleting) > 0 {
		errs = append(errs, fmt.Errorf("still deleting %v", st.Deleting))
	}
	var held []string
	for _, n := range st.Nodes {
		if !n.Joined {
			errs = append(errs, fmt.Errorf("node %d (%s) has not joined", n.ID, n.MachineID))
		}
		held = append(held, n.MachineID)
	}
	slices.Sort(held)
	if len(held) != want {
		errs = append(errs, fmt.Errorf("controller holds %d machines, want %d", len(held), want))
	}
	led := e.cloud.Ledger()
	if live := led.Live(pool); !slices.Equal(live, held) {
		errs = append(errs, fmt.Errorf("cloud bills %v, controller holds %v", live, held))
	}
	if dup := led.Duplicates(); len(dup) > 0 {
		errs = append(errs, fmt.Errorf("machines provisioned twice: %v", dup))
	}
	ms, err := e.cloud.List(e.ctx, provider.Filter{Pool: pool})
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range ms {
		if m.State != provider.Configured || !m.ReclaimAt.IsZero() {
			errs = append(errs, fmt.Errorf("machine %s is %s (reclaim at %v)", m.ID, m.State, m.ReclaimAt))
		}
	}
	js, err := e.journal.Load(e.ctx)
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

// createSpy counts the Creates that reach the cloud, by offering.
type createSpy struct {
	provider.Provider
	mu         sync.Mutex
	byOffering map[string]int
}

func (s *createSpy) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	s.mu.Lock()
	if s.byOffering == nil {
		s.byOffering = map[string]int{}
	}
	s.byOffering[req.Offering]++
	s.mu.Unlock()
	return s.Provider.Create(ctx, req)
}

func (s *createSpy) creates(offering string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byOffering[offering]
}

func (e *env) describe() string {
	st := e.ctl.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s desired %d current %d pending %d draining %d deleting %v\n", st.State, st.Desired, st.Current, st.Pending, st.Draining, st.Deleting)
	for _, n := range st.Nodes {
		fmt.Fprintf(&b, "  node %d: %s joined=%v draining=%v\n", n.ID, n.MachineID, n.Joined, n.Draining)
	}
	ms, _ := e.cloud.List(e.ctx, provider.Filter{Pool: pool})
	for _, m := range ms {
		fmt.Fprintf(&b, "  cloud: %s %s reclaim=%v\n", m.ID, m.State, !m.ReclaimAt.IsZero())
	}
	return b.String()
}

// calls counts the recorder's calls of op that reached the cloud.
func (e *env) calls(op tideprovider.Op) int {
	n := 0
	for _, c := range e.rec.Calls(op) {
		if c.Forwarded {
			n++
		}
	}
	return n
}

// machineOf returns the machine id serving node id.
func (e *env) machineOf(id reconcile.NodeID) string {
	e.t.Helper()
	for _, n := range e.ctl.Status().Nodes {
		if n.ID == id {
			return n.MachineID
		}
	}
	e.t.Fatalf("no machine serves node %d\n%s", id, e.describe())
	return ""
}

// eventLog is an EventSink that keeps every event.
type eventLog struct {
	mu     sync.Mutex
	events []controller.Event
}

func (l *eventLog) Emit(e controller.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// find returns the events with the reason whose message contains every one
// of the words.
func (l *eventLog) find(reason string, words ...string) []controller.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []controller.Event
	for _, e := range l.events {
		if e.Reason != reason {
			continue
		}
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(e.Message, w)
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

func (l *eventLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.events)-n)
	var b strings.Builder
	for _, e := range l.events[from:] {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (l *eventLog) reset() {
	l.mu.Lock()
	l.events = nil
	l.mu.Unlock()
}

// fakeWorkload is the scheduler side: which nodes run work, which are
// cordoned, and the calls made.
type fakeWorkload struct {
	mu       sync.Mutex
	busy     map[reconcile.NodeID]bool
	cordoned map[reconcile.NodeID]bool
	calls    []string
	fail     error
}

func newFakeWorkload() *fakeWorkload {
	return &fakeWorkload{busy: map[reconcile.NodeID]bool{}, cordoned: map[reconcile.NodeID]bool{}}
}

func (w *fakeWorkload) Cordon(_ context.Context, n controller.Node) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	w.calls = append(w.calls, fmt.Sprintf("cordon %d", n.ID))
	w.cordoned[n.ID] = true
	return nil
}

func (w *fakeWorkload) Uncordon(_ context.Context, n controller.Node) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	if w.cordoned[n.ID] {
		w.calls = append(w.calls, fmt.Sprintf("uncordon %d", n.ID))
	}
	delete(w.cordoned, n.ID)
	return nil
}

func (w *fakeWorkload) Busy(_ context.Context, n controller.Node) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return false, w.fail
	}
	return w.busy[n.ID], nil
}

func (w *fakeWorkload) setBusy(id reconcile.NodeID, busy bool) {
	w.mu.Lock()
	w.busy[id] = busy
	w.mu.Unlock()
}

func (w *fakeWorkload) isCordoned(id reconcile.NodeID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cordoned[id]
}

func (w *fakeWorkload) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}
