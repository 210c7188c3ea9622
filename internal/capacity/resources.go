// Package capacity is tide's leaf vocabulary: resources and their quantities,
// offerings (what a provider sells), the node spec of a pool, and the
// pressure report the scheduler publishes for a pool.
//
// It has no I/O and no clock; every other package may import it, and it
// imports nothing of tide's but internal/validate (the rules for numbers).
package capacity

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Resources is an amount of compute: CPU in millicores, memory in bytes, GPUs
// as a count, and any number of named extended resources (counts).
//
// The zero value is "nothing". Extended may be nil; a missing name and a zero
// count mean the same thing. Methods never modify their receiver.
type Resources struct {
	MilliCPU int64            `json:"-"`
	Memory   int64            `json:"-"`
	GPUs     int64            `json:"-"`
	Extended map[string]int64 `json:"-"`
}

// CPU returns r with only the given millicores set; a helper for tests and literals.
func CPU(milli int64) Resources { return Resources{MilliCPU: milli} }

// IsZero reports whether r holds no resource at all.
func (r Resources) IsZero() bool {
	if r.MilliCPU != 0 || r.Memory != 0 || r.GPUs != 0 {
		return false
	}
	for _, v := range r.Extended {
		if v != 0 {
			return false
		}
	}
	return true
}

// Fits reports whether r fits inside avail in every dimension.
func (r Resources) Fits(avail Resources) bool {
	if r.MilliCPU > avail.MilliCPU || r.Memory > avail.Memory || r.GPUs > avail.GPUs {
		return false
	}
	for k, v := range r.Extended {
		if v > 0 && v > avail.Extended[k] {
			return false
		}
	}
	return true
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	out := Resources{MilliCPU: r.MilliCPU + o.MilliCPU, Memory: r.Memory + o.Memory, GPUs: r.GPUs + o.GPUs}
	out.Extended = mergeExtended(r.Extended, o.Extended, 1)
	return out
}

// Sub returns r - o. Dimensions may become negative; callers that need a
// floor check Fits first.
func (r Resources) Sub(o Resources) Resources {
	out := Resources{MilliCPU: r.MilliCPU - o.MilliCPU, Memory: r.Memory - o.Memory, GPUs: r.GPUs - o.GPUs}
	out.Extended = mergeExtended(r.Extended, o.Extended, -1)
	return out
}

// Scale returns r multiplied by n in every dimension.
func (r Resources) Scale(n int64) Resources {
	out := Resources{MilliCPU: r.MilliCPU * n, Memory: r.Memory * n, GPUs: r.GPUs * n}
	if len(r.Extended) > 0 {
		out.Extended = make(map[string]int64, len(r.Extended))
		for k, v := range r.Extended {
			out.Extended[k] = v * n
		}
	}
	return out
}

// Negative reports whether any dimension of r is below zero.
func (r Resources) Negative() bool {
	if r.MilliCPU < 0 || r.Memory < 0 || r.GPUs < 0 {
		return true
	}
	for _, v := range r.Extended {
		if v < 0 {
			return true
		}
	}
	return false
}

// Equal reports whether r and o hold the same amounts (a nil and an empty
// Extended map are equal, as are a missing name and a zero count).
func (r Resources) Equal(o Resources) bool {
	if r.MilliCPU != o.MilliCPU || r.Memory != o.Memory || r.GPUs != o.GPUs {
		return false
	}
	for k, v := range r.Extended {
		if o.Extended[k] != v {
			return false
		}
	}
	for k, v := range o.Extended {
		if r.Extended[k] != v {
			return false
		}
	}
	return true
}

// ExtendedNames returns the extended resource names of r with a non-zero count, sorted.
func (r Resources) ExtendedNames() []string {
	names := make([]string, 0, len(r.Extended))
	for k, v := range r.Extended {
		if v != 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// Clone returns a deep copy of r.
func (r Resources) Clone() Resources {
	r.Extended = maps.Clone(r.Extended)
	return r
}

// String formats r compactly, e.g. "cpu=2 mem=4Gi gpu=1 example.com/fpga=1".
func (r Resources) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu=%s mem=%s", FormatCPU(r.MilliCPU), FormatBytes(r.Memory))
	if r.GPUs != 0 {
		fmt.Fprintf(&b, " gpu=%d", r.GPUs)
	}
	for _, k := range r.ExtendedNames() {
		fmt.Fprintf(&b, " %s=%d", k, r.Extended[k])
	}
	return b.String()
}

func mergeExtended(a, b map[string]int64, sign int64) map[string]int64 {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make(map[string]int64, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] += sign * v
	}
	return out
}

// WorkShare is the largest share of c's CPU, memory or GPUs that r asks
// for, at most 1, and 1 when c has none of a dimension r asks for: how much
// of a node of capacity c work requesting r occupies (work hours weighted
// by it).
func WorkShare(r, c Resources) float64 {
	share := 0.0
	for _, d := range [][2]int64{{r.MilliCPU, c.MilliCPU}, {r.Memory, c.Memory}, {r.GPUs, c.GPUs}} {
		switch {
		case d[0] <= 0:
		case d[1] <= 0:
			return 1
		default:
			share = max(share, float64(d[0])/float64(d[1]))
		}
	}
	return min(share, 1)
}
