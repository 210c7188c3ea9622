package etcdstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/etcdstore"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
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
