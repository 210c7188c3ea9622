package fleetpb_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/fleetpb"
)

func TestNeeds(t *testing.T) {
	cat, err := fleet.NewCatalog([]fleet.OfferingSpec{{Provider: "p", Profile: "gpu",
		Offering: capacity.Offering{Type: "g8", PricePerHour: 1, Resources: capacity.Resources{GPUs: 8}}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		need *fleetv1.Need
		want string
	}{
		{"valid", &fleetv1.Need{Profile: "gpu", Count: 2, Priority: 7, InterruptionPenalty: 5, DrainTimeMs: 1500,
			Topology: "rack-1"}, ""},
		{"unknown profile", &fleetv1.Need{Profile: "tpu", Count: 1}, `needs[0].profile: unknown profile "tpu"`},
		{"negative count", &fleetv1.Need{Profile: "gpu", Count: -1}, "needs[0].count: must not be negative"},
		{"negative drain", &fleetv1.Need{Profile: "gpu", DrainTimeMs: -1}, "needs[0].drain_time_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fleetpb.Needs(cat, 9, &fleetv1.ClusterCapacityNeeds{Cluster: "c", Needs: []*fleetv1.Need{tt.need}})
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := fleet.Need{Profile: 0, Count: 2, Priority: 7, InterruptionPenalty: 5, DrainTime: 1500 * time.Millisecond,
				Topology: "rack-1"}
			if got.Cluster != 9 || len(got.Needs) != 1 || got.Needs[0] != want {
				t.Errorf("got %+v, want cluster c9 with %+v", got, want)
			}
		})
	}
	if _, err := fleetpb.Needs(cat, 9, &fleetv1.ClusterCapacityNeeds{Cluster: "c",
		Bootstrap: make([]byte, fleetpb.MaxBootstrap+1)}); err == nil || !strings.Contains(err.Error(), "needs.bootstrap") {
		t.Errorf("oversized bootstrap: %v", err)
	}
}

// TestCheckNeeds: the numbers of a needs message follow internal/validate's
// rules; a drain time past what a time.Duration holds is refused instead of
// wrapping into a negative (or small) duration.
func TestCheckNeeds(t *testing.T) {
	m := &fleetv1.ClusterCapacityNeeds{Cluster: "c", Needs: []*fleetv1.Need{
		{Profile: "gpu", Count: 2, Priority: 1, InterruptionPenalty: 3, DrainTimeMs: 1000},
		{Profile: "gpu", Count: -1, Priority: -1, InterruptionPenalty: math.Inf(1), DrainTimeMs: math.MaxInt64},
	}}
	err := fleetpb.CheckNeeds(m)
	for _, want := range []string{"needs[1].count: must not be negative", "needs[1].priority: must not be negative",
		"needs[1].interruption_penalty: must be a finite non-negative number, got +Inf", "needs[1].drain_time_ms: must be between 0 and"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckNeeds = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "needs[0]") {
		t.Errorf("CheckNeeds refused a good need: %v", err)
	}
}
