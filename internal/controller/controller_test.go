package controller_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// TestScaleUpAndDown walks the happy path and pins its tick count: Create
// on the first tick, Configure once Idle on the second, joined on the third;
// scale-down drains, unbinds, deletes and forgets every machine.
func TestScaleUpAndDown(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(3)
	if n := e.tickUntil(3, 10); n != 3 {
		t.Errorf("scale-up took %d ticks, want 3 (create, configure, joined)", n)
	}
	for _, n := range e.ctl.Status().Nodes {
		if n.Offering != spot {
			t.Errorf("node %d runs on %s, want the cheapest by effective cost, %s", n.ID, n.Offering, spot)
		}
		if want := "gpu-" + string(rune('0'+n.ID)) + "-"; !strings.HasPrefix(n.MachineID, want) {
			t.Errorf("node %d has machine id %q, want prefix %q", n.ID, n.MachineID, want)
		}
	}
	if got := e.calls(tideprovider.OpCreate); got != 3 {
		t.Errorf("%d creates, want 3", got)
	}
	e.setDesired(0)
	e.tickUntil(0, 10)
	if got := e.calls(tideprovider.OpDrain); got != 3 {
		t.Errorf("%d provider drains, want 3 (each machine leaves its cluster before it is deleted)", got)
	}
	if led := e.cloud.Ledger(); len(led.Live("")) != 0 {
		live := led.Live("")
		t.Errorf("cloud still bills %v", live)
	}
	for _, reason := range []string{controller.ReasonStarted, controller.ReasonDesiredChanged, controller.ReasonProvision,
		controller.ReasonLaunched, controller.ReasonConfiguring, controller.ReasonJoined, controller.ReasonDrain,
		controller.ReasonDrained, controller.ReasonTerminate, controller.ReasonDeleted} {
		if len(e.events.find(reason)) == 0 {
			t.Errorf("no %q event", reason)
		}
	}
}

// TestFixedPoolSelfHeals is seed 000's "Always-on reconciliation": a fixed
// pool of 4 gets no DesiredChanged at all, loses a node, and the tick
// replaces it with a new machine for the same ordinal.
func TestFixedPoolSelfHeals(t *testing.T) {
	e := newEnv(t, setup{nodes: capacity.Fixed(4)})
	e.tickUntil(4, 10)
	lost := e.machineOf(2)
	if err := e.cloud.Lose(lost); err != nil {
		t.Fatal(err)
	}
	e.mustTick()
	if len(e.events.find(controller.ReasonNodeLost, lost, "disappeared")) != 1 {
		t.Errorf("no node-lost event for %s:\n%s", lost, e.events.tail(10))
	}
	if len(e.events.find(controller.ReasonProvision, "provision 2")) != 1 {
		t.Errorf("the tick did not provision node 2 again:\n%s", e.events.tail(10))
	}
	e.tickUntil(4, 3)
	if again := e.machineOf(2); again == lost {
		t.Errorf("node 2 is still served by the lost machine %s", lost)
	}
	led := e.cloud.Ledger()
	if len(led.Machines) != 5 {
		t.Errorf("ledger has %d machines, want 5 (4 + 1 replacement)", len(led.Machines))
	}
}

// TestPendingCountsTowardEffective holds DESIGN invariant 4 through the
// controller: machines that boot for several ticks are launched once.
func TestPendingCountsTowardEffective(t *testing.T) {
	e := newEnv(t, setup{sim: func(c *sim.Config) {
		for i := range c.Offerings {
			c.Offerings[i].Boot = sim.Fixed(4 * time.Minute)
		}
	}})
	e.setDesired(3)
	for range 4 {
		e.mustTick()
		st := e.ctl.Status()
		if st.Current+st.Pending != 3 {
			t.Fatalf("effective %d+%d, want 3", st.Current, st.Pending)
		}
		if got := e.calls(tideprovider.OpCreate); got != 3 {
			t.Fatalf("after %d ticks: %d creates, want 3 while booting", e.ticks, got)
		}
	}
	e.tickUntil(3, 4)
	if got := e.calls(tideprovider.OpCreate); got != 3 {
		t.Errorf("%d creates, want 3", got)
	}
}

// TestDrainAbortedWhenDemandReturns: nodes running work are cordoned and
// waited for; when demand returns the drains are aborted, dispatch resumes,
// and no machine is unbound, deleted or created.
func TestDrainAbortedWhenDemandReturns(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(4)
	e.tickUntil(4, 10)
	e.work.setBusy(2, true) // work still running, so the drains must wait
	e.work.setBusy(3, true)
	machines := e.ctl.Status().Nodes
	creates := e.calls(tideprovider.OpCreate)

	e.setDesired(2)
	e.mustTick()
	e.mustTick()
	if st := e.ctl.Status(); st.Draining != 2 || st.State != "draining" {
		t.Fatalf("want nodes 2 and 3 draining, got %+v", st)
	}
	if !e.work.isCordoned(2) || !e.work.isCordoned(3) {
		t.Fatalf("draining nodes not cordoned: %v", e.work.log())
	}
	if got := e.calls(tideprovider.OpDrain); got != 0 {
		t.Fatalf("%d provider drains while the nodes still run work", got)
	}

	e.setDesired(4)
	if err := e.ctl.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.work.isCordoned(2) || e.work.isCordoned(3) {
		t.Errorf("aborted drains left nodes cordoned: %v", e.work.log())
	}
	if len(e.events.find(controller.ReasonAbortDrain)) != 2 {
		t.Errorf("want 2 abort-drain events:\n%s", e.events.tail(10))
	}
	e.tickUntil(4, 2)
	if got := e.calls(tideprovider.OpDrain) + e.calls(tideprovider.OpDelete); got != 0 {
		t.Errorf("%d drain/delete calls, want none", got)
	}
	if got := e.calls(tideprovider.OpCreate); got != creates {
		t.Errorf("%d creates after the abort, want none", got-creates)
	}
	if after := e.ctl.Status().Nodes; !slices.Equal(after, machines) {
		t.Errorf("machines changed:\nbefore %v\nafter  %v", machines, after)
	}
}

// TestDrainAbortedAfterUnbind: the drain got as far as the provider's Drain
// (the machine left its cluster) when demand returned. The same machine is
// configured again; nothing is created or deleted.
func TestDrainAbortedAfterUnbind(t *testing.T) {
	e := newEnv(t, setup{sim: func(c *sim.Config) {
		for i := range c.Offerings {
			c.Offerings[i].Drain = sim.Fixed(90 * time.Second) // still leaving at the next tick
		}
	}})
	e.setDesired(2)
	e.tickUntil(2, 10)
	before := e.machineOf(1)
	creates := e.calls(tideprovider.OpCreate)
	e.setDesired(1)
	e.mustTick()
	if got := e.calls(tideprovider.OpDrain); got != 1 {
		t.Fatalf("%d provider drains, want 1 (the node is empty)", got)
	}
	e.setDesired(2)
	e.tickUntil(2, 4)
	if after := e.machineOf(1); after != before {
		t.Errorf("node 1 is now %s, want the same machine %s configured again", after, before)
	}
	if got := e.calls(tideprovider.OpCreate) - creates; got != 0 {
		t.Errorf("%d creates after the abort, want 0", got)
	}
	if got := e.calls(tideprovider.OpDelete); got != 0 {
		t.Errorf("%d deletes, want 0", got)
	}
}

// TestBusyNodesAreNotDrained: a node reported busy is never drained; the
// blocked scale-down says why.
func TestBusyNodesAreNotDrained(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(3)
	e.tickUntil(3, 10)
	e.ctl.ReportBusy(2, true)
	e.setDesired(2)
	e.mustTick()
	if len(e.events.find(reconcile.NoteDrainBlocked)) != 0 {
		t.Fatalf("unexpected drain-blocked with idle nodes left:\n%s", e.events.tail(10))
	}
	e.tickUntil(2, 4)
	if e.machineOf(2) == "" {
		t.Fatal("busy node 2 was removed")
	}
	e.ctl.ReportBusy(0, true)
	e.ctl.ReportBusy(2, true)
	e.setDesired(0)
	e.mustTick()
	if got := e.events.find(reconcile.NoteDrainBlocked, "nodes 0 2 run work"); len(got) != 1 {
		t.Errorf("want a drain-blocked event naming nodes 0 and 2:\n%s", e.events.tail(10))
	}
	if st := e.ctl.Status(); st.Current != 2 {
		t.Errorf("busy nodes were removed: %+v", st)
	}
}

// TestBusyReportBeforeJoinIsKept: the scheduler can see a worker (and report
// it busy) before the controller's next List shows its machine Configured.
// The report must survive until the node joins, or the reconciler would
// take the busy node for an idle one.
func TestBusyReportBeforeJoinIsKept(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(3)
	e.mustTick() // provisioned, not joined yet
	if st := e.ctl.Status(); st.Current != 0 {
		t.Fatalf("nodes joined in the first tick: %+v", st)
	}
	for _, id := range []reconcile.NodeID{1, 2} {
		e.ctl.ReportBusy(id, true)
	}
	e.tickUntil(3, 10)
	e.setDesired(1)
	for range 4 {
		e.mustTick()
	}
	if got := e.events.find(reconcile.NoteDrainBlocked, "nodes 1 2 run work"); len(got) == 0 {
		t.Errorf("want a drain-blocked event naming nodes 1 and 2:\n%s", e.events.tail(12))
	}
	var kept []reconcile.NodeID
	for _, n := range e.ctl.Status().Nodes {
		kept = append(kept, n.ID)
	}
	if !slices.Equal(kept, []reconcile.NodeID{1, 2}) {
		t.Fatalf("nodes %v remain, want the busy [1 2] (idle node 0 removed):\n%s", kept, e.events.tail(12))
	}
}

// TestInsufficientCapacityFallsBack: the cheapest offering is out of
// capacity, so the next-cheapest is used and an event says why; during the
// backoff the out offering is not asked again, after it it is.
func TestInsufficientCapacityFallsBack(t *testing.T) {
	e := newEnv(t, setup{cfg: func(c *controller.Config) { c.CapacityBackoff = 5 * time.Minute }})
	if err := e.cloud.Tune(spot, func(o *sim.Offering) { o.OutOfCapacity = true }); err != nil {
		t.Fatal(err)
	}
	e.setDesired(2)
	e.tickUntil(2, 10)
	for _, n := range e.ctl.Status().Nodes {
		if n.Offering != onDemand {
			t.Errorf("node %d on %s, want %s", n.ID, n.Offering, onDemand)
		}
	}
	got := e.events.find(controller.ReasonInsufficientCapacity, spot, "next-cheapest, "+onDemand)
	if len(got) != 1 {
		t.Fatalf("want one insufficient-capacity event naming both offerings:\n%s", e.events.tail(20))
	}
	spotCreates := func() int { return e.spy.creates(spot) }
	if n := spotCreates(); n != 1 {
		t.Fatalf("%d spot creates, want 1", n)
	}
	// Within the 5-minute backoff a new node goes straight to on-demand.
	e.setDesired(3)
	e.tickUntil(3, 4)
	if n := spotCreates(); n != 1 {
		t.Errorf("%d spot creates during the backoff, want still 1", n)
	}
	// After it, spot (back in stock) is the first choice again.
	if err := e.cloud.Tune(spot, func(o *sim.Offering) { o.OutOfCapacity = false }); err != nil {
		t.Fatal(err)
	}
	e.setDesired(4)
	e.tickUntil(4, 4)
	if n := e.ctl.Status().Nodes[3]; n.Offering != spot {
		t.Errorf("node 3 on %s after the backoff, want %s", n.Offering, spot)
	}
}

// TestEveryOfferingOut: with nothing to buy, each tick probes one offering
// once and says so; when capacity returns the pool fills within 3 ticks.
func TestEveryOfferingOut(t *testing.T) {
	e := newEnv(t, setup{})
	out := func(v bool) {
		for _, name := range []string{spot, onDemand} {
			if err := e.cloud.Tune(name, func(o *sim.Offering) { o.OutOfCapacity = v }); err != nil {
				t.Fatal(err)
			}
		}
	}
	out(true)
	e.setDesired(2)
	e.mustTick()
	if got := e.calls(tideprovider.OpCreate); got != 2 {
		t.Fatalf("first tick: %d creates, want 2 (one per offering)", got)
	}
	for i := range 5 {
		e.mustTick()
		if got := e.calls(tideprovider.OpCreate); got != 3+i {
			t.Fatalf("tick %d: %d creates, want one probe per tick (%d)", e.ticks, got, 3+i)
		}
	}
	if len(e.events.find(controller.ReasonNoOffering)) == 0 || len(e.events.find(reconcile.NoteProvisionFailed)) == 0 {
		t.Errorf("want no-offering and provision-failed events:\n%s", e.events.tail(10))
	}
	out(false)
	if n := e.tickUntil(2, 5); n > 3 {
		t.Errorf("took %d ticks after capacity returned, want at most 3", n)
	}
}

// TestLaunchTimeoutReplaces: a machine that never boots is deleted at the
// launch timeout and replaced.
func TestLaunchTimeoutReplaces(t *testing.T) {
	e := newEnv(t, setup{sim: func(c *sim.Config) { c.Offerings[1].HangRate = 1 }})
	e.setDesired(1)
	e.mustTick()
	hung := e.machineOf(0)
	if err := e.cloud.Tune(spot, func(o *sim.Offering) { o.HangRate = 0 }); err != nil {
		t.Fatal(err)
	}
	for e.clk.Now().Before(start.Add(interval + timeout)) {
		e.mustTick()
	}
	if got := e.events.find(controller.ReasonLaunchTimeout, hung); len(got) != 1 {
		t.Fatalf("want a launch-timeout event for %s:\n%s", hung, e.events.tail(10))
	}
	e.tickUntil(1, 3)
	if e.machineOf(0) == hung {
		t.Error("node 0 is still the hung machine")
	}
	led := e.cloud.Ledger()
	if live := led.Live(pool); slices.Contains(live, hung) {
		t.Errorf("hung machine %s still billed", hung)
	}
}

// TestQuotaStopsCreating: a total quota stops launching until the next tick,
// with an event, and one Create a tick probes it.
func TestQuotaStopsCreating(t *testing.T) {
	e := newEnv(t, setup{sim: func(c *sim.Config) { c.Quota = 2 }})
	e.setDesired(4)
	e.mustTick()
	if got := e.calls(tideprovider.OpCreate); got != 3 {
		t.Fatalf("%d creates, want 3 (2 fit, the 3rd hits the quota, and nothing more until the next tick)", got)
	}
	if len(e.events.find(controller.ReasonQuotaExceeded, "total quota")) != 1 {
		t.Fatalf("want a quota-exceeded event:\n%s", e.events.tail(10))
	}
	e.mustTick()
	if got := e.calls(tideprovider.OpCreate); got != 4 {
		t.Errorf("%d creates, want 4 (one retry on the next tick)", got)
	}
	if err := e.cloud.SetQuota(0); err != nil {
		t.Fatal(err)
	}
	if n := e.tickUntil(4, 5); n > 3 {
		t.Errorf("took %d ticks after the quota was raised, want at most 3", n)
	}
}

// TestOrphansAreDeleted: a machine in the pool that the journal does not
// know (created by a controller whose journal was lost) is left alone for
// OrphanGrace from its first sighting (an orphan-seen event says when it
// goes), then deleted with an orphan event; a negative grace deletes it at
// first sight.
func TestOrphansAreDeleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		alive int // ticks it is left alone
	}{
		{"default grace", 0, int(controller.DefaultOrphanGrace / interval)},
		{"configured grace", 3*interval + interval/2, 4},
		{"at first sight", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, setup{cfg: func(c *controller.Config) {
				c.OrphanGrace = tc.grace
			}})
			f := provider.Fence{Controller: "ctl-a", Epoch: 1}
			if _, err := e.cloud.Create(e.ctx, provider.CreateRequest{Fence: f, Pool: pool, MachineID: "stray-1", Offering: onDemand}); err != nil {
				t.Fatal(err)
			}
			for i := range tc.alive {
				e.mustTick()
				if len(e.events.find(controller.ReasonOrphan, "stray-1")) != 0 {
					t.Fatalf("orphan deleted after %d ticks, within its grace:\n%s", i+1, e.events.tail(10))
				}
				if _, err := e.cloud.Get(e.ctx, "stray-1"); err != nil {
					t.Fatalf("orphan within its grace: %v", err)
				}
			}
			seen := len(e.events.find(controller.ReasonOrphanSeen, "stray-1"))
			if want := min(tc.alive, 1); seen != want {
				t.Fatalf("%d orphan-seen events, want %d:\n%s", seen, want, e.events.tail(10))
			}
			e.setDesired(1)
			e.tickUntil(1, 5)
			if got := e.events.find(controller.ReasonOrphan, "stray-1"); len(got) != 1 {
				t.Errorf("want one orphan event for stray-1:\n%s", e.events.tail(10))
			}
		})
	}
}

// TestRestartKeepsDesired: a new controller on the same journal adopts the
// joined machines at the last desired count, draining nothing, even before
// the policy speaks again.
func TestRestartKeepsDesired(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(5)
	e.tickUntil(5, 10)
	before := e.ctl.Status().Nodes
	e.ctl = e.newController()
	e.rec.Reset()
	e.tickUntil(5, 1)
	if got := e.calls(tideprovider.OpCreate) + e.calls(tideprovider.OpDrain) + e.calls(tideprovider.OpDelete); got != 0 {
		t.Errorf("restart made %d create/drain/delete calls, want 0", got)
	}
	if after := e.ctl.Status(); !slices.Equal(after.Nodes, before) || after.Epoch != 2 {
		t.Errorf("after restart: epoch %d, nodes %v; want epoch 2 and %v", after.Epoch, after.Nodes, before)
	}
}

// TestDeposed: a second controller takes the pool over; the first one is
// refused by the journal or the provider, whichever it reaches first, stops
// acting for good, and changes nothing of the new controller's.
func TestDeposed(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(2)
	e.tickUntil(2, 10)
	old := e.ctl
	e.ctl = e.newController()
	e.setDesired(3)
	e.mustTick() // the new controller creates node 2, unknown to the old one
	old.SetDesired(policy.Decision{Desired: 0})
	calls := len(e.rec.Calls())
	err := old.Tick(e.ctx)
	if !errors.Is(err, controller.ErrDeposed) {
		t.Fatalf("old controller's tick: %v, want ErrDeposed", err)
	}
	if len(e.events.find(controller.ReasonDeposed, "stale")) != 1 {
		t.Errorf("want one deposed event:\n%s", e.events.tail(5))
	}
	for _, c := range e.rec.Calls()[calls:] {
		if c.Op != tideprovider.OpList && c.Op != tideprovider.OpGet && !provider.IsStaleFence(c.Err) {
			t.Errorf("old controller's %s %s was not refused: %v", c.Op, c.MachineID, c.Err)
		}
	}
	calls = len(e.rec.Calls())
	if err := old.Tick(e.ctx); !errors.Is(err, controller.ErrDeposed) {
		t.Fatalf("second tick: %v, want ErrDeposed", err)
	}
	if got := len(e.rec.Calls()) - calls; got != 0 {
		t.Errorf("deposed controller made %d more calls", got)
	}
	if !old.Status().Deposed {
		t.Error("old controller's status does not say deposed")
	}
	e.tickUntil(3, 5) // converged also checks the journal is the new controller's
}

// TestDeposedByProvider: a controller whose journal epoch is current but
// whose provider fence is not (another controller took the pool over on
// another journal) stops at the first refused call.
func TestDeposedByProvider(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(1)
	e.tickUntil(1, 10)
	f := provider.Fence{Controller: "ctl-b", Epoch: 9}
	if _, err := e.cloud.Delete(e.ctx, provider.DeleteRequest{Fence: f, Pool: pool, MachineID: "none"}); !provider.IsNotFound(err) {
		t.Fatalf("takeover call: %v", err)
	}
	e.setDesired(2)
	if err := e.ctl.Sync(e.ctx); !errors.Is(err, controller.ErrDeposed) {
		t.Fatalf("sync: %v, want ErrDeposed", err)
	}
	if got := e.events.find(controller.ReasonDeposed, "stale fence", "ctl-b@9"); len(got) != 1 {
		t.Errorf("want a deposed event naming the new holder:\n%s", e.events.tail(5))
	}
}

// TestScaleDownDelayMarksFirst: with a scale-down delay (seed 001's
// deletion marks), excess nodes are marked, and drained only once the mark
// is old enough; every step is an event.
func TestScaleDownDelayMarksFirst(t *testing.T) {
	e := newEnv(t, setup{cfg: func(c *controller.Config) { c.Reconcile.ScaleDownDelay = 3 * time.Minute }})
	e.setDesired(3)
	e.tickUntil(3, 5)
	e.setDesired(1)
	e.mustTick()
	if len(e.events.find(controller.ReasonMark, "mark 2 1")) != 1 {
		t.Fatalf("want nodes 1 and 2 marked:\n%s", e.events.tail(10))
	}
	e.mustTick()
	e.mustTick()
	if got := len(e.events.find(controller.ReasonDrain)); got != 0 {
		t.Fatalf("%d drains before the marks are 3 minutes old", got)
	}
	e.tickUntil(1, 4)
	if got := len(e.events.find(controller.ReasonDrain)); got != 2 {
		t.Errorf("%d drain events, want 2", got)
	}
}

// TestRestartAdoptsBusyNodes: after a restart the workload says which
// adopted nodes run work, and scale-down passes them over.
func TestRestartAdoptsBusyNodes(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(3)
	e.tickUntil(3, 5)
	e.work.setBusy(2, true)
	e.ctl = e.newController()
	e.setDesired(2)
	e.mustTick()
	st := e.ctl.Status()
	var draining []reconcile.NodeID
	for _, n := range st.Nodes {
		if n.Draining {
			draining = append(draining, n.ID)
		}
	}
	if !slices.Equal(draining, []reconcile.NodeID{1}) {
		t.Fatalf("draining %v, want [1]: node 2 runs work", draining)
	}
	if e.work.isCordoned(2) {
		t.Error("busy node 2 was cordoned")
	}
}

// TestConfigureFailures: each kind of Configure error is handled as its
// kind says, reported as an event, and the pool still converges.
func TestConfigureFailures(t *testing.T) {
	transient := provider.NewTransient(errors.New("throttled"), 0)
	tests := []struct {
		name    string
		errs    []error
		reason  string
		words   []string
		replace bool // the machine is given up and replaced
		gets    int
	}{
		{name: "transient is retried", errs: []error{transient}, reason: controller.ReasonProviderError,
			words: []string{"configure", "throttled", "attempt 1 of 3"}},
		{name: "too many failures give up", errs: []error{transient, transient, transient}, reason: controller.ReasonGaveUp,
			words: []string{"failed 3 times"}, replace: true},
		{name: "conflict re-reads", errs: []error{provider.NewConflict("m", provider.Creating, "not idle")},
			reason: controller.ReasonConflict, words: []string{"re-reading"}, gets: 1},
		{name: "not found is a lost node", errs: []error{provider.NewNotFound("m")}, reason: controller.ReasonNodeLost,
			words: []string{"configure machine"}, replace: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, setup{cfg: func(c *controller.Config) { c.MaxRetries = 2 }})
			for _, err := range tt.errs {
				e.rec.FailNext(tideprovider.OpConfigure, err)
			}
			e.setDesired(1)
			e.mustTick()
			first := e.machineOf(0)
			e.tickUntil(1, 8)
			if got := e.events.find(tt.reason, tt.words...); len(got) == 0 {
				t.Errorf("no %s event with %q:\n%s", tt.reason, tt.words, e.events.tail(15))
			}
			if replaced := e.machineOf(0) != first; replaced != tt.replace {
				t.Errorf("machine replaced: %v, want %v", replaced, tt.replace)
			}
			if got := len(e.rec.Calls(tideprovider.OpGet)); got != tt.gets {
				t.Errorf("%d gets, want %d", got, tt.gets)
			}
		})
	}
}

// TestSetBounds: resizing the pool clamps the desired count and the pool
// follows.
func TestSetBounds(t *testing.T) {
	e := newEnv(t, setup{})
	e.setDesired(4)
	e.tickUntil(4, 5)
	e.ctl.SetBounds(capacity.Fixed(2))
	e.tickUntil(2, 5)
	if got := e.events.find(controller.ReasonDesiredChanged, "4 → 2", "bounds 2"); len(got) != 1 {
		t.Errorf("want a desired-changed event naming the new bounds:\n%s", e.events.tail(10))
	}
}
