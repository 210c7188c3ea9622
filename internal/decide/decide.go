// Package decide evaluates one pool's policy on a snapshot, without side
// effects: the engine behind `tide decide`.
//
// A snapshot is JSON:
//
//	{
//	  "time": "2026-01-01T00:00:00Z",
//	  "desired": 4,
//	  "nodes": [{"id": "n0", "ordinal": 0, "resources": {"cpu": "4", "memory": "16Gi"},
//	             "running": [{"requests": {"cpu": "1"}, "daemon": false}],
//	             "marked_at": "...", "idle_since": "..."}],
//	  "pending": [{"requests": {"cpu": "1", "memory": "1Gi"}, "count": 12}],
//	  "state": { ...the "state" of a previous result... }
//	}
//
// The result carries the new desired count, the reason, the policy's own
// figures and the new state, so that calls can be chained by copying the
// result's state into the next snapshot.
package decide

import (
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/strictjson"
)

// Snapshot is the input of one decision.
type Snapshot struct {
	// Time is the time of the decision.
	Time time.Time `json:"time"`
	// Desired is the pool's current desired node count.
	Desired int `json:"desired"`
	// Nodes are the pool's nodes with what runs on them.
	Nodes []capacity.Node `json:"nodes"`
	// Pending are the instances waiting for capacity.
	Pending []capacity.Pending `json:"pending"`
	// State is the state returned by a previous decision (optional).
	State policy.State `json:"state"`
}

// Result is the output of one decision.
type Result struct {
	Pool     string    `json:"pool"`
	Policy   string    `json:"policy"`
	Time     time.Time `json:"time"`
	Previous int       `json:"previous"`
	Desired  int       `json:"desired"`
	Changed  bool      `json:"changed"`
	Code     string    `json:"reason_code"`
	Reason   string    `json:"reason"`
	// Figures and State are the policy's decision as it returned them.
	TargetTracking *policy.TargetTrackingFigures `json:"target_tracking,omitempty"`
	Utilization    *policy.UtilizationFigures    `json:"utilization,omitempty"`
	Tide           *policy.TideFigures           `json:"tide,omitempty"`
	// Launch is the purchase behind a raised count: the offerings the new
	// nodes would be launched from, with fallbacks.
	Launch []capacity.Launch `json:"launch,omitempty"`
	State  policy.State      `json:"state"`
}

// Parse decodes and validates a snapshot. Unknown fields, negative counts and
// malformed quantities are errors naming the field.
func Parse(data []byte) (Snapshot, error) {
	var s Snapshot
	if err := strictjson.Decode(data, &s); err != nil {
		var pe *time.ParseError
		if errors.As(err, &pe) {
			return s, fmt.Errorf("snapshot: time: want RFC 3339 such as 2026-01-01T00:00:00Z: %w", err)
		}
		return s, fmt.Errorf("snapshot: %w", err)
	}
	return s, s.Validate()
}

// Validate checks the snapshot's values; errors name the field.
func (s *Snapshot) Validate() error {
	var errs []error
	if s.Time.IsZero() {
		errs = append(errs, errors.New("snapshot: time: must be set (RFC 3339, e.g. 2026-01-01T00:00:00Z)"))
	}
	if s.Desired < 0 {
		errs = append(errs, fmt.Errorf("snapshot: desired: must not be negative, got %d", s.Desired))
	}
	ids := map[string]bool{}
	ordinals := map[int]bool{}
	for i, n := range s.Nodes {
		where := fmt.Sprintf("snapshot: nodes[%d]", i)
		if n.ID == "" {
			errs = append(errs, fmt.Errorf("%s.id: must be set", where))
		} else if ids[n.ID] {
			errs = append(errs, fmt.Errorf("%s.id: duplicate node id %q", where, n.ID))
		}
		ids[n.ID] = true
		if n.Ordinal < 0 {
			errs = append(errs, fmt.Errorf("%s.ordinal: must not be negative, got %d", where, n.Ordinal))
		} else if ordinals[n.Ordinal] {
			errs = append(errs, fmt.Errorf("%s.ordinal: duplicate ordinal %d", where, n.Ordinal))
		}
		ordinals[n.Ordinal] = true
		if !n.Allocated().Fits(n.Resources) {
			errs = append(errs, fmt.Errorf("%s.running: requests %v exceed the node's resources %v", where, n.Allocated(), n.Resources))
		}
	}
	for i, p := range s.Pending {
		if p.Count < 0 {
			errs = append(errs, fmt.Errorf("snapshot: pending[%d].count: must not be negative, got %d", i, p.Count))
		}
		if p.Requests.IsZero() {
			errs = append(errs, fmt.Errorf("snapshot: pending[%d].requests: must request some resource", i))
		}
	}
	if s.State.LowDatapoints < 0 {
		errs = append(errs, fmt.Errorf("snapshot: state.low_datapoints: must not be negative, got %d", s.State.LowDatapoints))
	}
	return errors.Join(errs...)
}

// Run evaluates the policy of cfg (validating cfg) on the snapshot.
func Run(pool string, cfg policy.Config, s Snapshot) (Result, error) {
	p, err := policy.New(cfg)
	if err != nil {
		return Result{}, err
	}
	d := p.Decide(policy.Input{
		Now:      s.Time,
		Desired:  s.Desired,
		Pressure: capacity.Pressure{Nodes: s.Nodes, Pending: s.Pending},
		State:    s.State,
	})
	return Result{
		Pool: pool, Policy: p.Name(), Time: s.Time,
		Previous: s.Desired, Desired: d.Desired, Changed: d.Desired != s.Desired,
		Code: d.Reason.Code, Reason: d.Reason.String(),
		TargetTracking: d.TargetTracking, Utilization: d.Utilization, Tide: d.Tide, Launch: d.Launch,
		State: d.State,
	}, nil
}
