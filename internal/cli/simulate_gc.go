package cli

import (
	"os"
	"runtime/debug"
)

// Garbage collection during `tide simulate`: a replay is a batch job whose
// live heap is small (tens of MB) and whose collector, at Go's default
// GOGC=100, took a quarter to a third of the CPU (docs/benchmarks.md). It
// runs with a heap allowed to grow to five times the live data
// (simGCPercent) under a soft limit of simMemoryLimit, past which the
// collector works as hard as it must. GOGC or GOMEMLIMIT in the
// environment take precedence.
const (
	simGCPercent   = 400
	simMemoryLimit = 768 << 20
)

// simGC sets the simulator's collector settings and returns what puts the
// previous ones back (tests run the command in-process).
func simGC() (restore func()) {
	pct, limit := -2, int64(-1)
	if os.Getenv("GOGC") == "" {
		pct = debug.SetGCPercent(simGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit = debug.SetMemoryLimit(simMemoryLimit)
	}
	return func() {
		if pct != -2 {
			debug.SetGCPercent(pct)
		}
		if limit >= 0 {
			debug.SetMemoryLimit(limit)
		}
	}
}
