package shardctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleettest"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

func ids(ms []provider.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

func byCluster(env *fleettest.Env, cluster string) []string {
	var out []string
	for _, m := range env.Machines(pool1)[provider.Configured] {
		if m.Cluster == cluster {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestStaticStability (BigFleet §11): with etcd down, clusters keep their
// machines and in-shard allocation goes on (a machine beta no longer needs
// is drained and bootstrapped into alpha), but nothing new is provisioned;
// once etcd is back, the shard retakes itself and provisions.
func TestStaticStability(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(4, 0, 0)})
	// Short, so that the outage's calls fail fast; long enough for a lease
	// grant on a loaded machine (200 ms timed out under a load of 20).
	env.Timeout = time.Second
	c := env.Shard(1)
	env.Assign("alpha", 1)
	env.Assign("beta", 1)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, c, "alpha", "gpu", 2, 100)
	submit(t, c, "beta", "gpu", 1, 50)
	converge(env, c)
	alpha := byCluster(env, "alpha")
	if len(alpha) != 2 || len(byCluster(env, "beta")) != 1 {
		t.Fatalf("before the outage: alpha %v beta %v", alpha, byCluster(env, "beta"))
	}
	creates := len(env.Rec.Calls(tideprovider.OpCreate))
	epoch := c.Epoch()

	env.Etcd.Stop()
	submit(t, c, "alpha", "gpu", 4, 100) // known clusters' needs still arrive
	submit(t, c, "beta", "gpu", 0, 50)
	for range 8 {
		env.Step(2*time.Minute, c)
		if got := byCluster(env, "alpha"); !containsAll(got, alpha) {
			t.Fatalf("during the outage alpha's machines changed: %v, had %v", got, alpha)
		}
	}
	if got := len(env.Rec.Calls(tideprovider.OpCreate)); got != creates {
		t.Errorf("Create calls during the outage: %d, want none", got-creates)
	}
	if got := len(env.Rec.Calls(tideprovider.OpDelete)); got != 0 {
		t.Errorf("Delete calls during the outage: %d, want none", got)
	}
	if got := byCluster(env, "alpha"); len(got) != 3 || !containsAll(got, alpha) {
		t.Errorf("alpha during the outage: %v, want its 2 machines and beta's", got)
	}
	if st := c.Status(); st.Paused == "" {
		t.Error("status does not say provisioning is paused")
	}

	env.Etcd.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for len(byCluster(env, "alpha")) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("after the outage alpha has %v (paused: %q)", byCluster(env, "alpha"), c.Status().Paused)
		}
		env.Step(fleettest.Boot, c)
	}
	if got := len(env.Rec.Calls(tideprovider.OpCreate)); got != creates+1 {
		t.Errorf("Create calls after the outage: %d, want 1", got-creates)
	}
	if c.Epoch() < epoch {
		t.Errorf("epoch went back: %d < %d", c.Epoch(), epoch)
	}
	if st := c.Status(); st.Paused != "" {
		t.Errorf("still paused after the outage: %q", st.Paused)
	}
	ledger := env.Cloud.Ledger()
	if dup := ledger.Duplicates(); len(dup) != 0 {
		t.Errorf("duplicates: %v", dup)
	}
}

func containsAll(set, sub []string) bool {
	for _, s := range sub {
		if !slices.Contains(set, s) {
			return false
		}
	}
	return true
}

// TestStaleShardCannotAct: a controller cut off from etcd keeps its old
// epoch; once its lease has expired and a successor holds the shard with a
// higher epoch and has used it, the provider refuses the old controller's
// calls and it is deposed, having changed nothing.
func TestStaleShardCannotAct(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(4, 0, 0)})
	env.Assign("alpha", 1)
	old := env.Shard(1, func(c *shardctl.Config) { c.Holder = "old" })
	if err := old.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, old, "alpha", "gpu", 2, 100)
	converge(env, old)
	before := byCluster(env, "alpha")

	env.Partition(old)
	env.WaitReleased(1)
	successor := env.Shard(1, func(c *shardctl.Config) { c.Holder = "new" })
	if err := successor.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if successor.Epoch() <= old.Epoch() {
		t.Fatalf("successor epoch %d, old %d", successor.Epoch(), old.Epoch())
	}
	submit(t, successor, "alpha", "gpu", 3, 100)
	env.Cycle(successor) // Create with the new epoch

	// The old controller still believes in its machines: alpha shrinks,
	// it drains one after the reclaim grace, and is refused.
	submit(t, old, "alpha", "gpu", 1, 100)
	var err error
	for range 8 {
		env.Clock.Advance(2 * time.Minute)
		if err = old.Cycle(context.Background()); errors.Is(err, shardctl.ErrDeposed) {
			break
		}
	}
	if !errors.Is(err, shardctl.ErrDeposed) {
		t.Fatalf("old controller's cycle: %v, want ErrDeposed", err)
	}
	var refused int
	for _, call := range env.Rec.Calls(tideprovider.OpDrain, tideprovider.OpDelete, tideprovider.OpCreate, tideprovider.OpConfigure) {
		if call.Fence.Epoch == uint64(old.Epoch()) && call.Fence.Seq > 0 && provider.IsStaleFence(call.Err) {
			refused++
		}
		if call.Fence.Epoch == uint64(old.Epoch()) && call.Op == tideprovider.OpDrain && call.Err == nil {
			t.Errorf("the old controller drained %s", call.MachineID)
		}
	}
	if refused == 0 {
		t.Error("no call of the old controller was refused with a stale fence")
	}
	if got := byCluster(env, "alpha"); !containsAll(got, before) {
		t.Errorf("alpha lost machines to the stale controller: %v, had %v", got, before)
	}
	if err := old.Cycle(context.Background()); !errors.Is(err, shardctl.ErrDeposed) {
		t.Errorf("a deposed controller cycled again: %v", err)
	}
	env.Step(fleettest.Boot, successor)
	env.Step(fleettest.Configure, successor)
	env.Step(time.Second, successor)
	if got := byCluster(env, "alpha"); len(got) != 3 {
		t.Errorf("successor: alpha has %v, want 3", got)
	}
}

// TestAdoptionAfterCrash: a controller crashes right after its Creates; the
// successor adopts the machines (nothing is created twice), deletes a
// stranger in the pool and drops a record whose machine never existed.
func TestAdoptionAfterCrash(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(4, 0, 0)})
	env.Assign("alpha", 1)
	first := env.Shard(1)
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, first, "alpha", "gpu", 3, 100)
	env.Cycle(first)
	if got := env.Count(pool1, provider.Creating); got != 3 {
		t.Fatalf("creating after the first cycle: %d, want 3", got)
	}
	env.Partition(first) // crash: no revoke, no clean-up
	// A stranger in the pool, and a record of a machine never created.
	if _, err := env.Cloud.Create(context.Background(), provider.CreateRequest{
		Fence: provider.Fence{Controller: "s1", Epoch: uint64(first.Epoch()), Seq: 99}, Pool: pool1,
		MachineID: "stranger-1", Offering: "g8/on-demand"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Client().Put(context.Background(), env.Store.MachinePrefix(1)+"fleet-s1-e1-99",
		`{"provider":"sim","offering":"g8/on-demand"}`); err != nil {
		t.Fatal(err)
	}
	env.WaitReleased(1)

	next := env.Shard(1)
	if err := next.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, next, "alpha", "gpu", 3, 100)
	converge(env, next)
	env.Step(fleettest.Delete, next)
	env.Step(time.Second, next)

	if got := byCluster(env, "alpha"); len(got) != 3 {
		t.Errorf("alpha has %v, want 3 machines", got)
	}
	if got := len(env.Rec.Calls(tideprovider.OpCreate)); got != 3 {
		t.Errorf("Create calls = %d, want 3 (the crashed controller's, adopted)", got)
	}
	if _, err := env.Cloud.Get(context.Background(), "stranger-1"); !provider.IsNotFound(err) {
		t.Errorf("the stranger in the pool: %v, want it deleted", err)
	}
	recs, err := env.Store.LoadMachines(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs["fleet-s1-e1-99"]; ok || len(recs) != 3 {
		t.Errorf("records after adoption: %v, want the 3 machines'", recs)
	}
	ledger := env.Cloud.Ledger()
	if dup := ledger.Duplicates(); len(dup) != 0 {
		t.Errorf("duplicates: %v", dup)
	}
}

// TestDirectiveStepsHappenOnce: the donor gives up quota slots and the
// recipient takes them, each in one fenced step; quota is conserved, and
// cycling again repeats nothing. A directive older than one already seen
// is refused.
func TestDirectiveStepsHappenOnce(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)},
		etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(0, 3, 0)})
	env.Assign("alpha", 1)
	s1, s2 := env.Shard(1), env.Shard(2)
	ctx := context.Background()
	for _, s := range []*shardctl.Controller{s1, s2} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, s1, "alpha", "gpu", 3, 100)
	env.Cycle(s1, s2)
	put := func(d etcdstate.Directive) { putDirective(t, env, d) }
	put(etcdstate.Directive{Term: 9, Seq: 1, Kind: fleet.ReassignQuota.String(), From: 2, To: 1, Count: 2})
	for range 4 {
		env.Cycle(s2, s1)
	}
	coord, err := env.Store.LoadCoord(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(coord.Directives) != 1 || coord.Directives[0].State != etcdstate.StateDone ||
		len(coord.Directives[0].Exported) != 2 {
		t.Fatalf("directive: %+v, want done with 2 slots moved", coord.Directives)
	}
	q1, _ := env.Store.LoadQuota(ctx, 1)
	q2, _ := env.Store.LoadQuota(ctx, 2)
	if total(q1) != 3 || total(q2) != 1 {
		t.Errorf("quota after the move: s1 %v, s2 %v; want 3 and 1", q1, q2)
	}
	converge(env, s1, s2)
	if got := byCluster(env, "alpha"); len(got) != 3 {
		t.Errorf("alpha has %v, want 3 machines (1 own slot and 2 moved)", got)
	}

	// A directive of an older term appearing now: refused by the donor.
	put(etcdstate.Directive{Term: 4, Seq: 7, Kind: fleet.ReassignQuota.String(), From: 2, To: 1, Count: 1})
	env.Cycle(s2, s1)
	env.Cycle(s2, s1)
	if st := s2.Status(); st.Refused != 1 {
		t.Errorf("refused = %d, want 1", st.Refused)
	}
	q2, _ = env.Store.LoadQuota(ctx, 2)
	if total(q2) != 1 {
		t.Errorf("s2 quota after the stale directive: %v, want 1 (unchanged)", q2)
	}
}

func total(q []etcdstate.QuotaEntry) int {
	n := 0
	for _, e := range q {
		n += e.Count
	}
	return n
}

// putDirective writes a pending directive into etcd as a leader would.
func putDirective(t *testing.T, env *fleettest.Env, d etcdstate.Directive) {
	t.Helper()
	d.ID = etcdstate.DirectiveID(d.Term, d.Seq)
	d.State = etcdstate.StatePending
	if d.Profile == "" {
		d.Profile = "gpu"
	}
	val, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Client().Put(context.Background(), env.Store.DirectivePrefix()+d.ID, string(val)); err != nil {
		t.Fatal(err)
	}
}

// TestCrossShardPreemption: a preempt directive drains the donor's
// low-priority machines first (grace by priority gap), then gives them up
// once Idle; the recipient creates in their place for its high-priority
// need. Quota moves with them.
func TestCrossShardPreemption(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: nil},
		etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(0, 2, 0)})
	env.Assign("high", 1)
	env.Assign("low", 2)
	s1, s2 := env.Shard(1), env.Shard(2)
	ctx := context.Background()
	for _, s := range []*shardctl.Controller{s1, s2} {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, s1, "high", "gpu", 2, 900_000)
	submit(t, s2, "low", "gpu", 2, 10)
	converge(env, s1, s2)
	low := env.Machines("fleet-s2")[provider.Configured]
	if len(low) != 2 {
		t.Fatalf("low has %d machines, want 2", len(low))
	}
	putDirective(t, env, etcdstate.Directive{Term: 3, Seq: 1, Kind: fleet.Preempt.String(), From: 2, To: 1, Count: 2,
		Priority: 900_000, MinGap: 500_000})
	env.Cycle(s2, s1)
	drains := env.Rec.Calls(tideprovider.OpDrain)
	if len(drains) != 0 {
		t.Fatalf("drained before the grace: %v", drains)
	}
	env.Step(30*time.Second, s2, s1) // gap 899,990 > 500K: 30s grace
	if got := len(env.Rec.Calls(tideprovider.OpDrain)); got != 2 {
		t.Fatalf("drain calls after the grace: %d, want 2", got)
	}
	for range 4 {
		env.Step(fleettest.Drain, s2, s1)
	}
	converge(env, s1, s2)
	env.Step(fleettest.Delete, s1, s2)
	env.Step(time.Second, s1, s2)

	if got := byClusterIn(env, "fleet-s1", "high"); len(got) != 2 {
		t.Errorf("high has %v, want 2 machines", got)
	}
	if got := env.Machines("fleet-s2"); len(got) != 0 {
		t.Errorf("donor's pool still holds %v", got)
	}
	q1, _ := env.Store.LoadQuota(ctx, 1)
	q2, _ := env.Store.LoadQuota(ctx, 2)
	if total(q1) != 2 || total(q2) != 0 {
		t.Errorf("quota: s1 %v, s2 %v; want 2 and 0", q1, q2)
	}
	sfs, _ := s2.Shortfalls()
	if len(sfs) != 1 || sfs[0].Count != 2 || sfs[0].Priority != 10 {
		t.Errorf("donor shortfalls %v, want low's 2", sfs)
	}
}

func byClusterIn(env *fleettest.Env, pool, cluster string) []string {
	var out []string
	for _, m := range env.Machines(pool)[provider.Configured] {
		if m.Cluster == cluster {
			out = append(out, m.ID)
		}
	}
	return out
}

// TestRunCyclesOnTheClock: Run cycles at once and then on every tick of the
// Clock; cancelled, it releases the shard.
func TestRunCyclesOnTheClock(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)})
	c := env.Shard(1, func(c *shardctl.Config) { c.Interval = 5 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			runtime.Gosched()
		}
	}
	waitFor("the first cycle", func() bool { return c.Status().Cycle == 1 })
	waitFor("the ticker", func() bool { return env.Clock.Waiters() > 0 })
	env.Clock.Advance(5 * time.Second)
	waitFor("the second cycle", func() bool { return c.Status().Cycle == 2 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	owners, err := env.Store.LoadOwners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, held := owners[1]; held {
		t.Error("the shard is still held after Run returned")
	}
}
