package controller_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/consolidate"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/lifecycle"
	"github.com/tide-project/tide/internal/reconcile"
)

// inspector is the fake workload as an Inspector and Evacuator: each
// machine's NodeInfo comes from info (registered and healthy when it
// returns the zero value and registered is true).
type inspector struct {
	*fakeWorkload
	mu        sync.Mutex
	info      func(n controller.Node) controller.NodeInfo
	evacuated []reconcile.NodeID
}

func (in *inspector) Inspect(_ context.Context, nodes []controller.Node) (map[string]controller.NodeInfo, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]controller.NodeInfo{}
	for _, n := range nodes {
		out[n.MachineID] = in.info(n)
	}
	return out, nil
}

func (in *inspector) Evacuate(_ context.Context, n controller.Node) error {
	in.mu.Lock()
	in.evacuated = append(in.evacuated, n.ID)
	in.mu.Unlock()
	// What the head does: the restartable work moves off.
	in.setBusy(n.ID, false)
	return nil
}

func (in *inspector) set(f func(n controller.Node) controller.NodeInfo) {
	in.mu.Lock()
	in.info = f
	in.mu.Unlock()
}

func registered(controller.Node) controller.NodeInfo { return controller.NodeInfo{Registered: true} }

// lifecycleEnv is an env whose controller's workload is an inspector, with
// metrics on reg.
func lifecycleEnv(t *testing.T, s setup) (*env, *inspector, *prometheus.Registry) {
	t.Helper()
	e := newEnv(t, s)
	in := &inspector{fakeWorkload: e.work, info: registered}
	reg := prometheus.NewRegistry()
	ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.rec, Journal: e.journal, Workload: in, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler), Events: e.events, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	e.ctl = ctl
	return e, in, reg
}

// TestRegistrationTimeout: a machine the provider reports Configured
// whose agent never registers does not join; at the registration timeout
// it is deleted and replaced with an event naming the timeout and the
// machine, and after two such timeouts its offering is skipped like one
// out of capacity: the next machine comes from the other offering.
func TestRegistrationTimeout(t *testing.T) {
	e, in, _ := lifecycleEnv(t, setup{nodes: capacity.Fixed(1), cfg: func(c *controller.Config) {
		c.RequireRegistration = true
		c.RegistrationTimeout = 3 * time.Minute
	}})
	// Machines of the cheaper offering (spot) run but never register.
	off := map[string]string{}
	in.set(func(n controller.Node) controller.NodeInfo {
		if off[n.MachineID] == spot {
			return controller.NodeInfo{}
		}
		return controller.NodeInfo{Registered: true}
	})
	for i := 0; i < 30 && e.ctl.Status().Current == 0; i++ {
		for _, n := range e.ctl.Status().Nodes {
			off[n.MachineID] = n.Offering
		}
		e.mustTick()
	}
	if err := e.converged(1); err != nil {
		t.Fatalf("%v\n%s", err, e.events.tail(30))
	}
	timeouts := e.events.find(controller.ReasonRegistrationTimeout, "registration timeout of 3m0s", spot)
	if len(timeouts) != 2 {
		t.Fatalf("%d registration-timeout events naming the timeout and the offering, want 2:\n%s", len(timeouts), e.events.tail(40))
	}
	if !strings.Contains(timeouts[0].Message, "gpu-0-") {
		t.Errorf("the event does not name the machine: %s", timeouts[0].Message)
	}
	if len(e.events.find(controller.ReasonOfferingBackedOff, spot, "2 times")) != 1 {
		t.Errorf("no offering-backed-off event for %s:\n%s", spot, e.events.tail(40))
	}
	if got := e.ctl.Status().Nodes[0].Offering; got != onDemand {
		t.Errorf("the node runs on %s, want %s after spot backed off", got, onDemand)
	}
	// Until the timeout, the Configured machine did not count as joined.
	if len(e.events.find(controller.ReasonJoined, spot)) != 0 {
		t.Errorf("a spot machine joined although its agent never registered")
	}
}

// TestRepairReplacesFirst: a joined node unhealthy past repair_after gets a
// replacement first; once the replacement joined, the unhealthy node is
// deleted as a lost one (its work handled as a lost worker's: Forget), and
// tide_nodes_disrupted_total{reason="repair"} counts it.
func TestRepairReplacesFirst(t *testing.T) {
	e, in, reg := lifecycleEnv(t, setup{nodes: capacity.Fixed(3), cfg: func(c *controller.Config) {
		c.Lifecycle = lifecycle.Config{RepairAfter: 5 * time.Minute}
	}})
	e.tickUntil(3, 10)
	sick := e.machineOf(1)
	in.set(func(n controller.Node) controller.NodeInfo {
		if n.MachineID == sick {
			return controller.NodeInfo{Registered: true, Unhealthy: "worker OFFLINE"}
		}
		return controller.NodeInfo{Registered: true}
	})
	e.mustTick()
	if len(e.events.find(controller.ReasonUnhealthy, sick, "worker OFFLINE", "repaired at")) != 1 {
		t.Fatalf("no unhealthy event:\n%s", e.events.tail(10))
	}
	for i := 0; i < 4; i++ {
		e.mustTick()
	}
	if len(e.events.find(controller.ReasonRepair)) != 0 {
		t.Fatalf("repaired before repair_after:\n%s", e.events.tail(10))
	}
	e.mustTick() // 5 minutes
	if len(e.events.find(controller.ReasonRepair, sick, "longer than repair_after")) != 1 {
		t.Fatalf("not repaired after repair_after:\n%s", e.events.tail(10))
	}
	// The replacement boots while the sick node is still there.
	e.mustTick()
	if st := e.ctl.Status(); st.Current != 3 || st.Pending != 1 {
		t.Fatalf("current %d pending %d: want the sick node kept while its replacement boots\n%s", st.Current, st.Pending, e.describe())
	}
	e.tickUntil(3, 10)
	for _, n := range e.ctl.Status().Nodes {
		if n.MachineID == sick {
			t.Fatalf("the sick machine %s is still in the pool", sick)
		}
	}
	if got := disrupted(t, reg, "repair"); got != 1 {
		t.Errorf("tide_nodes_disrupted_total{reason=repair} = %v, want 1", got)
	}
}

// disrupted reads tide_nodes_disrupted_total{pool,reason} from reg.
func disrupted(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := value(fams, controller.MetricDisrupted, map[string]string{"pool": pool, "reason": reason})
	return v
}

// TestRepairBreakerHolds: with half of the pool unhealthy (more than the
// default 20 %), nothing is repaired, an event and the metric say so, and
// once one recovers (one of four, within the breaker) the other is repaired.
func TestRepairBreakerHolds(t *testing.T) {
	e, in, reg := lifecycleEnv(t, setup{nodes: capacity.Fixed(4), cfg: func(c *controller.Config) {
		c.Lifecycle = lifecycle.Config{RepairAfter: time.Minute}
	}})
	e.tickUntil(4, 10)
	sick := map[string]bool{e.machineOf(0): true, e.machineOf(2): true}
	var mu sync.Mutex
	in.set(func(n controller.Node) controller.NodeInfo {
		mu.Lock()
		defer mu.Unlock()
		if sick[n.MachineID] {
			return controller.NodeInfo{Registered: true, Unhealthy: "worker OFFLINE"}
		}
		return controller.NodeInfo{Registered: true}
	})
	for i := 0; i < 10; i++ {
		e.mustTick()
	}
	if n := len(e.events.find(controller.ReasonRepair)); n != 0 {
		t.Fatalf("%d repairs with half the pool unhealthy:\n%s", n, e.events.tail(20))
	}
	if len(e.events.find(controller.ReasonRepairBreaker, "2 of 4 nodes are unhealthy (50%)", "20% breaker allows (1)")) != 1 {
		t.Fatalf("the breaker does not say so (once):\n%s", e.events.tail(20))
	}
	if len(e.events.find(controller.ReasonDisruptionWait, "breaker")) != 2 {
		t.Errorf("each held node does not say it waits on the breaker:\n%s", e.events.tail(20))
	}
	breaker, _ := reg.Gather()
	if !gathered(breaker, controller.MetricBreaker, 1) || !gathered(breaker, controller.MetricUnhealthy, 2) {
		t.Errorf("breaker/unhealthy gauges not 1/2")
	}
	mu.Lock()
	delete(sick, e.machineOf(0))
	mu.Unlock()
	e.mustTick()
	if len(e.events.find(controller.ReasonRepair)) != 1 || len(e.events.find(controller.ReasonRecovered)) != 1 {
		t.Fatalf("after one recovered, the other is not repaired:\n%s", e.events.tail(20))
	}
}

func gathered(mfs []*dto.MetricFamily, name string, want float64) bool {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge().GetValue() == want {
				return true
			}
		}
	}
	return false
}

// TestDriftRollsOneBudgetAtATime: after the pool's settings change, the
// drifted nodes are replaced one at a time (a budget of 1), each
// replacement joined before its node drains, a node running work that may
// not move waits (and says so), and the restartable work of the others is
// moved off before their drain.
func TestDriftRollsOneBudgetAtATime(t *testing.T) {
	hashes := map[string]string{onDemand: "h1", spot: "h1"}
	e, in, reg := lifecycleEnv(t, setup{nodes: capacity.Fixed(3), cfg: func(c *controller.Config) {
		c.NodeHash = hashes
		c.Lifecycle = lifecycle.Config{Disruption: consolidate.Config{Budgets: []consolidate.Budget{{Nodes: 1}}}}
	}})
	e.tickUntil(3, 10)
	pinned := e.machineOf(2)
	in.set(func(n controller.Node) controller.NodeInfo {
		if n.MachineID == pinned {
			return controller.NodeInfo{Registered: true, Blocked: "non-restartable work"}
		}
		return controller.NodeInfo{Registered: true}
	})
	e.work.setBusy(2, true)
	e.work.setBusy(0, true) // restartable work: evacuated
	e.cfg.NodeHash = map[string]string{onDemand: "h2", spot: "h2"}
	ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.rec, Journal: e.journal, Workload: in, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler), Events: e.events, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]bool{}
	for _, n := range e.ctl.Status().Nodes {
		old[n.MachineID] = true
	}
	e.ctl = ctl // a reload: the new controller adopts the machines
	maxDisrupted := 0
	for i := 0; i < 40; i++ {
		e.mustTick()
		st := e.ctl.Status()
		disrupted := 0
		for _, n := range st.Nodes {
			if n.Replacing != "" {
				disrupted++
			}
		}
		maxDisrupted = max(maxDisrupted, disrupted)
		if st.Current < 3 {
			t.Fatalf("tick %d: %d joined nodes: a drifted node drained before its replacement joined\n%s", i, st.Current, e.describe())
		}
	}
	if maxDisrupted != 1 {
		t.Errorf("at most %d nodes replaced at once, want 1 (the budget)", maxDisrupted)
	}
	var kept []string
	for _, n := range e.ctl.Status().Nodes {
		if old[n.MachineID] {
			kept = append(kept, n.MachineID)
		}
	}
	if len(kept) != 1 || kept[0] != pinned {
		t.Fatalf("old machines left %v, want only the pinned %s\n%s", kept, pinned, e.events.tail(30))
	}
	if len(e.events.find(controller.ReasonDisruptionWait, pinned, "non-restartable work")) == 0 {
		t.Errorf("the pinned node does not say why it waits:\n%s", e.events.tail(30))
	}
	if len(e.events.find(controller.ReasonDrift, "hash h1, now h2")) != 2 {
		t.Errorf("want 2 drift replacements naming the hashes:\n%s", e.events.tail(30))
	}
	if len(in.evacuated) == 0 || in.evacuated[0] != 0 {
		t.Errorf("evacuated %v, want node 0's work moved off first", in.evacuated)
	}
	if st := e.ctl.Status(); !strings.Contains(nodeByMachine(st, pinned).Disruption, "non-restartable") {
		t.Errorf("the pinned node's status does not say why it waits: %+v", nodeByMachine(st, pinned))
	}
	if got := disrupted(t, reg, "drift"); got != 2 {
		t.Errorf("tide_nodes_disrupted_total{reason=drift} = %v, want 2", got)
	}
}

func nodeByMachine(st controller.Status, id string) controller.NodeStatus {
	for _, n := range st.Nodes {
		if n.MachineID == id {
			return n
		}
	}
	return controller.NodeStatus{}
}

// TestExpiredNodeReplaced: a node older than expire_after is replaced
// (replacement first), and the new one is not.
func TestExpiredNodeReplaced(t *testing.T) {
	e, _, _ := lifecycleEnv(t, setup{nodes: capacity.Fixed(1), cfg: func(c *controller.Config) {
		c.Lifecycle = lifecycle.Config{ExpireAfter: 30 * time.Minute}
	}})
	e.tickUntil(1, 10)
	first := e.machineOf(0)
	created := start.Add(interval) // the first tick's Create
	for e.clk.Now().Add(interval).Before(created.Add(30 * time.Minute)) {
		e.mustTick()
	}
	if len(e.events.find(controller.ReasonExpired)) != 0 {
		t.Fatalf("expired early:\n%s", e.events.tail(10))
	}
	for i := 0; i < 10 && len(e.events.find(controller.ReasonDeleted, first)) == 0; i++ {
		e.mustTick()
		if st := e.ctl.Status(); st.Current < 1 {
			t.Fatalf("the pool went without a joined node")
		}
	}
	e.tickUntil(1, 10)
	if e.ctl.Status().Nodes[0].MachineID == first {
		t.Fatalf("the expired machine %s was not replaced:\n%s", first, e.events.tail(20))
	}
	if len(e.events.find(controller.ReasonExpired, first, "older than expire_after 30m0s")) != 1 {
		t.Errorf("no expired event naming the machine:\n%s", e.events.tail(20))
	}
}

// TestReplaceWithCheaperOffering: a node running work on an offering that
// became the dearer one (a price change on reload) is swapped for the
// cheaper offering that hosts its work: the replacement is launched from
// it and joins before the old node drains.
func TestReplaceWithCheaperOffering(t *testing.T) {
	e, in, reg := lifecycleEnv(t, setup{nodes: capacity.Fixed(1), cfg: func(c *controller.Config) {
		for i := range c.Offerings {
			if c.Offerings[i].Name() == spot {
				c.Offerings[i].PricePerHour = 1 // spot dearer: the node launches on-demand
			}
		}
	}})
	e.tickUntil(1, 10)
	first := e.ctl.Status().Nodes[0]
	if first.Offering != onDemand {
		t.Fatalf("launched on %s, want %s", first.Offering, onDemand)
	}
	in.set(func(controller.Node) controller.NodeInfo {
		return controller.NodeInfo{Registered: true, Used: capacity.Resources{MilliCPU: 2000}, WorkHours: 0.01}
	})
	e.cfg.Offerings = offerings(catalog()) // spot back to $0.22/h effective
	e.cfg.Lifecycle = lifecycle.Config{Disruption: consolidate.Config{Enabled: true, Horizon: time.Hour,
		Budgets: []consolidate.Budget{{Nodes: 1}}}}
	ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.rec, Journal: e.journal, Workload: in, Clock: e.clk,
		Logger: slog.New(slog.DiscardHandler), Events: e.events, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	e.ctl = ctl
	for i := 0; i < 15 && len(e.events.find(controller.ReasonDeleted, first.MachineID)) == 0; i++ {
		e.mustTick()
		if st := e.ctl.Status(); st.Current < 1 {
			t.Fatalf("the pool went without a joined node\n%s", e.events.tail(20))
		}
	}
	e.tickUntil(1, 10)
	now := e.ctl.Status().Nodes[0]
	if now.MachineID == first.MachineID || now.Offering != spot {
		t.Fatalf("node is %s on %s, want a new machine on %s\n%s", now.MachineID, now.Offering, spot, e.events.tail(20))
	}
	if len(e.events.find(controller.ReasonReplace, first.MachineID, "saves $", "loses $")) != 1 {
		t.Errorf("no replace event weighing the saving:\n%s", e.events.tail(20))
	}
	if got := disrupted(t, reg, "replace"); got != 1 {
		t.Errorf("tide_nodes_disrupted_total{reason=replace} = %v, want 1", got)
	}
}
