// Package chaostest reads the two knobs every chaos test of tide shares:
// TIDE_CHAOS, the size of a run (rounds, kills or seeds; the default suite
// runs a small size when it is unset), and TIDE_CHAOS_SEED, the seed that
// replays a run (the clock's nanoseconds when unset; tests print the seed
// they used so that a failure can be replayed).
package chaostest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Size returns TIDE_CHAOS as a positive count and full true, or def and
// full false when it is unset. A value that is not a positive integer
// fails the test.
func Size(t testing.TB, def int) (n int, full bool) {
	t.Helper()
	v := os.Getenv("TIDE_CHAOS")
	if v == "" {
		return def, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("TIDE_CHAOS=%q: want a positive number", v)
	}
	return n, true
}

// Seed returns TIDE_CHAOS_SEED, or the clock's nanoseconds when it is
// unset. A value that is not an unsigned integer fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if v := os.Getenv("TIDE_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TIDE_CHAOS_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}
