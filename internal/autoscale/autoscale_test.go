package autoscale

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

type fakeTarget struct {
	mu        sync.Mutex
	decisions []int
	busy      []string
}

func (f *fakeTarget) SetDesired(d policy.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions = append(f.decisions, d.Desired)
}

func (f *fakeTarget) ReportBusy(id reconcile.NodeID, busy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = append(f.busy, fmt.Sprintf("%d=%t", id, busy))
}

func (f *fakeTarget) snapshot() ([]int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.decisions...), append([]string(nil), f.busy...)
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func skyward(t *testing.T, spec capacity.NodeSpec) policy.Policy {
	t.Helper()
	p, err := policy.New(policy.Config{Policy: policy.Skyward, Nodes: spec, SlotsPerNode: 2,
		Cooldown: 30 * time.Second, IdleTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pressure builds a report of machines named like the controller names them,
// each running `running[i]` one-CPU instances, plus queued instances.
func pressure(pool string, running []int, queued int) capacity.Pressure {
	var p capacity.Pressure
	for i, r := range running {
		n := capacity.Node{ID: fmt.Sprintf("%s-%d-%d", pool, i, i+1), Ordinal: 100 + i, Resources: capacity.CPU(2000)}
		for range r {
			n.Running = append(n.Running, capacity.Instance{Requests: capacity.CPU(1000)})
		}
		p.Nodes = append(p.Nodes, n)
	}
	if queued > 0 {
		p.Pending = []capacity.Pending{{Requests: capacity.CPU(1000), Count: queued}}
	}
	return p
}

func newPool(t *testing.T, target Target, clk clock.Clock, desired int, events *[]Event) *Pool {
	t.Helper()
	p, err := New(Config{Pool: "batch", Policy: skyward(t, capacity.Elastic(0, 6)), Desired: desired, Interval: 30 * time.Second,
		Ordinal: func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID("batch", id) }},
		target, clk, func(e Event) { *events = append(*events, e) })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvaluateDecidesOnReportsAndTicks(t *testing.T) {
	target := &fakeTarget{}
	var events []Event
	p := newPool(t, target, clock.NewFake(t0), 2, &events)
	if _, ok := p.Evaluate(t0); ok {
		t.Fatal("evaluated before any report")
	}
	// A foreign worker (not one of the pool's machines) is left out.
	pr := pressure("batch", []int{2, 2}, 6)
	pr.Nodes = append(pr.Nodes, capacity.Node{ID: "someone-else", Resources: capacity.CPU(2000)})
	p.Observe(pr)
	d, ok := p.Evaluate(t0)
	if !ok || d.Desired != 5 {
		t.Fatalf("desired %d (%s), want 2 + ceil(6/2) = 5", d.Desired, d.Reason)
	}
	// Ordinals come from the machine ids, not from the report.
	if decisions, busy := target.snapshot(); fmt.Sprint(decisions) != "[5]" || fmt.Sprint(busy) != "[0=true 1=true]" {
		t.Fatalf("decisions %v busy %v", decisions, busy)
	}
	// The work finishes: nothing changes until the idle timeout has passed,
	// and then a tick replaying the same report shrinks the pool.
	p.Observe(pressure("batch", []int{0, 0, 0, 0, 0}, 0))
	for _, at := range []time.Duration{31 * time.Second, 60 * time.Second, 91 * time.Second} {
		d, _ = p.Evaluate(t0.Add(at))
	}
	if d.Desired != 0 {
		t.Fatalf("after idling: desired %d (%s), want 0", d.Desired, d.Reason)
	}
	decisions, busy := target.snapshot()
	if fmt.Sprint(decisions) != "[5 0]" {
		t.Fatalf("decisions %v, want [5 0]", decisions)
	}
	if !strings.Contains(fmt.Sprint(busy), "0=false") || strings.Count(fmt.Sprint(busy), "0=") != 2 {
		t.Fatalf("busy reports %v: each change once", busy)
	}
	// An event for each change, and for each change of reason; none repeated.
	var codes []string
	for _, e := range events {
		codes = append(codes, e.Reason)
	}
	if len(events) < 3 || !events[0].Changed || !strings.HasPrefix(events[0].Message, "desired 2 -> 5: ") {
		t.Fatalf("events %+v", events)
	}
	for i := 1; i < len(codes); i++ {
		if codes[i] == codes[i-1] && !events[i].Changed {
			t.Fatalf("repeated event %q: %v", codes[i], codes)
		}
	}
	if st := p.Status(); st.Desired != 0 || !strings.HasPrefix(st.Reason, "idle") {
		t.Fatalf("status %+v", st)
	}
}

// TestRunWakesOnReportsAndTicks runs the loop's goroutine in a synctest
// bubble: synctest.Wait returns once it is blocked again, so the test needs
// no sleeping or polling.
func TestRunWakesOnReportsAndTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		target := &fakeTarget{}
		clk := clock.NewFake(t0)
		p, err := New(Config{Pool: "batch", Policy: skyward(t, capacity.Elastic(0, 6)), Interval: 30 * time.Second},
			target, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		p.Observe(pressure("batch", nil, 4))
		synctest.Wait()
		if d, _ := target.snapshot(); fmt.Sprint(d) != "[2]" {
			t.Fatalf("after a report: decisions %v, want [2]", d)
		}
		// Idle from now on: only the ticks can shrink the pool.
		p.Observe(pressure("batch", []int{0, 0}, 0))
		synctest.Wait()
		for range 4 {
			clk.Advance(30 * time.Second)
			synctest.Wait()
		}
		if d, _ := target.snapshot(); fmt.Sprint(d) != "[2 0]" {
			t.Fatalf("after idle ticks: decisions %v, want [2 0]", d)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	pol := skyward(t, capacity.Elastic(0, 2))
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: pol}, "pool: must be set"},
		{Config{Pool: "a"}, "policy: must be set"},
	} {
		if _, err := New(tt.cfg, &fakeTarget{}, clock.NewFake(t0), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := New(Config{Pool: "a", Policy: pol}, nil, clock.NewFake(t0), nil); err == nil {
		t.Error("nil target accepted")
	}
}

// TestIdleSinceReleasesEmptyNodes: the scheduler's reports carry no idle
// times; the loop stamps when each node became empty, so the tide policy
// releases nodes idle past its timeout, and a node that gets work again
// starts over.
func TestIdleSinceReleasesEmptyNodes(t *testing.T) {
	pol, err := policy.New(policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 4), IdleTimeout: 10 * time.Second,
		Offerings: []capacity.Offering{{Type: "c2", Resources: capacity.CPU(2000), PricePerHour: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	target := &fakeTarget{}
	p, err := New(Config{Pool: "batch", Policy: pol, Desired: 2,
		Ordinal: func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID("batch", id) }},
		target, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(pressure("batch", []int{1, 0}, 0))
	for _, at := range []time.Duration{0, 5 * time.Second} {
		if d, _ := p.Evaluate(t0.Add(at)); d.Desired != 2 {
			t.Fatalf("+%v: desired %d (%s), want 2 while node 1 has been empty < 10s", at, d.Desired, d.Reason)
		}
	}
	// Node 1 gets work at +6s and loses it at +8s: its idle time starts over.
	p.Observe(pressure("batch", []int{1, 1}, 0))
	p.Evaluate(t0.Add(6 * time.Second))
	p.Observe(pressure("batch", []int{1, 0}, 0))
	if d, _ := p.Evaluate(t0.Add(12 * time.Second)); d.Desired != 2 {
		t.Fatalf("+12s: desired %d (%s), want 2: node 1 is empty since +12s only", d.Desired, d.Reason)
	}
	if d, _ := p.Evaluate(t0.Add(23 * time.Second)); d.Desired != 1 {
		t.Fatalf("+23s: desired %d (%s), want 1: node 1 idle for 11s", d.Desired, d.Reason)
	}
}

// TestRunRechecksAtTheEndOfTheBatchingWindow: the tide policy holds a new
// backlog for its batching window; the loop decides when the window ends,
// not at its next tick (an hour away here).
func TestRunRechecksAtTheEndOfTheBatchingWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol, err := policy.New(policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 4), BatchWindow: 500 * time.Millisecond,
			Offerings: []capacity.Offering{{Type: "c2", Resources: capacity.CPU(2000), PricePerHour: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		target := &fakeTarget{}
		clk := clock.NewFake(t0)
		p, err := New(Config{Pool: "batch", Policy: pol, Interval: time.Hour}, target, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		p.Observe(pressure("batch", nil, 4))
		synctest.Wait()
		if d, _ := target.snapshot(); len(d) != 0 {
			t.Fatalf("decided %v inside the batching window", d)
		}
		clk.Advance(499 * time.Millisecond)
		synctest.Wait()
		if d, _ := target.snapshot(); len(d) != 0 {
			t.Fatalf("decided %v 1ms before the window ends", d)
		}
		clk.Advance(time.Millisecond)
		synctest.Wait()
		if d, _ := target.snapshot(); fmt.Sprint(d) != "[2]" {
			t.Fatalf("at the end of the window: decisions %v, want [2]", d)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// heldTarget is a fakeTarget that says what the pool holds, as the
// controller does.
type heldTarget struct {
	fakeTarget
	held policy.Held
}

func (h *heldTarget) Held() policy.Held { return h.held }

// TestLoopPassesWhatThePoolHolds: the loop hands the policy the
// controller's held machines, so a purchase stops at the pool's limit
// counting the machines still booting, and the event names the limit.
func TestLoopPassesWhatThePoolHolds(t *testing.T) {
	cpu := int64(8000)
	pol, err := policy.New(policy.Config{Policy: policy.Skyward, Nodes: capacity.Elastic(0, 10), SlotsPerNode: 1,
		Offerings: []capacity.Offering{{Type: "c2", Resources: capacity.CPU(2000), PricePerHour: 0.1}},
		Limits:    policy.Limits{MilliCPU: &cpu}})
	if err != nil {
		t.Fatal(err)
	}
	// Three machines booting: not in the report yet, held by the controller.
	target := &heldTarget{held: policy.Held{Nodes: 3, Resources: capacity.CPU(6000), CostPerHour: 0.3}}
	var events []Event
	p, err := New(Config{Pool: "p", Policy: pol, Desired: 3}, target, clock.NewFake(t0), func(e Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(pressure("p", nil, 6))
	d, _ := p.Evaluate(t0)
	if d.Desired != 4 || len(events) != 1 || events[0].Reason != policy.CodeAtLimit ||
		!strings.Contains(events[0].Message, "desired 3 -> 4: limits.cpu 8: the pool holds 8, a node of 2 would make 10") {
		t.Fatalf("desired %d, events %+v", d.Desired, events)
	}
}

// TestWithdrawCancelsNodesBootingForWorkGivenUp: a gang bought 3 nodes; it
// is given up on (max_wait) while they boot. Without a withdrawal the
// policy keeps them (they would join and only then idle out); Withdraw
// makes the first report without backlog after it lower desired to the
// joined nodes, which the reconciler cancels first. A report from before
// the withdrawal or one with work still waiting changes nothing (the
// withdrawal waits for a report without backlog), one past the window
// neither.
func TestWithdrawCancelsNodesBootingForWorkGivenUp(t *testing.T) {
	pol, err := policy.New(policy.Config{Policy: policy.Tide, Nodes: capacity.Elastic(0, 6), IdleTimeout: 10 * time.Second,
		BatchWindow: time.Second, Offerings: []capacity.Offering{{Type: "c2", Resources: capacity.CPU(2000), PricePerHour: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	gang := func(joined int) capacity.Pressure {
		p := pressure("batch", make([]int, joined), 0)
		p.Pending = []capacity.Pending{{Requests: capacity.CPU(2000), Count: 3, Gang: "g"}}
		return p
	}
	type step struct {
		at       time.Duration
		observe  *capacity.Pressure
		withdraw bool
		want     int
		code     string
	}
	idle1 := pressure("batch", []int{0}, 0)
	busy1 := pressure("batch", []int{1}, 0)
	g1, g0 := gang(1), gang(0)
	other := pressure("batch", []int{0}, 2)
	tests := []struct {
		name  string
		steps []step
	}{
		{"without a withdrawal the booting nodes stay", []step{
			{at: 0, observe: &g1, want: 1}, {at: 2 * time.Second, want: 3, code: policy.CodeScaleUp},
			{at: 3 * time.Second, observe: &idle1, want: 3}, {at: 5 * time.Second, want: 3}}},
		{"withdrawn: cancelled down to the joined node", []step{
			{at: 0, observe: &g1, want: 1}, {at: 2 * time.Second, want: 3, code: policy.CodeScaleUp},
			{at: 3 * time.Second, withdraw: true, want: 3}, // the report still shows the gang
			{at: 4 * time.Second, observe: &busy1, want: 1, code: CodeWithdrawn},
			{at: 5 * time.Second, want: 1}}},
		{"withdrawn with no node joined: down to 0", []step{
			{at: 0, observe: &g0, want: 1}, {at: 2 * time.Second, want: 3, code: policy.CodeScaleUp},
			{at: 3 * time.Second, withdraw: true, want: 3},
			{at: 3 * time.Second, observe: &capacity.Pressure{}, want: 0, code: CodeWithdrawn}}},
		{"other work still waits: the purchase stands", []step{
			{at: 0, observe: &g1, want: 1}, {at: 2 * time.Second, want: 3, code: policy.CodeScaleUp},
			{at: 3 * time.Second, withdraw: true, want: 3},
			{at: 4 * time.Second, observe: &other, want: 3}, {at: 5 * time.Second, want: 3},
			// It is placed (on nodes that joined meanwhile, here the one):
			// none waits any more, within the window.
			{at: 6 * time.Second, observe: &busy1, want: 1, code: CodeWithdrawn}}},
		{"past the window: left to the policy", []step{
			{at: 0, observe: &g1, want: 1}, {at: 2 * time.Second, want: 3, code: policy.CodeScaleUp},
			{at: 3 * time.Second, withdraw: true, want: 3},
			{at: 3*time.Second + withdrawWindow + time.Second, observe: &busy1, want: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			p, err := New(Config{Pool: "batch", Policy: pol, Desired: 1,
				Ordinal: func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID("batch", id) }},
				&fakeTarget{}, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				clk.Advance(t0.Add(s.at).Sub(clk.Now()))
				if s.observe != nil {
					p.Observe(*s.observe)
				}
				if s.withdraw {
					p.Withdraw()
				}
				d, _ := p.Evaluate(clk.Now())
				if d.Desired != s.want || (s.code != "" && d.Reason.Code != s.code) {
					t.Fatalf("step %d (+%s): desired %d (%s: %s), want %d %s", i, s.at, d.Desired, d.Reason.Code, d.Reason, s.want, s.code)
				}
			}
		})
	}
}
