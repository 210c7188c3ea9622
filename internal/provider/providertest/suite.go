// Package providertest holds what every provider's tests share: Run, the
// conformance suite that checks the provider.Provider contract (idempotence
// keyed by (machine id, target state), NotFound as the end of Delete, pool
// ownership, fencing, the machine model), and Recorder, a wrapper that logs
// calls and injects faults for the tests of code that drives a provider.
//
// A provider's test calls Run with a function that builds a fresh provider
// and a Harness to drive it:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, func(t *testing.T) providertest.Harness {
//			clk := clock.NewFake(start)
//			p := newMyProvider(clk)
//			return providertest.Harness{Provider: p, Offering: "m5/on-demand",
//				Settle: func() { clk.Advance(time.Hour) }}
//		})
//	}
package providertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tide-project/tide/sdk/provider"
)

// Harness is one fresh provider under test and the means to drive it.
type Harness struct {
	// Provider is the provider under test, with no machines, no fencing
	// state and no injected faults.
	Provider provider.Provider
	// Offering names an offering of Provider that can supply at least 8
	// machines at once and is never interrupted.
	Offering string
	// Settle makes every transition accepted so far finish (for a provider
	// on a fake clock: advance it past the longest latency). Providers are
	// asynchronous, so the suite calls it wherever it needs progress.
	Settle func()
	// Creates, when set, returns how many times the provider has actually
	// provisioned hardware for the machine id (a billing ledger, a call
	// log). The suite then checks that replays provision nothing.
	Creates func(machineID string) int
}

// Run runs the conformance suite; newProvider is called once per subtest.
// The subtests are named after what they hold, DESIGN.md invariant 5 first.
func Run(t *testing.T, newProvider func(t *testing.T) Harness) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			h := newProvider(t)
			if h.Provider == nil || h.Offering == "" || h.Settle == nil {
				t.Fatal("harness: Provider, Offering and Settle must be set")
			}
			tt.fn(t, &suite{t: t, h: h, ctx: t.Context(), fence: provider.Fence{Controller: "conformance", Epoch: 1}})
		})
	}
}

// T is the part of *testing.T the suite uses, so that Check can run it
// outside `go test` (for `tide provider test`).
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skip(args ...any)
}

// cases are the suite's subtests, named after what they hold, DESIGN.md
// invariant 5 first.
var cases = []struct {
	name string
	fn   func(t T, s *suite)
}{
	{"Offerings", testOfferings},
	{"GetUnknownIsNotFound", testGetUnknown},
	{"CreateIsAsyncAndReachesIdle", testCreateReachesIdle},
	{"ReplayedCreateIsNoOp", testReplayedCreate},
	{"ConcurrentCreatesOfOneIDProvisionOnce", testConcurrentCreate},
	{"ConflictingCreateIsRefused", testConflictingCreate},
	{"LifecycleFollowsModel", testLifecycle},
	{"ConfigureNeedsIdle", testConfigureNeedsIdle},
	{"DeleteIsIdempotentAndEndsInNotFound", testDelete},
	{"DeleteWhileCreatingLeavesNothing", testDeleteWhileCreating},
	{"DeletedIDIsNeverReused", testNoReuse},
	{"OtherPoolGetsNotFound", testOwnership},
	{"ListFiltersByPoolAndState", testList},
	{"StaleEpochIsRefused", testStaleFence},
	{"InvalidRequestsNameTheField", testInvalid},
	{"CanceledContextDoesNothing", testCanceled},
}

// suite carries one subtest's provider and helpers.
type suite struct {
	t     T
	h     Harness
	ctx   context.Context
	fence provider.Fence
	seq   atomic.Uint64
}

func (s *suite) p() provider.Provider { return s.h.Provider }

// f returns the suite's fence with the next sequence number.
func (s *suite) f() provider.Fence {
	f := s.fence
	f.Seq = s.seq.Add(1)
	return f
}

func (s *suite) createReq(pool, id string) provider.CreateRequest {
	return provider.CreateRequest{Fence: s.f(), Pool: pool, MachineID: id, Offering: s.h.Offering,
		Labels: map[string]string{"suite": "conformance"}}
}

func (s *suite) create(pool, id string) provider.Ack {
	s.t.Helper()
	ack, err := s.p().Create(s.ctx, s.createReq(pool, id))
	if err != nil {
		s.t.Fatalf("Create(%s/%s): %v", pool, id, err)
	}
	if ack.MachineID != id {
		s.t.Fatalf("Create(%s/%s): ack names machine %q", pool, id, ack.MachineID)
	}
	return ack
}

func (s *suite) configure(pool, id, cluster string) (provider.Ack, error) {
	return s.p().Configure(s.ctx, provider.ConfigureRequest{Fence: s.f(), Pool: pool, MachineID: id,
		Cluster: cluster, Bootstrap: []byte("bootstrap for " + cluster)})
}

func (s *suite) drain(pool, id string) (provider.Ack, error) {
	return s.p().Drain(s.ctx, provider.DrainRequest{Fence: s.f(), Pool: pool, MachineID: id})
}

func (s *suite) delete(pool, id string) (provider.Ack, error) {
	return s.p().Delete(s.ctx, provider.DeleteRequest{Fence: s.f(), Pool: pool, MachineID: id})
}

// get returns the machine and checks the model's invariants on it.
func (s *suite) get(id string) provider.Machine {
	s.t.Helper()
	m, err := s.p().Get(s.ctx, id)
	if err != nil {
		s.t.Fatalf("Get(%s): %v", id, err)
	}
	if err := m.Check(); err != nil {
		s.t.Fatalf("Get(%s) breaks the machine model: %v", id, err)
	}
	return m
}

func (s *suite) wantNotFound(id string) {
	s.t.Helper()
	if m, err := s.p().Get(s.ctx, id); !provider.IsNotFound(err) {
		s.t.Fatalf("Get(%s) = %+v, %v; want NotFound", id, m, err)
	}
}

func (s *suite) list(f provider.Filter) []provider.Machine {
	s.t.Helper()
	ms, err := s.p().List(s.ctx, f)
	if err != nil {
		s.t.Fatalf("List(%+v): %v", f, err)
	}
	for i := range ms {
		if err := ms[i].Check(); err != nil {
			s.t.Fatalf("List(%+v) breaks the machine model: %v", f, err)
		}
		if !f.Matches(&ms[i]) {
			s.t.Fatalf("List(%+v) returned %s in pool %s, state %s", f, ms[i].ID, ms[i].Pool, ms[i].State)
		}
	}
	return ms
}

func ids(ms []provider.Machine) []string {
	out := make([]string, len(ms))
	for i := range ms {
		out[i] = ms[i].ID
	}
	return out
}

func (s *suite) wantCreates(id string, want int) {
	s.t.Helper()
	if s.h.Creates == nil {
		return
	}
	if got := s.h.Creates(id); got != want {
		s.t.Fatalf("machine %s was provisioned %d times, want %d (invariant 5)", id, got, want)
	}
}

// observer checks that successive observations of one machine follow the model.
type observer struct {
	s    *suite
	id   string
	last provider.State
}

func (o *observer) see(want ...provider.State) provider.Machine {
	o.s.t.Helper()
	m := o.s.get(o.id)
	if o.last != "" && !provider.Reachable(o.last, m.State) {
		o.s.t.Fatalf("machine %s went from %s to %s, which the model does not allow", o.id, o.last, m.State)
	}
	if len(want) > 0 && !slices.Contains(want, m.State) {
		o.s.t.Fatalf("machine %s is %s, want one of %v", o.id, m.State, want)
	}
	o.last = m.State
	return m
}

func testOfferings(t T, s *suite) {
	offs, err := s.p().Offerings(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range offs {
		if err := o.Validate(); err != nil {
			t.Errorf("offering %s: %v", o.Name(), err)
		}
		if seen[o.Name()] {
			t.Errorf("offering %s listed twice", o.Name())
		}
		seen[o.Name()] = true
	}
	if !seen[s.h.Offering] {
		t.Fatalf("Offerings() does not list the harness offering %q (got %v)", s.h.Offering, seen)
	}
}

func testGetUnknown(t T, s *suite) {
	s.wantNotFound("never-created")
	if ms := s.list(provider.Filter{}); len(ms) != 0 {
		t.Fatalf("a fresh provider lists %v", ids(ms))
	}
}

func testCreateReachesIdle(t T, s *suite) {
	start := s.create("p", "m1")
	if start.Replayed {
		t.Fatal("first Create reported as a replay")
	}
	if !slices.Contains([]provider.State{provider.Speculative, provider.Creating, provider.Idle}, start.State) {
		t.Fatalf("Create acknowledged with state %s", start.State)
	}
	o := &observer{s: s, id: "m1"}
	m := o.see()
	if m.Pool != "p" || m.Offering != s.h.Offering || m.Labels["suite"] != "conformance" || m.CreatedAt.IsZero() {
		t.Fatalf("Get after Create = %+v; want pool p, offering %s, the labels and a creation time", m, s.h.Offering)
	}
	s.h.Settle()
	m = o.see(provider.Idle)
	if m.Host == "" || m.Cluster != "" {
		t.Fatalf("idle machine: host %q cluster %q", m.Host, m.Cluster)
	}
	s.wantCreates("m1", 1)
}

func testReplayedCreate(t T, s *suite) {
	s.create("p", "m1")
	first := s.get("m1")
	for round, settle := range []bool{false, true} {
		if settle {
			s.h.Settle()
		}
		before := s.get("m1")
		ack := s.create("p", "m1")
		if !ack.Replayed {
			t.Fatalf("round %d: replayed Create not reported as a replay", round)
		}
		after := s.get("m1")
		if ack.State != before.State || after.State != before.State {
			t.Fatalf("round %d: replay moved the machine: %s → ack %s, now %s", round, before.State, ack.State, after.State)
		}
		if !after.CreatedAt.Equal(first.CreatedAt) || after.Host != before.Host {
			t.Fatalf("round %d: replay re-created the machine: %+v, was %+v", round, after, before)
		}
		if ms := s.list(provider.Filter{Pool: "p"}); len(ms) != 1 {
			t.Fatalf("round %d: pool holds %v after a replay, want only m1", round, ids(ms))
		}
		s.wantCreates("m1", 1)
	}
}

func testConcurrentCreate(t T, s *suite) {
	const n = 8
	var wg sync.WaitGroup
	var fresh atomic.Int32
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			ack, err := s.p().Create(s.ctx, s.createReq("p", "m1"))
			if err != nil {
				errs <- err
				return
			}
			if !ack.Replayed {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Create: %v", err)
	}
	if fresh.Load() != 1 {
		t.Fatalf("%d of %d concurrent Creates of one id were not replays, want exactly 1", fresh.Load(), n)
	}
	s.h.Settle()
	if ms := s.list(provider.Filter{}); len(ms) != 1 {
		t.Fatalf("provider holds %v, want only m1", ids(ms))
	}
	s.wantCreates("m1", 1)
}

func testConflictingCreate(t T, s *suite) {
	s.create("p", "m1")
	req := s.createReq("q", "m1")
	if _, err := s.p().Create(s.ctx, req); !provider.IsConflict(err) {
		t.Fatalf("Create of an existing id in another pool = %v, want Conflict", err)
	}
	offs, err := s.p().Offerings(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		if o.Name() == s.h.Offering {
			continue
		}
		req := s.createReq("p", "m1")
		req.Offering = o.Name()
		if _, err := s.p().Create(s.ctx, req); !provider.IsConflict(err) {
			t.Fatalf("Create of an existing id with offering %s = %v, want Conflict", o.Name(), err)
		}
		break
	}
	if got := s.get("m1"); got.Pool != "p" || got.Offering != s.h.Offering {
		t.Fatalf("a refused Create changed the machine: %+v", got)
	}
}

func testLifecycle(t T, s *suite) {
	o := &observer{s: s, id: "m1"}
	s.create("p", "m1")
	o.see()
	s.h.Settle()
	idle := o.see(provider.Idle)

	ack, err := s.configure("p", "m1", "head-a")
	if err != nil || ack.Replayed || (ack.State != provider.Configuring && ack.State != provider.Configured) {
		t.Fatalf("Configure of an idle machine = %+v, %v; want a fresh ack, configuring or configured", ack, err)
	}
	m := o.see(provider.Configuring, provider.Configured)
	if m.Cluster != "head-a" || m.Host != idle.Host {
		t.Fatalf("configuring machine: cluster %q host %q; want head-a on %q", m.Cluster, m.Host, idle.Host)
	}
	if ack, err := s.configure("p", "m1", "head-a"); err != nil || !ack.Replayed {
		t.Fatalf("replayed Configure = %+v, %v; want a replay", ack, err)
	}
	s.h.Settle()
	m = o.see(provider.Configured)
	if m.Cluster != "head-a" || string(m.Bootstrap) != "bootstrap for head-a" {
		t.Fatalf("configured machine: cluster %q bootstrap %q", m.Cluster, m.Bootstrap)
	}
	if ack, err := s.configure("p", "m1", "head-a"); err != nil || !ack.Replayed || ack.State != provider.Configured {
		t.Fatalf("Configure of a configured machine = %+v, %v; want a replay", ack, err)
	}
	if _, err := s.configure("p", "m1", "head-b"); !provider.IsConflict(err) {
		t.Fatalf("Configure to another cluster without a drain = %v, want Conflict", err)
	}
	if m := o.see(provider.Configured); m.Cluster != "head-a" {
		t.Fatalf("refused Configure rebound the machine to %q", m.Cluster)
	}

	ack, err = s.drain("p", "m1")
	if err != nil || ack.Replayed || (ack.State != provider.Draining && ack.State != provider.Idle) {
		t.Fatalf("Drain of a configured machine = %+v, %v", ack, err)
	}
	o.see(provider.Draining, provider.Idle)
	if ack, err := s.drain("p", "m1"); err != nil || !ack.Replayed {
		t.Fatalf("replayed Drain = %+v, %v; want a replay", ack, err)
	}
	s.h.Settle()
	m = o.see(provider.Idle)
	if m.Cluster != "" || m.Bootstrap != nil || m.Host != idle.Host {
		t.Fatalf("drained machine: cluster %q bootstrap %q host %q; want unbound on %q", m.Cluster, m.Bootstrap, m.Host, idle.Host)
	}
	if ack, err := s.drain("p", "m1"); err != nil || !ack.Replayed || ack.State != provider.Idle {
		t.Fatalf("Drain of an idle machine = %+v, %v; want a replay", ack, err)
	}

	// Idle is the hub: the same machine now joins another cluster.
	if _, err := s.configure("p", "m1", "head-b"); err != nil {
		t.Fatalf("Configure after a drain: %v", err)
	}
	s.h.Settle()
	if m := o.see(provider.Configured); m.Cluster != "head-b" {
		t.Fatalf("machine joined %q, want head-b", m.Cluster)
	}

	ack, err = s.delete("p", "m1")
	if err != nil || ack.State != provider.Deleting {
		t.Fatalf("Delete of a configured machine = %+v, %v; want deleting", ack, err)
	}
	s.h.Settle()
	s.wantNotFound("m1")
	s.wantCreates("m1", 1)
}

func testConfigureNeedsIdle(t T, s *suite) {
	ack := s.create("p", "m1")
	if ack.State == provider.Idle {
		t.Skip("the provider creates synchronously; there is no pre-idle state to test")
	}
	if _, err := s.configure("p", "m1", "head-a"); !provider.IsConflict(err) {
		t.Fatalf("Configure of a %s machine = %v, want Conflict", ack.State, err)
	}
	s.h.Settle()
	if m := s.get("m1"); m.State != provider.Idle || m.Cluster != "" {
		t.Fatalf("refused Configure left the machine %s bound to %q", m.State, m.Cluster)
	}
	s.delete("p", "m1")
	if _, err := s.configure("p", "m1", "head-a"); !provider.IsConflict(err) {
		t.Fatalf("Configure of a deleting machine = %v, want Conflict", err)
	}
	if _, err := s.drain("p", "m1"); !provider.IsConflict(err) {
		t.Fatalf("Drain of a deleting machine = %v, want Conflict", err)
	}
}

func testDelete(t T, s *suite) {
	if _, err := s.delete("p", "never-created"); !provider.IsNotFound(err) {
		t.Fatalf("Delete of an unknown machine = %v, want NotFound", err)
	}
	s.create("p", "m1")
	s.h.Settle()
	ack, err := s.delete("p", "m1")
	if err != nil || ack.Replayed || ack.State != provider.Deleting {
		t.Fatalf("Delete = %+v, %v; want a fresh ack, deleting", ack, err)
	}
	ack, err = s.delete("p", "m1")
	switch {
	case provider.IsNotFound(err):
	case err != nil:
		t.Fatalf("second Delete = %v, want a replay or NotFound", err)
	case !ack.Replayed || ack.State != provider.Deleting:
		t.Fatalf("second Delete = %+v; want a replay, deleting", ack)
	}
	s.h.Settle()
	s.wantNotFound("m1")
	for range 2 {
		if _, err := s.delete("p", "m1"); !provider.IsNotFound(err) {
			t.Fatalf("Delete of a deleted machine = %v, want NotFound", err)
		}
	}
	if ms := s.list(provider.Filter{}); len(ms) != 0 {
		t.Fatalf("List after delete = %v", ids(ms))
	}
	s.wantCreates("m1", 1)
}

func testDeleteWhileCreating(t T, s *suite) {
	s.create("p", "m1")
	if _, err := s.delete("p", "m1"); err != nil {
		t.Fatalf("Delete of a creating machine: %v", err)
	}
	if ack := s.create("p", "m1"); !ack.Replayed || ack.State != provider.Deleting {
		t.Fatalf("Create replayed during Delete = %+v; want a replay that leaves it deleting", ack)
	}
	s.h.Settle()
	s.wantNotFound("m1")
	if ms := s.list(provider.Filter{}); len(ms) != 0 {
		t.Fatalf("List after delete = %v", ids(ms))
	}
}

func testNoReuse(t T, s *suite) {
	s.create("p", "m1")
	if _, err := s.delete("p", "m1"); err != nil {
		t.Fatal(err)
	}
	s.h.Settle()
	s.wantNotFound("m1")
	// A late retry of the original Create must not bring the machine back.
	if ack, err := s.p().Create(s.ctx, s.createReq("p", "m1")); !provider.IsConflict(err) {
		t.Fatalf("Create of a deleted id = %+v, %v; want Conflict", ack, err)
	}
	s.h.Settle()
	s.wantNotFound("m1")
	s.wantCreates("m1", 1)
}

func testOwnership(t T, s *suite) {
	s.create("p", "m1")
	s.h.Settle()
	if _, err := s.configure("q", "m1", "head-a"); !provider.IsNotFound(err) {
		t.Fatalf("Configure from another pool = %v, want NotFound", err)
	}
	if _, err := s.drain("q", "m1"); !provider.IsNotFound(err) {
		t.Fatalf("Drain from another pool = %v, want NotFound", err)
	}
	if _, err := s.delete("q", "m1"); !provider.IsNotFound(err) {
		t.Fatalf("Delete from another pool = %v, want NotFound", err)
	}
	s.h.Settle()
	if m := s.get("m1"); m.State != provider.Idle || m.Pool != "p" {
		t.Fatalf("calls from another pool changed the machine: %+v", m)
	}
}

func testList(t T, s *suite) {
	for _, id := range []string{"a-3", "a-1", "a-2"} {
		s.create("a", id)
	}
	for _, id := range []string{"b-2", "b-1"} {
		s.create("b", id)
	}
	s.h.Settle()
	if _, err := s.configure("a", "a-2", "head"); err != nil {
		t.Fatal(err)
	}
	s.h.Settle()
	tests := []struct {
		f    provider.Filter
		want []string
	}{
		{provider.Filter{}, []string{"a-1", "a-2", "a-3", "b-1", "b-2"}},
		{provider.Filter{Pool: "a"}, []string{"a-1", "a-2", "a-3"}},
		{provider.Filter{Pool: "b"}, []string{"b-1", "b-2"}},
		{provider.Filter{Pool: "c"}, []string{}},
		{provider.Filter{States: []provider.State{provider.Configured}}, []string{"a-2"}},
		{provider.Filter{Pool: "a", States: []provider.State{provider.Idle}}, []string{"a-1", "a-3"}},
		{provider.Filter{Pool: "b", States: []provider.State{provider.Configured, provider.Creating}}, []string{}},
		{provider.Filter{States: []provider.State{provider.Idle, provider.Configured}}, []string{"a-1", "a-2", "a-3", "b-1", "b-2"}},
	}
	for _, tt := range tests {
		if got := ids(s.list(tt.f)); !slices.Equal(got, tt.want) {
			t.Errorf("List(%+v) = %v, want %v (sorted by id)", tt.f, got, tt.want)
		}
	}
	// The caller owns what List returns.
	ms := s.list(provider.Filter{Pool: "a"})
	ms[0].Labels["suite"] = "changed"
	if m := s.get(ms[0].ID); m.Labels["suite"] != "conformance" {
		t.Fatal("changing a listed machine's labels changed the provider's machine")
	}
}

func testStaleFence(t T, s *suite) {
	a2 := provider.Fence{Controller: "a", Epoch: 2, Seq: 1}
	req := s.createReq("p", "m1")
	req.Fence = a2
	if _, err := s.p().Create(s.ctx, req); err != nil {
		t.Fatal(err)
	}
	s.h.Settle()
	before := s.list(provider.Filter{})

	stale := []provider.Fence{
		{Controller: "a", Epoch: 1, Seq: 100}, // older epoch of the same controller
		{Controller: "b", Epoch: 1, Seq: 100}, // older epoch
		{Controller: "b", Epoch: 2, Seq: 100}, // same epoch, another controller
	}
	for _, f := range stale {
		calls := map[string]error{}
		cr := s.createReq("p", "m2")
		cr.Fence = f
		_, calls["create"] = s.p().Create(s.ctx, cr)
		_, calls["configure"] = s.p().Configure(s.ctx, provider.ConfigureRequest{Fence: f, Pool: "p", MachineID: "m1", Cluster: "h", Bootstrap: []byte("b")})
		_, calls["drain"] = s.p().Drain(s.ctx, provider.DrainRequest{Fence: f, Pool: "p", MachineID: "m1"})
		_, calls["delete"] = s.p().Delete(s.ctx, provider.DeleteRequest{Fence: f, Pool: "p", MachineID: "m1"})
		for op, err := range calls {
			if !provider.IsStaleFence(err) {
				t.Errorf("%s with fence %s after %s = %v, want StaleFence", op, f, a2, err)
			}
		}
	}
	s.h.Settle()
	if after := s.list(provider.Filter{}); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused calls changed the provider:\nbefore %+v\nafter  %+v", before, after)
	}

	// A newer epoch takes the pool over, and the deposed controller is out.
	b3 := provider.Fence{Controller: "b", Epoch: 3, Seq: 1}
	if _, err := s.p().Delete(s.ctx, provider.DeleteRequest{Fence: b3, Pool: "p", MachineID: "m1"}); err != nil {
		t.Fatalf("Delete from the new epoch: %v", err)
	}
	cr := s.createReq("p", "m3")
	cr.Fence = a2
	if _, err := s.p().Create(s.ctx, cr); !provider.IsStaleFence(err) {
		t.Fatalf("Create from the deposed epoch = %v, want StaleFence", err)
	}
	s.wantNotFound("m3")
	// Epochs are per pool.
	cr = s.createReq("q", "m4")
	cr.Fence = provider.Fence{Controller: "c", Epoch: 1}
	if _, err := s.p().Create(s.ctx, cr); err != nil {
		t.Fatalf("Create in another pool at epoch 1: %v", err)
	}
}

func testInvalid(t T, s *suite) {
	tests := []struct {
		name string
		mut  func(*provider.CreateRequest)
	}{
		{"no fence", func(r *provider.CreateRequest) { r.Fence = provider.Fence{} }},
		{"no pool", func(r *provider.CreateRequest) { r.Pool = "" }},
		{"bad machine id", func(r *provider.CreateRequest) { r.MachineID = "has space" }},
		{"unknown offering", func(r *provider.CreateRequest) { r.Offering = "no-such-offering/on-demand" }},
	}
	for _, tt := range tests {
		req := s.createReq("p", "m1")
		tt.mut(&req)
		if _, err := s.p().Create(s.ctx, req); !provider.IsInvalid(err) {
			t.Errorf("Create with %s = %v, want Invalid", tt.name, err)
		}
	}
	if _, err := s.p().Configure(s.ctx, provider.ConfigureRequest{Fence: s.f(), Pool: "p", MachineID: "m1"}); !provider.IsInvalid(err) {
		t.Errorf("Configure without cluster and bootstrap = %v, want Invalid", err)
	}
	if ms := s.list(provider.Filter{}); len(ms) != 0 {
		t.Fatalf("invalid requests created %v", ids(ms))
	}
}

func testCanceled(t T, s *suite) {
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if _, err := s.p().Create(ctx, s.createReq("p", "m1")); err == nil {
		t.Fatal("Create with a canceled context succeeded")
	}
	s.h.Settle()
	s.wantNotFound("m1")
	s.wantCreates("m1", 0)
}
