package coord_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/coord"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleettest"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	"github.com/tide-project/tide/sdk/provider"
)

// replica returns a coordinator replica on its own etcd client, with a
// one-second lease.
func replica(t *testing.T, env *fleettest.Env, id string) (*coord.Coordinator, *clientv3.Client) {
	t.Helper()
	cli := env.Etcd.Client()
	c, err := coord.New(coord.Config{ID: id, LeaseTTL: time.Second, Interval: time.Second},
		coord.Deps{Store: env.NewStore(cli), Clock: env.Clock})
	if err != nil {
		t.Fatal(err)
	}
	return c, cli
}

func start(t *testing.T, cs ...*shardctl.Controller) {
	t.Helper()
	for _, c := range cs {
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// watchDirectives records every directive ever created, from now on.
func watchDirectives(t *testing.T, env *fleettest.Env) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cli := env.Etcd.Client()
	resp, err := cli.Get(ctx, "watch-start")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var created []string
	ch := cli.Watch(ctx, env.Store.DirectivePrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for wr := range ch {
			mu.Lock()
			for _, ev := range wr.Events {
				if ev.IsCreate() {
					created = append(created, string(ev.Kv.Key))
				}
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		// Catch up: a write marks the present; wait until the watch has seen it.
		key := env.Store.DirectivePrefix() + "~sync"
		if _, err := cli.Put(context.Background(), key, "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			seen := slices.Contains(created, key)
			out := slices.DeleteFunc(slices.Clone(created), func(k string) bool { return k == key })
			mu.Unlock()
			if seen {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatal("directive watch did not catch up")
			}
			runtime.Gosched()
		}
	}
}

// escalate cycles the shards until shard 1's shortfall is escalated.
func escalate(t *testing.T, env *fleettest.Env, cs ...*shardctl.Controller) {
	t.Helper()
	for range 7 {
		env.Step(time.Second, cs...)
	}
	if st := cs[0].Status(); st.Escalated == 0 {
		t.Fatalf("no escalation after 7 cycles: %+v", st)
	}
}

// TestFailoverNothingRepeatedOrLost kills the coordinator leader after it
// issued a directive, at two points of the directive's progress. The other
// replica takes over; the directive completes (nothing lost), no second
// directive answers the same shortfall (nothing repeated), quota is
// conserved and no machine is created twice.
func TestFailoverNothingRepeatedOrLost(t *testing.T) {
	for _, kill := range []string{"after issuing", "after the donor's step"} {
		t.Run(kill, func(t *testing.T) {
			env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)},
				etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(0, 4, 0)})
			created := watchDirectives(t, env)
			env.Assign("alpha", 1)
			s1, s2 := env.Shard(1), env.Shard(2)
			start(t, s1, s2)
			if _, err := s1.SubmitNeeds(context.Background(), fleettest.Needs("alpha", "gpu", 3, 100)); err != nil {
				t.Fatal(err)
			}
			escalate(t, env, s1, s2)

			a, aCli := replica(t, env, "a")
			b, _ := replica(t, env, "b")
			ctx := context.Background()
			if err := a.Campaign(ctx); err != nil {
				t.Fatal(err)
			}
			won := make(chan error, 1)
			go func() { won <- b.Campaign(ctx) }()
			rep, err := a.Cycle(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Directives) != 1 || rep.Directives[0].Kind != fleet.ReassignQuota.String() ||
				rep.Directives[0].Count != 2 {
				t.Fatalf("leader a issued %+v, want one reassign-quota of 2", rep.Directives)
			}
			if kill == "after the donor's step" {
				env.Cycle(s2)
			}
			aCli.Close() // the leader dies without resigning
			select {
			case err := <-won:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("replica b did not take over within 15s")
			}
			if b.Term() <= a.Term() {
				t.Fatalf("b's term %d is not above a's %d", b.Term(), a.Term())
			}
			for range 6 {
				if _, err := b.Cycle(ctx); err != nil {
					t.Fatal(err)
				}
				env.Step(time.Second, s2, s1)
			}
			env.Step(fleettest.Boot, s2, s1)
			env.Step(fleettest.Configure, s2, s1)
			env.Step(time.Second, s2, s1)
			if _, err := b.Cycle(ctx); err != nil {
				t.Fatal(err)
			}

			if got := created(); len(got) != 1 {
				t.Errorf("directives ever issued: %v, want exactly one", got)
			}
			state, err := env.Store.LoadCoord(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(state.Directives) != 0 {
				t.Errorf("directives left: %+v, want the finished one deleted", state.Directives)
			}
			alpha := 0
			for _, m := range env.Machines("fleet-s1")[provider.Configured] {
				if m.Cluster == "alpha" {
					alpha++
				}
			}
			if alpha != 3 {
				t.Errorf("alpha has %d machines, want 3", alpha)
			}
			q1, _ := env.Store.LoadQuota(ctx, 1)
			q2, _ := env.Store.LoadQuota(ctx, 2)
			if n1, n2 := total(q1), total(q2); n1 != 3 || n2 != 2 {
				t.Errorf("quota: s1 %d, s2 %d; want 3 and 2 (5 in all, as before)", n1, n2)
			}
			if st := s1.Status(); st.Escalated != 0 {
				t.Errorf("s1 still escalates: %+v", st)
			}
			ledger := env.Cloud.Ledger()
			if dup := ledger.Duplicates(); len(dup) != 0 {
				t.Errorf("duplicates: %v", dup)
			}
		})
	}
}

// TestDeposedLeaderCannotWrite: a leader whose lease has expired in etcd
// (it has not noticed yet) writes nothing: its guarded write is refused and
// it steps down; the next leader writes under a higher term.
func TestDeposedLeaderCannotWrite(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)},
		etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(0, 4, 0)})
	env.Assign("alpha", 1)
	s1, s2 := env.Shard(1), env.Shard(2)
	start(t, s1, s2)
	if _, err := s1.SubmitNeeds(context.Background(), fleettest.Needs("alpha", "gpu", 3, 100)); err != nil {
		t.Fatal(err)
	}
	escalate(t, env, s1, s2)
	ctx := context.Background()
	a, _ := replica(t, env, "a")
	if err := a.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	// Expire a's leadership in etcd: delete its election key, as a lease
	// expiry would, without a's session noticing.
	if _, err := env.Store.Client().Delete(ctx, env.Store.ElectionPrefix()+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	_, err := a.Cycle(ctx)
	if !errors.Is(err, coord.ErrNotLeader) {
		t.Fatalf("deposed leader's cycle: %v, want ErrNotLeader", err)
	}
	if a.Leading() {
		t.Error("a still believes it leads")
	}
	state, err := env.Store.LoadCoord(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Directives) != 0 {
		t.Fatalf("a deposed leader wrote %+v", state.Directives)
	}
	b, _ := replica(t, env, "b")
	if err := b.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := b.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Directives) != 1 || rep.Directives[0].Term != b.Term() || b.Term() <= a.Term() {
		t.Errorf("b wrote %+v under term %d (a's %d)", rep.Directives, b.Term(), a.Term())
	}
}

// TestConcurrentFirstContact: clusters contacting two replicas at once, many
// times each, are assigned exactly once: every caller gets the same shard
// and id, ids are distinct, and later contacts keep the assignment.
func TestConcurrentFirstContact(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)},
		etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(1, 0, 0)},
		etcdstate.ShardSpec{ID: 3, Quota: fleettest.Quota(1, 0, 0)})
	// Not a test of lease expiry: a longer lease keeps the shards live when
	// a loaded machine delays their keepalives past the default second
	// (which failed once at load 20 with "no live shard to assign it to").
	long := func(c *shardctl.Config) { c.LeaseTTL = 10 * time.Second }
	start(t, env.Shard(1, long), env.Shard(2, long), env.Shard(3, long))
	a, _ := replica(t, env, "a")
	b, _ := replica(t, env, "b")
	const clusters, callers = 30, 8
	type result struct {
		rec   etcdstate.ClusterRecord
		first bool
	}
	results := make([][]result, clusters)
	var wg sync.WaitGroup
	errs := make(chan error, clusters*callers)
	for i := range clusters {
		results[i] = make([]result, callers)
		for j := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := a
				if j%2 == 1 {
					c = b
				}
				rec, first, err := c.AssignCluster(context.Background(), fmt.Sprintf("c%02d", i))
				if err != nil {
					errs <- err
					return
				}
				results[i][j] = result{rec, first}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	perShard := map[uint16]int{}
	for i, rs := range results {
		firsts := 0
		for _, r := range rs {
			if r.rec != rs[0].rec {
				t.Errorf("c%02d: callers disagree: %+v and %+v", i, r.rec, rs[0].rec)
			}
			if r.first {
				firsts++
			}
		}
		if firsts != 1 {
			t.Errorf("c%02d: %d callers made the first contact, want 1", i, firsts)
		}
		if seen[rs[0].rec.ID] {
			t.Errorf("c%02d: id %d given twice", i, rs[0].rec.ID)
		}
		seen[rs[0].rec.ID] = true
		perShard[rs[0].rec.Shard]++
	}
	for _, s := range []uint16{1, 2, 3} {
		if perShard[s] == 0 {
			t.Errorf("shard %d got no cluster: %v", s, perShard)
		}
	}
	all, err := env.Store.LoadClusters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != clusters {
		t.Errorf("%d assignments in etcd, want %d", len(all), clusters)
	}
	for i := range clusters {
		idx, err := env.Store.LoadShardClusters(context.Background(), results[i][0].rec.Shard)
		if err != nil {
			t.Fatal(err)
		}
		if idx[fmt.Sprintf("c%02d", i)] != results[i][0].rec.ID {
			t.Errorf("c%02d missing from its shard's index", i)
		}
		rec, first, err := b.AssignCluster(context.Background(), fmt.Sprintf("c%02d", i))
		if err != nil || first || rec != results[i][0].rec {
			t.Errorf("c%02d later: %+v first=%t err=%v, want %+v", i, rec, first, err, results[i][0].rec)
		}
	}
}

func total(q []etcdstate.QuotaEntry) int {
	n := 0
	for _, e := range q {
		n += e.Count
	}
	return n
}
