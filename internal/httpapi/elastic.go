package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// Event listing limits of GET /events.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 10000
)

// EventJSON is one event of GET /events (tide's extension; times are
// RFC 3339 in UTC).
type EventJSON struct {
	ID      int64     `json:"id"`
	Time    time.Time `json:"time"`
	Pool    string    `json:"pool"`
	Node    string    `json:"node,omitempty"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// EventFrom renders a stored event.
func EventFrom(e store.Event) EventJSON {
	return EventJSON{ID: e.ID, Time: e.Time.UTC(), Pool: e.Pool, Node: e.Node, Type: e.Type, Reason: e.Reason,
		Message: e.Message}
}

// NodeSpecJSON is a pool's node count specification.
type NodeSpecJSON struct {
	Min     int  `json:"min"`
	Desired int  `json:"desired"`
	Max     int  `json:"max"`
	Elastic bool `json:"elastic"`
}

// DecisionJSON is a pool's last scaling decision.
type DecisionJSON struct {
	Reason string    `json:"reason"`
	Time   time.Time `json:"time,omitzero"`
	// AgeSeconds is how long ago Time was, by the head's clock.
	AgeSeconds float64 `json:"age_seconds"`
}

// PoolJSON is one pool of GET /pools. A managed pool is driven by an
// autoscaler, which reports desired, ready, pending and draining; for an
// unmanaged pool (workers that joined by themselves, or queued instances
// that no pool serves) they are the head's count of its workers.
type PoolJSON struct {
	Name     string        `json:"name"`
	Managed  bool          `json:"managed"`
	Provider string        `json:"provider,omitempty"`
	Policy   string        `json:"policy,omitempty"`
	NodeSpec *NodeSpecJSON `json:"node_spec,omitempty"`
	// Desired is the autoscaler's current desired node count.
	Desired  int `json:"desired"`
	Ready    int `json:"ready"`
	Pending  int `json:"pending"`
	Draining int `json:"draining"`
	// Marked counts nodes marked for deletion.
	Marked int `json:"marked"`
	// Workers counts the pool's registered workers that are not OFFLINE.
	Workers int `json:"workers"`
	// Queued and Inflight come from the scheduler's last pressure report:
	// instances waiting for the pool, and non-daemon instances placed on it.
	Queued       int           `json:"queued"`
	Inflight     int           `json:"inflight"`
	LastDecision *DecisionJSON `json:"last_decision,omitempty"`
	// TotalResources and UsedResources sum the pool's registered workers
	// that are not OFFLINE.
	TotalResources ResourcesOut `json:"total_resources"`
	UsedResources  ResourcesOut `json:"used_resources"`
	// Fleet is set for a pool whose machines come from the fleet tier.
	Fleet *FleetPoolJSON `json:"fleet,omitempty"`
}

// FleetPoolJSON is what a fleet-backed pool asked of the fleet and got.
type FleetPoolJSON struct {
	Cluster string `json:"cluster"`
	Shard   uint32 `json:"shard,omitempty"`
	// Asked and Granted count machines: in the needs sent, and bound to
	// the cluster by the fleet. Short is what is asked and not granted,
	// and Why says what the fleet lacks.
	Asked   int32  `json:"asked"`
	Granted int32  `json:"granted"`
	Short   int32  `json:"short"`
	Why     string `json:"why,omitempty"`
	// LastSent is when the needs last reached the fleet; LastError why the
	// last send failed (the pool's machines keep running; new ones wait).
	LastSent  time.Time `json:"last_sent,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// NodeJSON is one node of GET /nodes: the autoscaler's node (managed) merged
// with the head's worker of the same name, or a worker no autoscaler knows.
type NodeJSON struct {
	Pool string `json:"pool"`
	// ID is the worker's name (a managed node's machine id).
	ID      string `json:"id"`
	Ordinal int    `json:"ordinal"`
	// State is the autoscaler's view of a managed node (ready, pending,
	// draining, marked) and, for an unmanaged one, the worker's (ready,
	// cordoned, suspect, offline).
	State     string `json:"state"`
	Managed   bool   `json:"managed"`
	MachineID string `json:"machine_id,omitempty"`
	Offering  string `json:"offering,omitempty"`
	// WorkerStatus is ONLINE, SUSPECT or OFFLINE; empty while no worker of
	// that name has registered.
	WorkerStatus string            `json:"worker_status,omitempty"`
	Host         string            `json:"host,omitempty"`
	Cordoned     bool              `json:"cordoned"`
	Labels       map[string]string `json:"labels,omitempty"`
	// TotalResources is the worker's capacity (the offering's before it
	// registers); UsedResources what its active instances requested.
	TotalResources ResourcesOut `json:"total_resources"`
	UsedResources  ResourcesOut `json:"used_resources"`
	// Instances and Daemons count the active instances on the worker.
	Instances int `json:"instances"`
	Daemons   int `json:"daemons"`
	// CreatedAt is when the node's machine was created (the worker's
	// registration for unmanaged nodes); AgeSeconds is measured from it.
	CreatedAt  time.Time `json:"created_at,omitzero"`
	AgeSeconds float64   `json:"age_seconds"`
	// MarkedAt is when the node was marked for deletion.
	MarkedAt time.Time `json:"marked_at,omitzero"`
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Unhealthy says why a managed node is unhealthy (worker OFFLINE, Node
	// NotReady); Replacing why it is being replaced (repair, drift,
	// expired); Disruption why it is, or is due to be, replaced and what
	// it waits for (the disruption budget, work that may not move, the
	// repair breaker). Empty when none applies.
	Unhealthy  string `json:"unhealthy,omitempty"`
	Replacing  string `json:"replacing,omitempty"`
	Disruption string `json:"disruption,omitempty"`
}

// parseEventQuery reads pool, since and limit. Without since, the newest
// limit events are selected.
func parseEventQuery(r *http.Request) (store.EventFilter, error) {
	q := r.URL.Query()
	f := store.EventFilter{Limit: DefaultEventLimit, Tail: true}
	if q.Has("pool") {
		p := q.Get("pool")
		f.Pool = &p
	}
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return f, Errorf(http.StatusBadRequest, "Invalid since %q: want an event id", v)
		}
		f.After, f.Tail = n, false
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxEventLimit {
			return f, Errorf(http.StatusBadRequest, "Invalid limit %q: want 1 to %d", v, MaxEventLimit)
		}
		f.Limit = n
	}
	return f, nil
}

func (s *server) events(w http.ResponseWriter, r *http.Request) {
	f, err := parseEventQuery(r)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	follow := false
	if v := r.URL.Query().Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid follow %q: want 1 or 0", v))
			return
		}
	}
	if !follow {
		evs, err := s.b.Events(r.Context(), f)
		if err != nil {
			s.fail(w, r, err, "")
			return
		}
		out := make([]EventJSON, 0, len(evs))
		for _, e := range evs {
			out = append(out, EventFrom(e))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	// Newline-delimited JSON, one event per line, flushed per event. The
	// stream ends when the client goes away, the head stops, or the head's
	// follow bound passes; the client resumes with since=<last id>.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	enc := json.NewEncoder(w)
	err = s.b.FollowEvents(r.Context(), f, func(e store.Event) error {
		if err := enc.Encode(EventFrom(e)); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("event stream ended", "err", err)
	}
}

func (s *server) pools(w http.ResponseWriter, r *http.Request) {
	ps, err := s.b.Pools(r.Context())
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	if ps == nil {
		ps = []PoolJSON{}
	}
	writeJSON(w, http.StatusOK, ps)
}

func (s *server) nodes(w http.ResponseWriter, r *http.Request) {
	var pool *string
	if q := r.URL.Query(); q.Has("pool") {
		p := q.Get("pool")
		pool = &p
	}
	ns, err := s.b.Nodes(r.Context(), pool)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	if ns == nil {
		ns = []NodeJSON{}
	}
	writeJSON(w, http.StatusOK, ns)
}
