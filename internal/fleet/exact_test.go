package fleet

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestShortfallSaturates: clusters that each need math.MaxInt32 machines of
// one profile leave a shortfall of math.MaxInt32, not a sum wrapped into a
// negative count (which the coordinator would ignore), and deciding them
// takes no time or memory that grows with the counts.
func TestShortfallSaturates(t *testing.T) {
	cat := testCatalog(t, 1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := NewShard(cat, Config{}, now)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []ClusterCapacityNeeds
	for c := ClusterID(1); c <= 3; c++ {
		msgs = append(msgs, ClusterCapacityNeeds{Cluster: c, Needs: []Need{{Profile: 0, Count: math.MaxInt32, Priority: 7}}})
	}
	if _, err := s.Decide(now, msgs...); err != nil {
		t.Fatal(err)
	}
	sf := s.Shortfalls()
	if len(sf) != 1 || sf[0].Count != math.MaxInt32 {
		t.Fatalf("shortfalls %+v, want one of %d", sf, math.MaxInt32)
	}
	allocs := testing.AllocsPerRun(20, func() {
		now = now.Add(time.Second)
		if _, err := s.Decide(now, msgs...); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 64 {
		t.Errorf("%.0f allocations per decision of 3 × 2^31 needed machines", allocs)
	}
}

// TestNeedsRefusedNamingTheField: the cluster needs follow the same rules
// as every other input (internal/validate).
func TestNeedsRefusedNamingTheField(t *testing.T) {
	cat := testCatalog(t, 1)
	msg := ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Profile: 0, Count: -1, Priority: -2, InterruptionPenalty: math.NaN()}}}
	err := msg.Validate(cat)
	for _, want := range []string{"needs[0].count: must not be negative, got -1", "needs[0].priority: must not be negative, got -2",
		"needs[0].interruption_penalty: must be a finite non-negative number, got NaN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}
