// Package validate is tide's one set of rules for numbers that cannot be
// meant: NaN, infinities, negative counts, values past what a field (or its
// type) holds, and empty input. The config, snapshot, job file, head API and
// fleet readers all refuse such input through it, with errors that name the
// field, so the same number gets the same answer everywhere.
//
// It also holds the checked count arithmetic of the decision code: sums and
// products of counts that saturate instead of wrapping, so an absurd input
// is at worst clamped (to a pool's max) and never turns into a negative
// queue or a wrong decision.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"math"
)

// Limits of what one request (an instance, a job) may ask for. They are far
// beyond any machine and leave room for sums of many requests in int64.
const (
	// MaxCores is the most CPU cores one request may ask for.
	MaxCores = 1 << 20
	// MaxMemoryMB is the most memory, in MB, one request may ask for.
	MaxMemoryMB = 1 << 40
	// MaxGPUs is the most GPUs one request may ask for.
	MaxGPUs = 1 << 20
	// MaxNodes is the most nodes one pool may hold (7-digit ordinals, so
	// that machine ids fit the providers' limits), and the bound of every
	// knob counted in nodes.
	MaxNodes = 9_999_999
)

// ErrEmpty says an input holds nothing (or only white space).
var ErrEmpty = errors.New("is empty")

// Empty returns ErrEmpty when data holds nothing but white space.
func Empty(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return ErrEmpty
	}
	return nil
}

// Integer is a signed integer type.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64
}

// NonNegative refuses a negative count: "field: must not be negative, got -1".
func NonNegative[T Integer](field string, v T) error {
	if v < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", field, v)
	}
	return nil
}

// Between refuses v outside [lo, hi]: "field: must be between lo and hi, got v".
func Between[T Integer](field string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s: must be between %d and %d, got %d", field, lo, hi, v)
	}
	return nil
}

// Finite refuses NaN and infinities.
func Finite(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%s: must be a finite number, got %v", field, v)
	}
	return nil
}

// Amount refuses what cannot be a price, a penalty or a cost: NaN,
// infinities and negative numbers.
func Amount(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%s: must be a finite non-negative number, got %v", field, v)
	}
	return nil
}

// Probability refuses what is not within [0, 1] (NaN included).
func Probability(field string, v float64) error {
	if !(v >= 0 && v <= 1) {
		return fmt.Errorf("%s: must be within [0, 1], got %v", field, v)
	}
	return nil
}

// Cores refuses a CPU core count that is not finite or not within
// [0, MaxCores].
func Cores(field string, v float64) error { return within(field, v, MaxCores, "cores") }

// MemoryMB refuses a memory size in MB that is not finite or not within
// [0, MaxMemoryMB].
func MemoryMB(field string, v float64) error { return within(field, v, MaxMemoryMB, "MB") }

// GPUs refuses a GPU count outside [0, MaxGPUs].
func GPUs(field string, v int64) error { return within(field, float64(v), MaxGPUs, "GPUs") }

// within refuses v unless it is a finite number within [0, hi]; the message
// says which rule v breaks.
func within(field string, v, hi float64, unit string) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s: must be a finite number, got %v", field, v)
	case v < 0:
		return fmt.Errorf("%s: must not be negative, got %v", field, v)
	case v > hi:
		return fmt.Errorf("%s: must be at most %.0f %s, got %v", field, hi, unit, v)
	}
	return nil
}
