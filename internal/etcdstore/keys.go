package etcdstore

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/tide-project/tide/internal/store"
)

// errConflict is the store's conflict error (too many lost races).
var errConflict = store.ErrConflict

// Keys, all under the prefix (docs/etcd-store.md). Ids and names that may
// hold '/' are path-escaped where a key continues after them.
func (s *Store) kEpoch() string              { return s.p + "meta/epoch" }
func (s *Store) kEventSeq() string           { return s.p + "meta/event-seq" }
func (s *Store) kInstance(id string) string  { return s.p + "instances/" + id }
func (s *Store) kInstances() string          { return s.p + "instances/" }
func (s *Store) kName(name string) string    { return s.p + "names/" + name }
func (s *Store) kWorker(id string) string    { return s.p + "workers/" + id }
func (s *Store) kWorkers() string            { return s.p + "workers/" }
func (s *Store) kCordon(id string) string    { return s.p + "cordons/" + id }
func (s *Store) kCordons() string            { return s.p + "cordons/" }
func (s *Store) kCred(hash string) string    { return s.p + "credentials/" + hash }
func (s *Store) kCreds() string              { return s.p + "credentials/" }
func (s *Store) kEvents() string             { return s.p + "events/" }
func (s *Store) kJournal(pool string) string { return s.p + "journals/" + pool }
func (s *Store) kRecords(pool string) string {
	return s.p + "journal-records/" + url.PathEscape(pool) + "/"
}
func (s *Store) kRecord(pool, machine string) string {
	return s.kRecords(pool) + url.PathEscape(machine)
}

// kPlaced is the index of a worker's active (ASSIGNED, RUNNING, UNKNOWN)
// instances: one key per instance, its value the attempt placed there.
func (s *Store) kPlacedAll(worker string) string {
	return s.p + "placed/" + url.PathEscape(worker) + "/"
}
func (s *Store) kPlaced(worker, id string) string { return s.kPlacedAll(worker) + id }

// kEvent keys an event by its id, zero-padded so key order is id order.
func (s *Store) kEvent(id int64) string { return fmt.Sprintf("%sevents/%020d", s.p, id) }

func parseInt(b []byte, what string) (int64, error) {
	if b == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("decode %s: %w", what, err)
	}
	return n, nil
}

// eventBounds returns how many events to keep and how often (in ids) to
// trim, as the SQLite store does.
func eventBounds(retention int) (keep, trim int64) {
	if retention <= 0 {
		retention = store.DefaultEventRetention
	}
	keep = int64(retention)
	trim = min(max(keep/10, 1), 1000)
	return keep, trim
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
