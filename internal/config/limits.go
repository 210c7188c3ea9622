package config

import (
	"encoding/json"
	"fmt"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/strictjson"
)

// Limits is a pool's `limits:` section: the most CPU, memory, GPUs and
// cost per hour its machines may add up to, booting and draining ones
// included (Karpenter's NodePool limits, plus a cost ceiling). Quantities
// are written as offerings' are ("64", "500m", "256Gi"); a field left out
// is no limit.
//
//	limits: {cpu: 64, memory: 256Gi, gpus: 8, cost_per_hour: 40}
type Limits struct {
	policy.Limits
}

// UnmarshalJSON reads the section; unknown fields are errors.
func (l *Limits) UnmarshalJSON(data []byte) error {
	var raw struct {
		CPU         json.RawMessage `json:"cpu"`
		Memory      json.RawMessage `json:"memory"`
		GPUs        json.RawMessage `json:"gpus"`
		CostPerHour *float64        `json:"cost_per_hour"`
	}
	if err := strictjson.Decode(data, &raw); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  **int64
		get  func(capacity.Resources) int64
	}{
		{"cpu", raw.CPU, &l.MilliCPU, func(r capacity.Resources) int64 { return r.MilliCPU }},
		{"memory", raw.Memory, &l.Memory, func(r capacity.Resources) int64 { return r.Memory }},
		{"gpus", raw.GPUs, &l.GPUs, func(r capacity.Resources) int64 { return r.GPUs }},
	} {
		if f.raw == nil || string(f.raw) == "null" {
			continue
		}
		// capacity.Resources reads a quantity as an offering's field does.
		var r capacity.Resources
		if err := json.Unmarshal([]byte(`{"`+f.name+`":`+string(f.raw)+`}`), &r); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		v := f.get(r)
		*f.dst = &v
	}
	l.CostPerHour = raw.CostPerHour
	return nil
}

// MarshalJSON writes the section as it is read.
func (l Limits) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	if l.MilliCPU != nil {
		out["cpu"] = capacity.FormatCPU(*l.MilliCPU)
	}
	if l.Memory != nil {
		out["memory"] = capacity.FormatBytes(*l.Memory)
	}
	if l.GPUs != nil {
		out["gpus"] = *l.GPUs
	}
	if l.CostPerHour != nil {
		out["cost_per_hour"] = *l.CostPerHour
	}
	return json.Marshal(out)
}
