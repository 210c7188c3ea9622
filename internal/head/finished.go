package head

import (
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/store"
)

// finishedCounter keeps the pressure report's Finished counters per pool
// (capacity.Pressure.Finished, FinishedRequests): an instance that held
// room on a pool's worker in one scheduling pass and holds none in the
// next, without waiting again or running again, finished there. An instance that starts
// and ends between two passes is not seen; the counters start at zero
// with the head, which a policy reads as a restart.
type finishedCounter struct {
	// running is the last pass's active non-daemon instances: where each
	// ran and what it requested, by id and attempt.
	running map[finishedKey]finishedRun
	// count and requests are the counters per pool.
	count    map[string]int
	requests map[string]capacity.Resources
}

type finishedKey struct {
	id      string
	attempt int64
}

type finishedRun struct {
	pool     string // "" is the default pool
	known    bool   // the worker was known (its pool with it)
	requests capacity.Resources
}

// observe counts what finished since the last pass, st being this pass's
// state.
func (f *finishedCounter) observe(st *store.SchedulingState) {
	if f.count == nil {
		f.count, f.requests = map[string]int{}, map[string]capacity.Resources{}
	}
	poolOf := make(map[string]string, len(st.Workers))
	for _, w := range st.Workers {
		poolOf[w.ID] = w.Pool
	}
	now := make(map[finishedKey]finishedRun, len(st.Active))
	for _, in := range st.Active {
		if !in.Daemon {
			pool, known := poolOf[in.Worker]
			now[finishedKey{in.ID, in.Attempt}] = finishedRun{pool: pool, known: known, requests: in.Requests}
		}
	}
	// An instance still active (a new attempt too: restarted elsewhere)
	// or waiting again did not finish.
	busy := make(map[string]bool, len(st.Active)+len(st.Pending))
	for _, in := range st.Active {
		busy[in.ID] = true
	}
	for _, in := range st.Pending {
		busy[in.ID] = true
	}
	for k, r := range f.running {
		if busy[k.id] || !r.known {
			continue
		}
		f.count[r.pool]++
		f.requests[r.pool] = f.requests[r.pool].Add(r.requests)
	}
	f.running = now
}

// stamp sets the counters on the report's pools.
func (f *finishedCounter) stamp(p map[string]capacity.Pressure) {
	for pool, pr := range p {
		pr.Finished, pr.FinishedRequests = f.count[pool], f.requests[pool]
		p[pool] = pr
	}
}
