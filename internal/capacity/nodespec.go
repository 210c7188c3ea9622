package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tide-project/tide/internal/validate"
)

// NodeSpec is a pool's node count specification (Skyward's Nodes): Min is the
// floor the pool provisions and keeps, Desired the number of ready nodes that
// make the pool operational, and Max the ceiling an elastic pool may grow to.
//
// It has four written forms:
//
//	4                               fixed: Min=4, Desired=4, Max=4
//	[2, 16]                         elastic: Min=2, Desired=2, Max=16
//	{min: 8, desired: 4}            fixed, operational at 4 ready
//	{min: 4, desired: 2, max: 16}   elastic, operational at 2 ready
//
// In a fixed pool Desired ≤ Min; in an elastic pool Min ≤ Max and Desired ≤ Max
// (desired above min makes the autoscaler grow the pool to meet the readiness
// threshold). Omitting desired means desired = min.
type NodeSpec struct {
	Min     int
	Desired int
	Max     int
	// Elastic is true when a max was given; the pool then scales in [Min, Max].
	Elastic bool
}

// Fixed returns the spec of a fixed pool of n nodes.
func Fixed(n int) NodeSpec { return NodeSpec{Min: n, Desired: n, Max: n} }

// Elastic returns the spec of an elastic pool between min and max.
func Elastic(min, max int) NodeSpec { return NodeSpec{Min: min, Desired: min, Max: max, Elastic: true} }

// Initial is the node count a pool provisions at start: Min, or Desired when
// an elastic pool's readiness threshold is above Min.
func (s NodeSpec) Initial() int { return max(s.Min, s.Desired) }

// Ready reports whether a pool with ready nodes is operational.
func (s NodeSpec) Ready(ready int) bool { return ready >= s.Desired }

// Clamp returns n limited to [Min, Max].
func (s NodeSpec) Clamp(n int) int { return min(max(n, s.Min), s.Max) }

// Validate checks the seed's rules; errors name the field.
func (s NodeSpec) Validate() error {
	var errs []error
	if s.Min < 0 {
		errs = append(errs, fmt.Errorf("min: must not be negative, got %d", s.Min))
	}
	if s.Desired < 0 {
		errs = append(errs, fmt.Errorf("desired: must not be negative, got %d", s.Desired))
	}
	if s.Max < 0 {
		errs = append(errs, fmt.Errorf("max: must not be negative, got %d", s.Max))
	}
	if s.Max > validate.MaxNodes || s.Min > validate.MaxNodes || s.Desired > validate.MaxNodes {
		errs = append(errs, fmt.Errorf("max: at most %d nodes per pool, got %d", validate.MaxNodes, max(s.Max, s.Min, s.Desired)))
	}
	if s.Elastic {
		if s.Max < 1 {
			errs = append(errs, fmt.Errorf("max: an elastic pool needs max ≥ 1, got %d", s.Max))
		}
		if s.Min > s.Max {
			errs = append(errs, fmt.Errorf("min: %d is above max %d", s.Min, s.Max))
		}
		if s.Desired > s.Max {
			errs = append(errs, fmt.Errorf("desired: %d is above max %d", s.Desired, s.Max))
		}
	} else {
		if s.Desired > s.Min {
			errs = append(errs, fmt.Errorf("desired: %d is above min %d; in a fixed pool desired must be ≤ min (add max to make the pool elastic)", s.Desired, s.Min))
		}
		if s.Max != s.Min {
			errs = append(errs, fmt.Errorf("max: a fixed pool has max = min = %d, got %d", s.Min, s.Max))
		}
	}
	return errors.Join(errs...)
}

// String formats the spec in its shortest written form.
func (s NodeSpec) String() string {
	switch {
	case !s.Elastic && s.Desired == s.Min:
		return fmt.Sprint(s.Min)
	case !s.Elastic:
		return fmt.Sprintf("{min: %d, desired: %d}", s.Min, s.Desired)
	case s.Desired == s.Min:
		return fmt.Sprintf("[%d, %d]", s.Min, s.Max)
	}
	return fmt.Sprintf("{min: %d, desired: %d, max: %d}", s.Min, s.Desired, s.Max)
}

// MarshalJSON writes the object form {"min":..,"desired":..,"max":..} (max only when elastic).
func (s NodeSpec) MarshalJSON() ([]byte, error) {
	w := struct {
		Min     int  `json:"min"`
		Desired int  `json:"desired"`
		Max     *int `json:"max,omitempty"`
	}{Min: s.Min, Desired: s.Desired}
	if s.Elastic {
		w.Max = &s.Max
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads any of the four forms and validates the result.
func (s *NodeSpec) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	var out NodeSpec
	switch {
	case len(data) == 0:
		return errors.New("empty node spec")
	case data[0] == '[':
		var pair []int
		if err := json.Unmarshal(data, &pair); err != nil {
			return fmt.Errorf("want [min, max] with two whole numbers: %w", err)
		}
		if len(pair) != 2 {
			return fmt.Errorf("want [min, max] with two whole numbers, got %d", len(pair))
		}
		out = Elastic(pair[0], pair[1])
	case data[0] == '{':
		var w struct {
			Min     *int `json:"min"`
			Desired *int `json:"desired"`
			Max     *int `json:"max"`
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&w); err != nil {
			return fmt.Errorf("want {min, desired, max}: %w", err)
		}
		if w.Min == nil {
			return errors.New("min: must be set")
		}
		out.Min = *w.Min
		out.Desired = out.Min
		if w.Desired != nil {
			out.Desired = *w.Desired
		}
		out.Max = out.Min
		if w.Max != nil {
			out.Max, out.Elastic = *w.Max, true
		}
	default:
		var n int
		if err := json.Unmarshal(data, &n); err != nil {
			return fmt.Errorf("want a count, [min, max] or {min, desired, max}: %w", err)
		}
		out = Fixed(n)
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*s = out
	return nil
}
