package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ErrQuantity is wrapped by every quantity parsing error.
var ErrQuantity = errors.New("invalid quantity")

// ParseCPU parses a CPU quantity into millicores: "500m" (millicores), "2"
// (cores), "1.5" (cores, fractions down to one millicore).
func ParseCPU(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, "m") {
		n, err := parseInt(strings.TrimSuffix(s, "m"))
		if err != nil {
			return 0, fmt.Errorf("%w %q: want millicores like 500m or cores like 2", ErrQuantity, s)
		}
		return n, nil
	}
	v, err := parseScaled(s, 1000)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want millicores like 500m or cores like 2", ErrQuantity, s)
	}
	return v, nil
}

var byteSuffixes = []struct {
	suffix string
	mult   int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// ParseBytes parses a memory quantity into bytes: "4Gi", "512Mi", "1G",
// "1.5Gi", or a plain byte count "1024".
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	for _, bs := range byteSuffixes {
		if num, ok := strings.CutSuffix(s, bs.suffix); ok {
			v, err := parseScaled(num, bs.mult)
			if err != nil {
				return 0, fmt.Errorf("%w %q: want bytes like 4Gi, 512Mi, 1G or 1024", ErrQuantity, s)
			}
			return v, nil
		}
	}
	v, err := parseScaled(s, 1)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want bytes like 4Gi, 512Mi, 1G or 1024", ErrQuantity, s)
	}
	return v, nil
}

// ParseCount parses a non-negative whole count such as a GPU count "16".
func ParseCount(s string) (int64, error) {
	n, err := parseInt(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w %q: want a whole non-negative number", ErrQuantity, s)
	}
	return n, nil
}

func parseInt(s string) (int64, error) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, ErrQuantity
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseScaled parses a non-negative decimal s and multiplies it by mult,
// refusing results that are not whole or do not fit an int64.
func parseScaled(s string, mult int64) (int64, error) {
	if s == "" || s[0] == '+' || s[0] == '-' || strings.ContainsAny(s, "eE_") {
		return 0, ErrQuantity
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, ErrQuantity
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() || r.Num().Sign() < 0 || !r.Num().IsInt64() {
		return 0, ErrQuantity
	}
	return r.Num().Int64(), nil
}

// FormatCPU formats millicores the way ParseCPU reads them ("2", "500m").
func FormatCPU(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	return strconv.FormatInt(milli, 10) + "m"
}

// FormatBytes formats a byte count with the largest exact binary suffix
// ("4Gi", "512Mi", "1000").
func FormatBytes(b int64) string {
	if b == 0 {
		return "0"
	}
	for i := len(byteSuffixes[:6]) - 1; i >= 0; i-- {
		bs := byteSuffixes[i]
		if b%bs.mult == 0 {
			return strconv.FormatInt(b/bs.mult, 10) + bs.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// resourcesJSON is the wire form of Resources: cpu and memory accept a
// string quantity or a plain number (cores, bytes).
type resourcesJSON struct {
	CPU      json.RawMessage  `json:"cpu,omitempty"`
	Memory   json.RawMessage  `json:"memory,omitempty"`
	GPUs     json.RawMessage  `json:"gpus,omitempty"`
	Extended map[string]int64 `json:"extended,omitempty"`
}

// MarshalJSON writes {"cpu": "500m", "memory": "4Gi", "gpus": 1, "extended": {...}}.
func (r Resources) MarshalJSON() ([]byte, error) {
	out := struct {
		CPU      string           `json:"cpu"`
		Memory   string           `json:"memory"`
		GPUs     int64            `json:"gpus,omitempty"`
		Extended map[string]int64 `json:"extended,omitempty"`
	}{FormatCPU(r.MilliCPU), FormatBytes(r.Memory), r.GPUs, r.Extended}
	return json.Marshal(out)
}

// UnmarshalJSON reads the form MarshalJSON writes. Unknown fields, negative
// amounts and malformed quantities are errors that name the field.
func (r *Resources) UnmarshalJSON(data []byte) error {
	var w resourcesJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("%s: unknown field (want cpu, memory, gpus, extended)", strings.Trim(f, `"`))
		}
		return fmt.Errorf("resources: %w", err)
	}
	var out Resources
	var err error
	if out.MilliCPU, err = quantityField(w.CPU, "cpu", ParseCPU, 1000); err != nil {
		return err
	}
	if out.Memory, err = quantityField(w.Memory, "memory", ParseBytes, 1); err != nil {
		return err
	}
	if out.GPUs, err = quantityField(w.GPUs, "gpus", ParseCount, 1); err != nil {
		return err
	}
	for k, v := range w.Extended {
		if k == "" {
			return fmt.Errorf("extended: empty resource name")
		}
		if v < 0 {
			return fmt.Errorf("extended.%s: %w %d: must not be negative", k, ErrQuantity, v)
		}
		if out.Extended == nil {
			out.Extended = make(map[string]int64, len(w.Extended))
		}
		out.Extended[k] = v
	}
	*r = out
	return nil
}

// quantityField decodes a JSON string (parsed by parse) or a JSON number
// (multiplied by mult) into a non-negative int64.
func quantityField(raw json.RawMessage, field string, parse func(string) (int64, error), mult int64) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		v, err := parse(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return v, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s: %w %s: want a number or a string quantity", field, ErrQuantity, raw)
	}
	v := f * float64(mult)
	if f < 0 || math.IsInf(v, 0) || v > math.MaxInt64/2 || v != math.Trunc(v) {
		return 0, fmt.Errorf("%s: %w %s: must be a whole non-negative amount", field, ErrQuantity, raw)
	}
	return int64(v), nil
}
