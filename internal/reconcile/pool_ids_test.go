package reconcile

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDescendingMatchesSorted: the walk from the highest id down yields
// what ranging over the sorted ids backward does, on dense and sparse sets,
// and stops when told.
func TestDescendingMatchesSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		s := idSet{}
		span := 1 + rng.IntN(2000)
		for range rng.IntN(300) {
			s.add(NodeID(rng.IntN(span)))
		}
		want := slices.Clone(s.sorted())
		slices.Reverse(want)
		var got []NodeID
		for id := range s.descending() {
			got = append(got, id)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: descending %v, want %v", trial, got, want)
		}
		if len(want) > 2 {
			got = got[:0]
			for id := range s.descending() {
				if got = append(got, id); len(got) == 2 {
					break
				}
			}
			if !slices.Equal(got, want[:2]) {
				t.Fatalf("trial %d: stopped early at %v, want %v", trial, got, want[:2])
			}
		}
	}
}
