package head

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// poolEnv is a head env with one pool "p" whose controller drives a
// simulated cloud on the head's fake clock, through the head's own
// Workload (as the assembly wires it): machines boot, configure, drain and
// delete in a second each, and the controller ticks every second.
type poolEnv struct {
	*env
	cloud *sim.Cloud
	ctl   *controller.Controller
	mu    sync.Mutex
	evs   []controller.Event
}

func newPoolEnv(t *testing.T) *poolEnv {
	t.Helper()
	e := &poolEnv{env: newEnv(t, nil)}
	off := sim.Offering{Offering: capacity.Offering{Type: "m", Zone: "z1", Kind: capacity.OnDemand,
		Resources: capacity.Resources{MilliCPU: 8000, Memory: 16 << 30}, PricePerHour: 0.1}}
	off.Boot, off.Configure, off.Drain, off.Delete = sim.Fixed(time.Second), sim.Fixed(time.Second), sim.Fixed(time.Second), sim.Fixed(time.Second)
	cloud, err := sim.New(sim.Config{Offerings: []sim.Offering{off}}, e.clk, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	e.cloud = cloud
	e.ctl, err = controller.New(controller.Config{Pool: "p", Reconcile: reconcile.Config{Nodes: capacity.Elastic(0, 2)},
		Offerings: []capacity.Offering{off.Offering}, Bootstrap: []byte(`{"version":1,"head":"http://127.0.0.1:1","token":"t"}`),
		ControllerID: "ctl", ReconcileInterval: time.Second, LaunchTimeout: time.Minute, CapacityBackoff: time.Minute},
		controller.Deps{Provider: cloud, Journal: controller.NewMemJournal(), Workload: e.h.Workload(), Clock: e.clk,
			Logger: slog.New(slog.DiscardHandler), Events: controller.EventFunc(func(ev controller.Event) {
				e.mu.Lock()
				e.evs = append(e.evs, ev)
				e.mu.Unlock()
			})})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// tick moves the clock a second (live workers heartbeat first, so only the
// lost one stays silent) and runs one controller pass.
func (e *poolEnv) tick(live map[string]string) {
	e.t.Helper()
	e.clk.Advance(time.Second)
	for id, tok := range live {
		e.heartbeat(id, tok, 0)
	}
	if err := e.ctl.Tick(context.Background()); err != nil {
		e.t.Fatalf("tick: %v\n%s", err, e.events())
	}
}

func (e *poolEnv) setDesired(n int) {
	e.ctl.SetDesired(policy.Decision{Desired: n, Reason: policy.NewReason("test", "test asks for %d", int64(n))})
}

func (e *poolEnv) events() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.evs {
		b.WriteString(ev.String() + "\n")
	}
	return b.String()
}

// machineState is the cloud's state of machine id; "gone" once NotFound.
func (e *poolEnv) machineState(id string) string {
	m, err := e.cloud.Get(context.Background(), id)
	if provider.IsNotFound(err) {
		return "gone"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return string(m.State)
}

// lostWorker launches one machine, registers its worker (named after the
// machine, as the agent on it would), runs a restartable instance on it,
// registers a second worker w2 that stays ONLINE, and lets the machine's
// worker go silent until the head declares it OFFLINE. It returns the
// machine, the instance, w2's token and the instance's NotBefore.
func (e *poolEnv) lostWorker() (machine, inst, tok2 string, notBefore time.Time) {
	e.t.Helper()
	e.setDesired(1)
	for i := 0; i < 10 && e.ctl.Status().Current != 1; i++ {
		e.tick(nil)
	}
	st := e.ctl.Status()
	if st.Current != 1 || len(st.Nodes) != 1 {
		e.t.Fatalf("pool did not reach one node: %+v\n%s", st, e.events())
	}
	machine = st.Nodes[0].MachineID
	tok := e.registerIn(machine, "p")
	inst = e.submit(obj{"command": "r", "pool": "p", "restart_policy": "on-failure", "max_restarts": 3})
	if n := e.schedule(); n != 1 {
		e.t.Fatalf("placed %d, want 1", n)
	}
	e.heartbeat(machine, tok, 0, httpapi.InstanceReport{InstanceID: inst, Attempt: 1, Status: "RUNNING", Port: ip(1)})
	tok2 = e.registerIn("w2", "p")

	// The machine's worker goes silent (a partition, a hung host): OFFLINE.
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.heartbeat("w2", tok2, 0)
	must(e.t, e.h.CheckLiveness(context.Background()))
	in := e.instance(inst)
	if in.Status != "PENDING" || in.NotBefore == nil || !strings.Contains(in.WaitingReason, "held until") {
		e.t.Fatalf("requeued from the OFFLINE worker: %s, not before %v, waiting %q", in.Status, in.NotBefore, in.WaitingReason)
	}
	notBefore, err := time.Parse(httpapi.TimeFormat, *in.NotBefore)
	if err != nil {
		e.t.Fatal(err)
	}
	return machine, inst, tok2, notBefore
}

// TestHoldReleasedWhenMachineDeleted: a worker goes OFFLINE and its
// restartable instance is requeued, held for the fence (about 75 s at the
// defaults). The pool controller then scales the node away: drain, Delete.
// While the machine is draining, or deleting but not yet gone, the hold
// stays (the old attempt might still run there). Once the provider
// confirms the machine gone (Delete answers NotFound), the head releases
// the hold at once: the instance is placed on the other worker long before
// the old NotBefore, with an event and a metric saying why.
func TestHoldReleasedWhenMachineDeleted(t *testing.T) {
	e := newPoolEnv(t)
	machine, inst, tok2, notBefore := e.lostWorker()
	live := map[string]string{"w2": tok2}

	e.setDesired(0)
	var sawDeleting bool
	for i := 0; i < 20 && e.machineState(machine) != "gone"; i++ {
		// Every step before the confirmed deletion: still held.
		if n := e.schedule(); n != 0 {
			t.Fatalf("placed %d while machine %s is %s\n%s", n, machine, e.machineState(machine), e.events())
		}
		if in := e.instance(inst); in.NotBefore == nil || !strings.Contains(in.WaitingReason, "held until") {
			t.Fatalf("hold gone while machine %s is %s: %+v", machine, e.machineState(machine), in)
		}
		sawDeleting = sawDeleting || e.machineState(machine) == string(provider.Deleting)
		e.tick(live)
	}
	if e.machineState(machine) != "gone" || !sawDeleting {
		t.Fatalf("machine %s: %s (seen deleting: %v)\n%s", machine, e.machineState(machine), sawDeleting, e.events())
	}
	if !e.clk.Now().Before(notBefore) {
		t.Fatalf("the machine was deleted only at %s, after the hold's end %s: the test proves nothing", e.clk.Now(), notBefore)
	}
	t.Logf("machine %s confirmed deleted %s after the OFFLINE declaration, %s before the hold's end",
		machine, e.clk.Now().Sub(notBefore.Add(-e.h.fenceHold())), notBefore.Sub(e.clk.Now()))

	in := e.instance(inst)
	if in.NotBefore != nil || strings.Contains(in.WaitingReason, "held") {
		t.Fatalf("after the deletion: not before %v, waiting %q", in.NotBefore, in.WaitingReason)
	}
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d after the deletion, want 1", n)
	}
	in = e.instance(inst)
	if in.Status != "ASSIGNED" || in.AssignedTo == nil || *in.AssignedTo != "w2" || in.Attempt != 2 {
		t.Fatalf("after the deletion: %s on %v attempt %d", in.Status, in.AssignedTo, in.Attempt)
	}
	if v := counterValue(t, e.h.m.released); v != 1 {
		t.Fatalf("tide_head_fence_holds_released_total = %v, want 1", v)
	}
	evs := eventsOf(t, e.env, ReasonHoldReleased)
	want := "hold released: worker " + machine + "'s machine " + machine + " was deleted"
	if len(evs) != 1 || !strings.HasPrefix(evs[0].Message, want) || !strings.Contains(evs[0].Message, inst) ||
		evs[0].Pool != "p" || evs[0].Node != machine {
		t.Fatalf("hold-released events: %+v, want one starting %q", evs, want)
	}

	// Idempotent: the controller may tell it again (after a restart).
	if err := e.h.Workload().(controller.DeletionObserver).MachineDeleted(context.Background(),
		controller.Node{Pool: "p", MachineID: machine}); err != nil {
		t.Fatal(err)
	}
	if v := counterValue(t, e.h.m.released); v != 1 {
		t.Fatalf("a second MachineDeleted counted again: %v", v)
	}
}

// TestHoldKeptWithoutConfirmedDeletion: nothing short of a confirmed
// deletion of the lost worker's own machine ends the hold: not the worker
// being OFFLINE, not the head forgetting it (Forget, which a controller
// calls before it deletes the machine), not a cordon or drain, not the
// deletion of another machine. The instance waits for its NotBefore.
func TestHoldKeptWithoutConfirmedDeletion(t *testing.T) {
	ctx := context.Background()
	e := newPoolEnv(t)
	machine, inst, tok2, notBefore := e.lostWorker()
	live := map[string]string{"w2": tok2}
	wl := e.h.Workload()
	node := controller.Node{Pool: "p", MachineID: machine}
	must(t, wl.Cordon(ctx, node))
	must(t, wl.(controller.Forgetter).Forget(ctx, node))
	must(t, wl.(controller.DeletionObserver).MachineDeleted(ctx, controller.Node{Pool: "p", MachineID: "p-9-9"}))
	for e.clk.Now().Add(time.Second).Before(notBefore) {
		e.tick(live)
		if n := e.schedule(); n != 0 {
			t.Fatalf("placed %d at %s, before the hold's end %s", n, e.clk.Now(), notBefore)
		}
	}
	if in := e.instance(inst); in.Status != "PENDING" || in.NotBefore == nil || !strings.Contains(in.WaitingReason, "held until") {
		t.Fatalf("1 s before the hold's end: %s, not before %v, waiting %q", in.Status, in.NotBefore, in.WaitingReason)
	}
	if e.machineState(machine) != string(provider.Configured) {
		t.Fatalf("machine %s: %s; the test wants it alive", machine, e.machineState(machine))
	}
	e.clk.Advance(notBefore.Sub(e.clk.Now()))
	e.heartbeat("w2", tok2, 0)
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d at the hold's end, want 1", n)
	}
	if v := counterValue(t, e.h.m.released); v != 0 {
		t.Fatalf("tide_head_fence_holds_released_total = %v, want 0", v)
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
