package reconcile

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// TestProvisionCarriesThePurchase: a DesiredChanged with a purchase makes
// the next Provision ask for those offerings, in order; the launches of ids
// a provision did not create go back to the plan and are asked for again,
// and a lower desired count drops the plan.
func TestProvisionCarriesThePurchase(t *testing.T) {
	p, err := New(Config{Nodes: capacity.Elastic(0, 10)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	p.Step(now, Tick{})
	g8 := capacity.Launch{Offering: "g8/on-demand", Count: 2, Fallback: []string{"g8/spot"}}
	g2 := capacity.Launch{Offering: "g2/on-demand", Count: 1}
	acts := p.Step(now, DesiredChanged{Desired: 4, Launch: []capacity.Launch{g8, g2}})
	prov := findProvision(t, acts)
	if !slices.Equal(prov.IDs, []NodeID{0, 1, 2, 3}) || len(prov.Launch) != 2 || prov.Launch[0].Count != 2 || prov.Launch[1].Count != 1 {
		t.Fatalf("provision %v", prov)
	}
	if got := prov.String(); got != "provision 0 1 2 3 as 2 x g8/on-demand, 1 x g2/on-demand" {
		t.Fatalf("String = %q", got)
	}
	// Ids 1 and 2 were not created: one g8 and the g2 go back to the plan.
	acts = p.Step(now, Provisioned{IDs: []NodeID{0, 3}})
	prov = findProvision(t, acts)
	if !slices.Equal(prov.IDs, []NodeID{1, 2}) || FormatLaunch(prov.Launch) != "1 x g8/on-demand, 1 x g2/on-demand" ||
		!slices.Equal(prov.Launch[0].Fallback, []string{"g8/spot"}) {
		t.Fatalf("retry %v", prov)
	}
	// A failure gives them all back; a lower desired count drops them.
	p.Step(now, ProvisionFailed{Err: "boom"})
	if d := p.Describe(); !strings.Contains(d, "plan: 1 x g8/on-demand, 1 x g2/on-demand") {
		t.Fatalf("describe:\n%s", d)
	}
	p.Step(now, DesiredChanged{Desired: 2})
	if d := p.Describe(); strings.Contains(d, "plan:") {
		t.Fatalf("plan kept after scale-down:\n%s", d)
	}
}

func findProvision(t *testing.T, acts []Action) Provision {
	t.Helper()
	for _, a := range acts {
		if p, ok := a.(Provision); ok {
			return p
		}
	}
	t.Fatalf("no provision in %v", acts)
	return Provision{}
}
