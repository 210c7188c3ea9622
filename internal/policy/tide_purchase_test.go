package policy

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// TestTideCountsAreArithmetic: the tide policy decides a backlog of 10^9
// instances in 10 shapes without expanding it: the purchase is a handful
// of node groups, the decision allocates about as much as for 10^4, and
// desired is the pool's max (the purchase is cut there) or the exact need.
func TestTideCountsAreArithmetic(t *testing.T) {
	var offs []capacity.Offering
	for i := range 20 {
		cores := int64(2 << (i % 6))
		offs = append(offs, capacity.Offering{Type: fmt.Sprintf("t%d", i), Resources: capacity.Resources{MilliCPU: cores * 1000,
			Memory: cores * int64(2+i%3*2) * ttGi}, PricePerHour: float64(cores) / 10 * (1 + float64(i%5)/20)})
	}
	pending := func(n int) []capacity.Pending {
		var out []capacity.Pending
		for i := range 10 {
			out = append(out, capacity.Pending{Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) * ttGi}, Count: n})
		}
		return out
	}
	for _, max := range []int{1000, 9_000_000} {
		cfg := tideConfig(t, capacity.Elastic(0, max), offs)
		p := NewTide(cfg)
		bytes := func(n int) (Decision, uint64) {
			in := Input{Now: tideT0, State: waited, Pressure: capacity.Pressure{Pending: pending(n)}}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			d := p.Decide(in)
			runtime.ReadMemStats(&after)
			return d, after.TotalAlloc - before.TotalAlloc
		}
		d, big := bytes(100_000_000)
		_, small := bytes(1000)
		t.Logf("max %d: desired %d, %d launches, %d KB for 10^9 instances, %d KB for 10^4", max, d.Desired, len(d.Launch), big>>10, small>>10)
		if d.Desired != max && max < 1_000_000 {
			t.Errorf("desired %d, want the max %d", d.Desired, max)
		}
		if big > 10<<20 {
			t.Errorf("%d bytes allocated for 10^9 instances, want under 10 MB", big)
		}
		total := 0
		for _, l := range d.Launch {
			total += l.Count
		}
		if total != d.Desired {
			t.Errorf("launches for %d nodes, desired %d", total, d.Desired)
		}
	}
}
