package controller_test

import (
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
)

// TestHeldCountsBootingMachines: Held sums the offering of every machine
// the controller holds, those still booting included, so a pool limit
// counts a purchase from the moment its machines are created. Booting names
// the offering of each machine created and not joined, and is empty (not
// nil) once they joined.
func TestHeldCountsBootingMachines(t *testing.T) {
	e := newEnv(t, setup{})
	if h := e.ctl.Held(); h.Nodes != 0 || h.CostPerHour != 0 {
		t.Fatalf("held before anything: %+v", h)
	}
	e.ctl.SetDesired(policy.Decision{Desired: 3, Launch: []capacity.Launch{{Offering: e.cfg.Offerings[0].Name(), Count: 3}},
		Reason: policy.NewReason("test", "test")})
	e.mustTick()
	booting := e.ctl.Held()
	launched := e.ctl.Booting()
	e.tickUntil(3, 20)
	h := e.ctl.Held()
	want := e.cfg.Offerings[0]
	if h.Nodes != 3 || !h.Resources.Equal(want.Resources.Scale(3)) || h.CostPerHour < 3*want.PricePerHour-1e-9 ||
		h.CostPerHour > 3*want.PricePerHour+1e-9 {
		t.Fatalf("held %+v, want 3 x %s", h, want.Name())
	}
	if booting.Nodes != 3 {
		t.Fatalf("held while booting %+v, want the 3 machines", booting)
	}
	if len(launched) != 3 || launched[0] != want.Name() {
		t.Fatalf("booting %v, want 3 x %s", launched, want.Name())
	}
	if b := e.ctl.Booting(); b == nil || len(b) != 0 {
		t.Fatalf("booting after the joins: %v, want none (not nil)", b)
	}
}
