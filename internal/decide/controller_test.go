package decide

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

const controllerSnapshot = `{
  "time": "2026-01-01T00:00:10Z",
  "desired": 3,
  "pending": [],
  "controller": {
    "last_tick": "2026-01-01T00:00:00Z",
    "machines": [
      {"ordinal": 0, "state": "ready"},
      {"ordinal": 1, "state": "ready", "running": [{"requests": {"cpu": "1"}}]},
      {"ordinal": 2, "state": "draining", "running": [{"requests": {"cpu": "1"}}]}
    ]
  }
}`

func controllerInput(nodes capacity.NodeSpec) Input {
	return Input{
		Pool:      "p",
		Policy:    policy.Config{Policy: policy.Skyward, Nodes: nodes, SlotsPerNode: 2},
		Reconcile: reconcile.Config{Nodes: nodes, ProtectFirstNode: true},
		Interval:  15 * time.Second,
	}
}

func shorts(p *Plan) []string {
	out := make([]string, len(p.Actions))
	for i, a := range p.Actions {
		out[i] = a.Short()
	}
	return out
}

// A draining node that runs work again gets its drain aborted (seed 002's
// termination protection), whatever the policy wants.
func TestPlanAbortsDrainOfBusyNode(t *testing.T) {
	s, err := Parse([]byte(strings.Replace(controllerSnapshot, `"desired": 3`, `"desired": 2`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Decide(controllerInput(capacity.Elastic(1, 4)), s)
	if err != nil {
		t.Fatal(err)
	}
	got := shorts(res.Controller)
	if res.Desired != 2 || len(got) == 0 || got[0] != "abort-drain 2" || !strings.Contains(res.Controller.Actions[0].Reason, "became busy") {
		t.Fatalf("desired %d, actions %+v, want abort-drain 2 because it became busy", res.Desired, res.Controller.Actions)
	}
	if res.Controller.Ticked {
		t.Error("ticked 10 s after the last tick with a 15 s interval")
	}
}

// The reconciler never provisions while a call is in flight, and the view
// it leaves carries the call to the next step.
func TestPlanNoSecondProvisionInFlight(t *testing.T) {
	snap := strings.Replace(controllerSnapshot, `"machines"`, `"provision": {"asked": [3]}, "machines"`, 1)
	snap = strings.Replace(snap, `"pending": []`, `"pending": [{"requests": {"cpu": "1"}, "count": 8}]`, 1)
	s, err := Parse([]byte(snap))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Decide(controllerInput(capacity.Elastic(1, 8)), s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Desired <= 4 {
		t.Fatalf("desired %d, want the policy to ask for more", res.Desired)
	}
	for _, a := range res.Controller.Actions {
		if a.Kind == "provision" {
			t.Fatalf("provisioned while a call is in flight: %q", shorts(res.Controller))
		}
	}
	if p := res.Controller.View.Provision; p == nil || !slices.Equal(p.Asked, []int{3}) || p.Outcome != OutcomeInFlight {
		t.Fatalf("view provision %+v, want [3] in flight", p)
	}
}

func TestControllerViewRefusedNamingTheField(t *testing.T) {
	for _, tt := range []struct{ old, new, want string }{
		{`"ordinal": 1, "state": "ready"`, `"ordinal": 1, "state": "up"`, "controller.machines[1].state: want one of"},
		{`"ordinal": 1, "state": "ready"`, `"ordinal": 0, "state": "ready"`, "controller.machines[1].ordinal: duplicate ordinal 0"},
		{`"ordinal": 1, "state": "ready"`, `"ordinal": -1, "state": "ready"`, "controller.machines[1].ordinal: must not be negative"},
		{`"ordinal": 1, "state": "ready"`, `"ordinal": 1, "state": "marked"`, "controller.machines[1].marked_at: set exactly when"},
		{`"machines"`, `"provision": {"asked": [1]}, "machines"`, "controller.provision.asked: ordinal 1 is also a machine"},
		{`"machines"`, `"provision": {"asked": [5], "outcome": "most"}, "machines"`, "controller.provision.outcome: want in_flight"},
		{`"machines"`, `"provision": {"asked": [5], "outcome": "some", "created": [6]}, "machines"`, "controller.provision.created: ordinal 6 was not asked for"},
		{`"machines"`, `"provision": {"asked": []}, "machines"`, "controller.provision.asked: must name"},
	} {
		snap := strings.Replace(controllerSnapshot, tt.old, tt.new, 1)
		if _, err := Parse([]byte(snap)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Parse = %v, want %q", tt.new, err, tt.want)
		}
	}
	// A desired count outside the bounds cannot be the reconciler's.
	s, err := Parse([]byte(controllerSnapshot))
	if err != nil {
		t.Fatal(err)
	}
	s.Desired = 9
	if _, err := Decide(controllerInput(capacity.Elastic(1, 4)), s); err == nil || !strings.Contains(err.Error(), "desired: 9 is outside the bounds") {
		t.Fatalf("Decide = %v", err)
	}
}

func TestEmptyInputSaysSo(t *testing.T) {
	for _, in := range []string{"", "  \n"} {
		if _, err := Parse([]byte(in)); err == nil || err.Error() != "is empty" {
			t.Errorf("Parse(%q) = %v", in, err)
		}
	}
	if _, err := SplitSteps("s.json", []byte("[]")); err == nil || !strings.Contains(err.Error(), "holds no steps") {
		t.Errorf("SplitSteps([]) = %v", err)
	}
}
