package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/internal/validate"
)

// Step is one snapshot of a sequence (tide decide --steps): Name says where
// it came from (a file, or "steps[3]") and Data is its JSON.
type Step struct {
	Name string
	Data []byte
}

// StepResult is the decision of one step, with the mismatches against the
// step's "expect" (empty when it holds or states nothing).
type StepResult struct {
	Name    string `json:"step"`
	Comment string `json:"comment,omitempty"`
	Result
	Mismatches []string `json:"mismatches,omitempty"`
}

// Expect is what a step says its decision must be, so that a walkthrough
// checks itself: the desired count and the actions in their short form
// (Action.Short), in order.
type Expect struct {
	Desired *int     `json:"desired,omitempty"`
	Actions []string `json:"actions,omitempty"`
	// State is the reconciler's state after the step.
	State string `json:"state,omitempty"`
}

// SplitSteps splits a steps file (a JSON array of snapshots) into steps
// named "<name>: steps[i]".
func SplitSteps(name string, data []byte) ([]Step, error) {
	if err := checkEmpty(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var raw []json.RawMessage
	if err := strictjson.Decode(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of snapshots: %w", name, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: holds no steps", name)
	}
	steps := make([]Step, len(raw))
	for i, r := range raw {
		steps[i] = Step{Name: fmt.Sprintf("%s: steps[%d]", name, i), Data: r}
	}
	return steps, nil
}

// RunSteps decides each step in order, carrying from one step to the next
// what the previous decision left: the policy's state, the desired count,
// the controller view (machines created, drained, marked or removed by the
// previous actions, the provision call in flight, the last tick) and, when
// the step omits them, the nodes and the pending instances. A step states
// only what changed: its machines are merged by ordinal into the carried
// ones, and its provision (an outcome, the created ordinals) applies to the
// call in flight. Errors name the step and the field.
func RunSteps(in Input, steps []Step) ([]StepResult, error) {
	var out []StepResult
	var prev *Snapshot
	var last Result
	for _, st := range steps {
		s, err := parseStep(st.Data, prev, last)
		if err != nil {
			return out, fmt.Errorf("%s: %w", st.Name, err)
		}
		if prev != nil && s.Time.Before(prev.Time) {
			return out, fmt.Errorf("%s: snapshot: time: %s is before the previous step's %s", st.Name, stamp(s.Time), stamp(prev.Time))
		}
		res, err := Decide(in, s)
		if err != nil {
			return out, fmt.Errorf("%s: %w", st.Name, err)
		}
		out = append(out, StepResult{Name: st.Name, Comment: s.Comment, Result: res, Mismatches: s.Expect.check(res)})
		prev, last = &s, res
	}
	return out, nil
}

// parseStep decodes one step and fills what it omits from the previous one.
func parseStep(data []byte, prev *Snapshot, last Result) (Snapshot, error) {
	if err := checkEmpty(data); err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	if err := decodeSnapshot(data, &s); err != nil {
		return s, err
	}
	if prev == nil {
		return s, s.Validate()
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return s, fmt.Errorf("snapshot: %w", err)
	}
	if _, ok := keys["desired"]; !ok {
		s.Desired = last.Desired
	}
	if _, ok := keys["state"]; !ok {
		s.State = last.State
	}
	if _, ok := keys["nodes"]; !ok {
		s.Nodes = prev.Nodes
	}
	if _, ok := keys["pending"]; !ok {
		s.Pending = prev.Pending
	}
	if last.Controller != nil {
		s.Controller = merge(last.Controller.View, s.Controller)
	}
	return s, s.Validate()
}

// merge applies a step's controller view to the carried one.
func merge(carried Controller, step *Controller) *Controller {
	c := carried
	c.Machines = slices.Clone(carried.Machines)
	if step == nil {
		return &c
	}
	if !step.LastTick.IsZero() {
		c.LastTick = step.LastTick
	}
	if step.Backoff != nil {
		c.Backoff = step.Backoff
	}
	for _, m := range step.Machines {
		i := slices.IndexFunc(c.Machines, func(o Machine) bool { return o.Ordinal == m.Ordinal })
		if i < 0 {
			c.Machines = append(c.Machines, m)
			continue
		}
		old := &c.Machines[i]
		if m.State != "" {
			old.State, old.MarkedAt = m.State, m.MarkedAt
			// A restated machine states its health, drift and work anew;
			// its age and whether it is being replaced carry over.
			old.Unhealthy, old.UnhealthySince, old.Drifted, old.Blocked = m.Unhealthy, m.UnhealthySince, m.Drifted, m.Blocked
			if !m.CreatedAt.IsZero() {
				old.CreatedAt = m.CreatedAt
			}
			if m.Replacing != "" {
				old.Replacing = m.Replacing
			}
		}
		if !m.Resources.IsZero() {
			old.Resources = m.Resources
		}
		if m.Running != nil {
			old.Running = m.Running
		}
	}
	if p := step.Provision; p != nil {
		call := *p
		if len(call.Asked) == 0 && c.Provision != nil {
			call.Asked = c.Provision.Asked
		}
		c.Provision = &call
	}
	return &c
}

// check compares a result with the expectation; nil when it holds.
func (e *Expect) check(r Result) []string {
	if e == nil {
		return nil
	}
	var bad []string
	if e.Desired != nil && *e.Desired != r.Desired {
		bad = append(bad, fmt.Sprintf("desired: got %d, want %d", r.Desired, *e.Desired))
	}
	if e.Actions != nil || e.State != "" {
		if r.Controller == nil {
			return append(bad, "actions: the snapshot has no controller view")
		}
		if e.Actions != nil {
			got := make([]string, len(r.Controller.Actions))
			for i, a := range r.Controller.Actions {
				got[i] = a.Short()
			}
			if !slices.Equal(got, e.Actions) {
				bad = append(bad, fmt.Sprintf("actions: got %q, want %q", got, e.Actions))
			}
		}
		if e.State != "" && e.State != r.Controller.After {
			bad = append(bad, fmt.Sprintf("state: got %s, want %s", r.Controller.After, e.State))
		}
	}
	return bad
}

// Short is the action in a few words: its kind, the nodes, and a note's
// code or a provision's offerings, e.g. "provision 4 5", "note provision-short".
func (a Action) Short() string {
	parts := []string{a.Kind}
	if a.Code != "" {
		parts = append(parts, a.Code)
	}
	for _, n := range a.Nodes {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, " ")
}

// checkEmpty refuses an empty (or blank) input with a clear message.
func checkEmpty(data []byte) error { return validate.Empty(data) }

// decodeSnapshot decodes strictly, with a hint for malformed times.
func decodeSnapshot(data []byte, s *Snapshot) error {
	if err := strictjson.Decode(data, s); err != nil {
		var pe *time.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("snapshot: time: want RFC 3339 such as 2026-01-01T00:00:00Z: %w", err)
		}
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}
