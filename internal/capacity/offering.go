package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tide-project/tide/internal/validate"
)

// Kind is how an offering is bought.
type Kind string

// The capacity kinds tide knows.
const (
	OnDemand  Kind = "on-demand"
	Spot      Kind = "spot"
	Reserved  Kind = "reserved"
	BareMetal Kind = "bare-metal"
)

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool {
	switch k {
	case OnDemand, Spot, Reserved, BareMetal:
		return true
	}
	return false
}

// Offering is one thing a provider sells: an instance type in a zone bought
// as one capacity kind, with the resources of one node and its price.
type Offering struct {
	// Type is the instance type name, e.g. "g8".
	Type string `json:"type"`
	// Zone is where the offering lives; empty means "any" or "the only one".
	Zone string `json:"zone,omitempty"`
	// Kind is on-demand, spot, reserved or bare-metal (default on-demand).
	Kind Kind `json:"capacity,omitempty"`
	// Resources is what one node of this offering provides. In JSON and
	// YAML its fields (cpu, memory, gpus, extended) sit beside the others.
	Resources Resources `json:"-"`
	// PricePerHour is the price of one node for one hour, in dollars.
	PricePerHour float64 `json:"price"`
	// InterruptionProbability is the chance per hour that the provider
	// reclaims the node (spot); 0 for capacity that is never reclaimed.
	InterruptionProbability float64 `json:"interruption_probability,omitempty"`
	// InterruptionPenalty is what one interruption costs the user, in dollars.
	InterruptionPenalty float64 `json:"interruption_penalty,omitempty"`
}

// Name identifies the offering: "type/zone/kind" (zone omitted when empty).
func (o Offering) Name() string {
	kind := o.Kind
	if kind == "" {
		kind = OnDemand
	}
	if o.Zone == "" {
		return o.Type + "/" + string(kind)
	}
	return o.Type + "/" + o.Zone + "/" + string(kind)
}

// EffectiveCost is the expected cost of one node-hour: price plus
// interruption probability × interruption penalty (BigFleet §4).
func (o Offering) EffectiveCost() float64 {
	return o.PricePerHour + o.InterruptionProbability*o.InterruptionPenalty
}

// Validate checks the offering's fields; errors name the field.
func (o Offering) Validate() error {
	var errs []error
	if o.Type == "" {
		errs = append(errs, errors.New("type: must be set"))
	}
	if o.Kind != "" && !o.Kind.Valid() {
		errs = append(errs, fmt.Errorf("capacity: unknown capacity kind %q (want on-demand, spot, reserved or bare-metal)", o.Kind))
	}
	if o.Resources.Negative() {
		errs = append(errs, errors.New("resources: must not be negative"))
	}
	if o.Resources.IsZero() {
		errs = append(errs, errors.New("resources: a node must provide some cpu, memory, gpus or extended resource"))
	}
	errs = append(errs, validate.Amount("price", o.PricePerHour),
		validate.Probability("interruption_probability", o.InterruptionProbability),
		validate.Amount("interruption_penalty", o.InterruptionPenalty))
	return errors.Join(errs...)
}

// offeringJSON is the flat wire form of an Offering.
type offeringJSON struct {
	Type                    string           `json:"type"`
	Zone                    string           `json:"zone,omitempty"`
	Kind                    Kind             `json:"capacity,omitempty"`
	CPU                     json.RawMessage  `json:"cpu,omitempty"`
	Memory                  json.RawMessage  `json:"memory,omitempty"`
	GPUs                    json.RawMessage  `json:"gpus,omitempty"`
	Extended                map[string]int64 `json:"extended,omitempty"`
	PricePerHour            float64          `json:"price"`
	InterruptionProbability float64          `json:"interruption_probability,omitempty"`
	InterruptionPenalty     float64          `json:"interruption_penalty,omitempty"`
}

// MarshalJSON writes the flat form: {"type": "g8", "cpu": "32", "memory": "256Gi", "gpus": 8, "price": 24.5, ...}.
func (o Offering) MarshalJSON() ([]byte, error) {
	cpu, _ := json.Marshal(FormatCPU(o.Resources.MilliCPU))
	mem, _ := json.Marshal(FormatBytes(o.Resources.Memory))
	w := offeringJSON{Type: o.Type, Zone: o.Zone, Kind: o.Kind, CPU: cpu, Memory: mem, Extended: o.Resources.Extended,
		PricePerHour: o.PricePerHour, InterruptionProbability: o.InterruptionProbability, InterruptionPenalty: o.InterruptionPenalty}
	if o.Resources.GPUs != 0 {
		w.GPUs, _ = json.Marshal(o.Resources.GPUs)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the flat form and validates it; unknown fields are errors.
func (o *Offering) UnmarshalJSON(data []byte) error {
	var w offeringJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	res := map[string]any{"extended": w.Extended}
	for k, v := range map[string]json.RawMessage{"cpu": w.CPU, "memory": w.Memory, "gpus": w.GPUs} {
		if len(v) > 0 {
			res[k] = v
		}
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	var r Resources
	if err := r.UnmarshalJSON(raw); err != nil {
		return err
	}
	out := Offering{Type: w.Type, Zone: w.Zone, Kind: w.Kind, Resources: r, PricePerHour: w.PricePerHour,
		InterruptionProbability: w.InterruptionProbability, InterruptionPenalty: w.InterruptionPenalty}
	if out.Kind == "" {
		out.Kind = OnDemand
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*o = out
	return nil
}

// Launch is part of a purchase: Count new nodes of one offering (by Name),
// and the offerings that may stand in for it, cheapest first, should it be
// out of capacity: those that can also host what these nodes were bought
// for. A policy's decision carries its launches down to the controller, so
// that the pool buys the mix the policy chose and pending work drives only
// offerings that can run it.
type Launch struct {
	Offering string   `json:"offering"`
	Count    int      `json:"count"`
	Fallback []string `json:"fallback,omitempty"`
}
