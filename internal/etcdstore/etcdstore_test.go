package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/etcdstore"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/store/storetest"
)

var prefixes atomic.Int64

// openOn returns a store under a fresh prefix of srv, so the tests of one
// run share one embedded etcd without seeing each other's keys.
func openOn(t *testing.T, srv *etcdtest.Server) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(srv.Client(), etcdstore.Options{Prefix: fmt.Sprintf("/t%d/", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSuiteEtcd runs the store conformance suite (shared with the SQLite
// store) on a real embedded etcd with etcd's default --max-txn-ops (128),
// so the batches split across transactions are exercised.
func TestSuiteEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		return openOn(t, srv)
	}, func(t *testing.T, s storetest.Store, pool string) controller.Journal {
		j, err := s.(*etcdstore.Store).Journal(pool)
		if err != nil {
			t.Fatal(err)
		}
		return j
	})
}

// TestFenceRefusesDeposedWrites: a store fenced on an election key writes
// while the key lives; once it is gone (the lease expired, another head
// leads) every fenced write fails with ErrNotLeader and changes nothing,
// while unfenced writes (submits) go on.
func TestFenceRefusesDeposedWrites(t *testing.T) {
	ctx := context.Background()
	srv := etcdtest.Start(t)
	s := openOn(t, srv)
	cli := s.Client()
	put, err := cli.Put(ctx, s.Prefix()+"election/me", "http://me")
	if err != nil {
		t.Fatal(err)
	}
	s.SetFence(s.Prefix()+"election/me", put.Header.Revision)
	if _, err := s.RegisterWorker(ctx, store.Registration{ID: "w", Host: "h"}, t0); err != nil {
		t.Fatal(err)
	}
	in := store.Instance{ID: "a", Name: "a", Command: "true"}
	if err := s.InsertInstances(ctx, []store.Instance{in, {ID: "b", Name: "b", Command: "true"}}, t0); err != nil {
		t.Fatal(err)
	}
	j, _ := s.Journal("gpu")
	e, err := j.RaiseEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Assign(ctx, []store.Assignment{{InstanceID: "a", Worker: "w"}}, t0); err != nil || len(got) != 1 {
		t.Fatalf("leader's assign: %v %v", got, err)
	}
	if _, err := cli.Delete(ctx, s.Prefix()+"election/me"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Assign(ctx, []store.Assignment{{InstanceID: "b", Worker: "w"}}, t0); !errors.Is(err, etcdstore.ErrNotLeader) {
		t.Fatalf("deposed assign: %v, want ErrNotLeader", err)
	}
	if err := j.SetDesired(ctx, e, 3); !errors.Is(err, etcdstore.ErrNotLeader) {
		t.Fatalf("deposed journal write: %v, want ErrNotLeader", err)
	}
	if _, err := j.RaiseEpoch(ctx); !errors.Is(err, etcdstore.ErrNotLeader) {
		t.Fatalf("deposed raise epoch: %v, want ErrNotLeader", err)
	}
	if b, _ := s.GetInstance(ctx, "b"); b.Status != store.StatusPending {
		t.Fatalf("fenced assign changed b: %s", b.Status)
	}
	if st, _ := j.Load(ctx); st.HasDesired || st.Epoch != e {
		t.Fatalf("fenced journal write changed the journal: %+v", st)
	}
	if err := s.InsertInstances(ctx, []store.Instance{{ID: "c", Name: "c", Command: "true"}}, t0); err != nil {
		t.Fatalf("unfenced submit on a deposed head: %v", err)
	}
}

// TestTwoHandlesPlaceOnce: two heads' stores (two clients, one prefix)
// race to place the same instances on different workers; each instance is
// placed once, its worker's index and desired set agree.
func TestTwoHandlesPlaceOnce(t *testing.T) {
	ctx := context.Background()
	srv := etcdtest.Start(t)
	a := openOn(t, srv)
	b, err := etcdstore.New(srv.Client(), etcdstore.Options{Prefix: a.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2"} {
		if _, err := a.RegisterWorker(ctx, store.Registration{ID: w, Host: "h"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	var ins []store.Instance
	for i := range 100 {
		ins = append(ins, store.Instance{ID: fmt.Sprint("i", i), Name: fmt.Sprint("n", i), Command: "true"})
	}
	if err := b.InsertInstances(ctx, ins, t0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	placed := map[string]int{}
	var wg sync.WaitGroup
	for k, s := range []*etcdstore.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var as []store.Assignment
			for _, in := range ins {
				as = append(as, store.Assignment{InstanceID: in.ID, Worker: fmt.Sprint("w", k+1)})
			}
			for len(as) > 0 {
				n := min(len(as), 7)
				got, err := s.Assign(ctx, as[:n], t0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, g := range got {
					placed[g.InstanceID]++
				}
				mu.Unlock()
				as = as[n:]
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, w := range []string{"w1", "w2"} {
		ds, err := a.DesiredFor(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		total += len(ds.Instances)
	}
	for id, n := range placed {
		if n != 1 {
			t.Fatalf("%s placed %d times", id, n)
		}
	}
	if len(placed) != len(ins) || total != len(ins) {
		t.Fatalf("%d placed, %d desired, want %d", len(placed), total, len(ins))
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
