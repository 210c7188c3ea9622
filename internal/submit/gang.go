package submit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Priority bounds: a priority is an integer within ±MaxPriority.
const MaxPriority = 1_000_000_000

// MaxGangWait bounds a gang's max_wait.
const MaxGangWait = 30 * 24 * time.Hour

// GangRequest is the "gang" field of a submit: the replicas of the request
// form a gang, placed all at once or not at all. In JSON it is either true
// (a gang of all replicas, named after the request's name) or an object
// {"name", "size", "max_wait"} where size, when given, must equal replicas
// (replicas defaults to size), and max_wait is a Go duration ("10m"): how
// long the gang may wait for placement before it fails whole.
type GangRequest struct {
	Name    string `json:"name,omitempty"`
	Size    int    `json:"size,omitempty"`
	MaxWait string `json:"max_wait,omitempty"`
}

// UnmarshalJSON accepts true (an empty GangRequest), false (leaves the
// request without a gang: see Request.UnmarshalJSON) or the object form.
func (g *GangRequest) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true":
		*g = GangRequest{}
		return nil
	case "false":
		*g = GangRequest{Size: -1} // marks "no gang"; Check drops it
		return nil
	}
	type plain GangRequest
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("gang: %w", err)
	}
	*g = GangRequest(p)
	return nil
}

// GangSpec is a checked gang: Size instances (the request's replicas)
// named Name, which fail whole when not placed within MaxWait (zero: no
// limit).
type GangSpec struct {
	Name    string
	Size    int
	MaxWait time.Duration
}

// checkGang validates the priority and gang fields of req into s (after
// the replicas and name are checked).
func checkGang(req *Request, s *Spec) error {
	if req.Priority != nil {
		if *req.Priority < -MaxPriority || *req.Priority > MaxPriority {
			return bad("priority must be between %d and %d, got %d", -MaxPriority, MaxPriority, *req.Priority)
		}
		s.Priority = *req.Priority
	}
	g := req.Gang
	if g == nil || g.Size == -1 {
		return nil
	}
	if g.Size < 0 {
		return bad("gang.size must be positive, got %d", g.Size)
	}
	if g.Size > 0 {
		if req.Replicas == nil {
			if g.Size > MaxReplicas {
				return bad("gang.size must be at most %d, got %d", MaxReplicas, g.Size)
			}
			s.Replicas = g.Size
		} else if g.Size != s.Replicas {
			return bad("gang.size %d differs from replicas %d", g.Size, s.Replicas)
		}
	}
	gs := &GangSpec{Name: g.Name, Size: s.Replicas}
	if gs.Name == "" {
		gs.Name = s.Name
	}
	if gs.Name != "" {
		if err := ValidName(gs.Name); err != nil {
			return bad("gang.name: %s", err.(*Error).Detail)
		}
	}
	if g.MaxWait != "" {
		d, err := time.ParseDuration(g.MaxWait)
		if err != nil || d <= 0 || d > MaxGangWait {
			return bad("gang.max_wait must be a positive duration up to %s (such as \"10m\"), got %q", MaxGangWait, g.MaxWait)
		}
		gs.MaxWait = d
	}
	if s.TargetWorker != "" && gs.Size > 1 {
		return bad("a gang of %d instances cannot name one target_worker", gs.Size)
	}
	if s.Daemon {
		return bad("a daemon cannot be part of a gang")
	}
	s.Gang = gs
	return nil
}
