package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/store/storetest"
)

// TestSuiteSQLite runs the store conformance suite (shared with the etcd
// store) on a SQLite file.
func TestSuiteSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "tide.db"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, func(t *testing.T, s storetest.Store, pool string) controller.Journal {
		j, err := s.(*store.Store).Journal(pool)
		if err != nil {
			t.Fatal(err)
		}
		return j
	})
}
