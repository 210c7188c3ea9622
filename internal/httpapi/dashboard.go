package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// The routes the web dashboard adds beside PyLet's (tide's extensions, all
// under the admin token like the rest of the API):
//
//	GET  /watch                   ?since=V: long-polls until the head's change version differs from V
//	GET  /history                 ?pool=P&since=SEQ: pool status samples and cost
//	GET  /instances/{id}/attempts every recorded attempt of an instance, oldest first
//	POST /workers/{id}/cordon     stop placing new instances on a worker
//	POST /workers/{id}/uncordon   resume placing
//
// DashboardRoutes returns them for Options.Extra; b provides each one it
// implements.

// MaxWatchWait bounds one GET /watch; the client asks again with the
// version it got.
const MaxWatchWait = 25 * time.Second

// Watcher long-polls the head's change version.
type Watcher interface {
	// Watch returns the version once it differs from since, or the
	// current one after maxWait.
	Watch(ctx context.Context, since int64, maxWait time.Duration) (int64, error)
}

// HistorySource returns the bounded history of pool status samples.
type HistorySource interface {
	// PoolHistory returns the samples of pool (every pool when nil) with a
	// sequence number above since.
	PoolHistory(ctx context.Context, pool *string, since int64) ([]PoolHistoryJSON, error)
}

// Cordoner cordons and uncordons workers.
type Cordoner interface {
	// Cordon stops (on) or resumes (off) placing new instances on worker.
	Cordon(ctx context.Context, worker string, on bool) error
}

// MaxListLimit bounds GET /instances?limit=N (tide's extension: the newest
// N matching instances, with X-Total-Count saying how many match).
const MaxListLimit = 100000

// InstanceCounter counts the instances a filter matches, for the
// X-Total-Count header of a limited GET /instances.
type InstanceCounter interface {
	// CountInstances returns how many instances match f (its Limit aside).
	CountInstances(ctx context.Context, f store.Filter) (int, error)
}

// AttemptSource returns an instance's attempt history.
type AttemptSource interface {
	// Attempts returns the recorded attempts of the instance with this id.
	Attempts(ctx context.Context, instanceID string) ([]store.AttemptRecord, error)
}

// AttemptJSON is one attempt of GET /instances/{id}/attempts. Times are
// in PyLet's format and null when not (yet) known.
type AttemptJSON struct {
	Attempt    int64   `json:"attempt"`
	Worker     string  `json:"worker"`
	Status     string  `json:"status"`
	AssignedAt *string `json:"assigned_at"`
	StartedAt  *string `json:"started_at"`
	EndedAt    *string `json:"ended_at"`
	ExitCode   *int    `json:"exit_code"`
	Reason     string  `json:"reason"`
}

// WatchJSON is GET /watch's answer.
type WatchJSON struct {
	Version int64 `json:"version"`
}

// PoolSample is one point of a pool's status history.
type PoolSample struct {
	// Seq numbers a pool's samples from 1; ask for since=<last seq>.
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Desired  int       `json:"desired"`
	Ready    int       `json:"ready"`
	Pending  int       `json:"pending"`
	Draining int       `json:"draining"`
	Marked   int       `json:"marked"`
	Queued   int       `json:"queued"`
	Inflight int       `json:"inflight"`
	// CostPerHour is the price per hour of the pool's machines.
	CostPerHour float64 `json:"cost_per_hour"`
}

// PoolHistoryJSON is one pool of GET /history: the retained samples, the
// cost per hour now, and the cost accrued over the last 24 hours (or since
// Since, when the head has run for less).
type PoolHistoryJSON struct {
	Pool        string       `json:"pool"`
	CostPerHour float64      `json:"cost_per_hour"`
	CostLast24h float64      `json:"cost_last_24h"`
	Since       time.Time    `json:"since,omitzero"`
	Samples     []PoolSample `json:"samples"`
}

// DashboardRoutes returns the dashboard's API routes that b implements,
// keyed by mux pattern, for Options.Extra (which puts them under the admin
// token).
func DashboardRoutes(b any) map[string]http.Handler {
	out := map[string]http.Handler{}
	if w, ok := b.(Watcher); ok {
		out["GET /watch"] = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { watch(rw, r, w) })
	}
	if hs, ok := b.(HistorySource); ok {
		out["GET /history"] = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { history(rw, r, hs) })
	}
	if c, ok := b.(Cordoner); ok {
		out["POST /workers/{id}/cordon"] = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { cordon(rw, r, c, true) })
		out["POST /workers/{id}/uncordon"] = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { cordon(rw, r, c, false) })
	}
	return out
}

func watch(w http.ResponseWriter, r *http.Request, src Watcher) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid since %q: want a version", v))
			return
		}
		since = n
	}
	ver, err := src.Watch(r.Context(), since, MaxWatchWait)
	if err != nil {
		writeDetail(w, http.StatusServiceUnavailable, "Request cancelled")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, WatchJSON{Version: ver})
}

func history(w http.ResponseWriter, r *http.Request, src HistorySource) {
	q := r.URL.Query()
	var pool *string
	if q.Has("pool") {
		p := q.Get("pool")
		pool = &p
	}
	var since int64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid since %q: want a sample seq", v))
			return
		}
		since = n
	}
	out, err := src.PoolHistory(r.Context(), pool, since)
	if err != nil {
		writeDetail(w, http.StatusInternalServerError, "Internal server error")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) attempts(w http.ResponseWriter, r *http.Request, in *store.Instance) {
	src, ok := s.b.(AttemptSource)
	if !ok {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	as, err := src.Attempts(r.Context(), in.ID)
	if err != nil {
		s.fail(w, r, err, "Instance not found")
		return
	}
	out := make([]AttemptJSON, len(as))
	for i, a := range as {
		out[i] = AttemptJSON{Attempt: a.Attempt, Worker: a.Worker, Status: string(a.Status),
			AssignedAt: timePtr(a.AssignedAt), StartedAt: timePtr(a.StartedAt), EndedAt: timePtr(a.EndedAt),
			ExitCode: a.ExitCode, Reason: a.Reason}
	}
	writeJSON(w, http.StatusOK, out)
}

func cordon(w http.ResponseWriter, r *http.Request, c Cordoner, on bool) {
	id := r.PathValue("id")
	if err := c.Cordon(r.Context(), id, on); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeDetail(w, http.StatusNotFound, "Worker not found")
			return
		}
		writeDetail(w, http.StatusInternalServerError, "Internal server error")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"worker_id": id, "cordoned": on})
}
