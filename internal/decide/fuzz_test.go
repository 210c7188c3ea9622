package decide

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/validate"
)

// FuzzSnapshot feeds arbitrary bytes to the snapshot reader and checks the
// properties the issue asks for, not only that nothing panics:
//
//   - a refused snapshot gets one error that names the snapshot and a field
//     (or says the input is empty);
//   - an accepted snapshot holds no negative count, no amount larger than
//     any machine, and instances that fit their node;
//   - decided by the skyward, target-tracking, utilization and tide policies and
//     one step of the reconciler, desired stays within [min, max], no busy
//     or protected machine is drained or marked, nothing is provisioned
//     while a call is in flight, and the view left for the next step is
//     valid again.
//
// The seed corpus (testdata/fuzz/FuzzSnapshot and the shipped examples) is
// replayed by the default go test.
func FuzzSnapshot(f *testing.F) {
	f.Add([]byte(snapshot))
	f.Add([]byte(controllerSnapshot))
	for _, pattern := range []string{"../../examples/decide/*.json", "../../examples/decide/steps/*.json"} {
		files, _ := filepath.Glob(pattern)
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			if steps, err := SplitSteps(name, data); err == nil {
				for _, st := range steps {
					f.Add(st.Data)
				}
			} else {
				f.Add(data)
			}
		}
	}
	nodes := capacity.Elastic(1, 8)
	policies := []policy.Config{
		{Policy: policy.Skyward, Nodes: nodes, SlotsPerNode: 2},
		{Policy: policy.TargetTracking, Nodes: nodes, Offerings: []capacity.Offering{{Type: "m5", PricePerHour: 0.1,
			Resources: capacity.Resources{MilliCPU: 2000, Memory: 8 << 30}}}},
		{Policy: policy.Utilization, Nodes: nodes, Offerings: []capacity.Offering{{Type: "g8", PricePerHour: 1,
			Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}}},
		{Policy: policy.Tide, Nodes: nodes, Offerings: []capacity.Offering{
			{Type: "c8", PricePerHour: 0.4, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}},
			{Type: "g8", PricePerHour: 2, Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			msg := err.Error()
			if msg != validate.ErrEmpty.Error() && !strings.HasPrefix(msg, "snapshot: ") {
				t.Fatalf("error does not name the snapshot and field: %q", msg)
			}
			if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "runtime error") {
				t.Fatalf("error leaks a crash: %q", msg)
			}
			return
		}
		checkSnapshot(t, &s)
		for _, pc := range policies {
			for _, protect := range []bool{false, true} {
				in := Input{Pool: "fuzz", Policy: pc, Reconcile: reconcile.Config{Nodes: nodes, ProtectFirstNode: protect}, Interval: 15 * time.Second}
				if pc.Policy == policy.Utilization {
					in.Reconcile.ScaleDownDelay = 10 * time.Minute
				}
				res, err := Decide(in, s)
				if err != nil {
					if s.Controller == nil || !strings.HasPrefix(err.Error(), "snapshot: controller: ") {
						t.Fatalf("%s: Decide refused a valid snapshot: %v", pc.Policy, err)
					}
					continue // a view the reconciler cannot be in (desired outside the bounds, ...)
				}
				if res.Desired < nodes.Min || res.Desired > nodes.Max {
					t.Fatalf("%s: desired %d outside %s", pc.Policy, res.Desired, nodes)
				}
				if res.Controller != nil {
					checkPlan(t, &s, in, res.Controller)
				}
			}
		}
	})
}

func checkSnapshot(t *testing.T, s *Snapshot) {
	t.Helper()
	if s.Desired < 0 || s.Time.IsZero() || s.State.LowDatapoints < 0 {
		t.Fatalf("accepted an invalid snapshot: %+v", s)
	}
	within := func(r capacity.Resources) bool {
		return !r.Negative() && r.MilliCPU <= validate.MaxCores*1000 && r.Memory <= validate.MaxMemoryMB<<20 && r.GPUs <= validate.MaxGPUs
	}
	for _, p := range s.Pending {
		if p.Count < 0 || !within(p.Requests) || p.Requests.IsZero() {
			t.Fatalf("accepted a bad pending group: %+v", p)
		}
	}
	for _, n := range s.Nodes {
		if n.Ordinal < 0 || !within(n.Resources) || !fits(n) {
			t.Fatalf("accepted a bad node: %+v", n)
		}
	}
}

func checkPlan(t *testing.T, s *Snapshot, in Input, p *Plan) {
	t.Helper()
	busy := map[int]bool{}
	for _, n := range s.nodes(in.Pool, in.Policy.Offerings) {
		busy[n.Ordinal] = n.Busy()
	}
	replaced := map[int]string{}
	for _, m := range p.View.Machines {
		if m.Replacing != "" {
			replaced[m.Ordinal] = m.Replacing
		}
	}
	inFlight := s.Controller.Provision != nil && (s.Controller.Provision.Outcome == "" || s.Controller.Provision.Outcome == OutcomeInFlight)
	for _, a := range p.Actions {
		for _, id := range a.Nodes {
			if id < 0 {
				t.Fatalf("action on a negative ordinal: %+v", a)
			}
			// A replaced node drains whatever runs there (its restartable
			// work moves, a repaired node's is lost already); the
			// protected first node only for a repair.
			r := replaced[id]
			if (a.Kind == "drain" || a.Kind == "mark") && (busy[id] && r == "" || in.Reconcile.ProtectFirstNode && id == 0 && r != "repair") {
				t.Fatalf("%s of busy or protected node %d: %+v", a.Kind, id, p.Actions)
			}
		}
		if a.Kind == "provision" && inFlight {
			t.Fatalf("provision while a call is in flight: %+v", p.Actions)
		}
		if a.Kind == "provision" && len(a.Nodes) > in.Reconcile.Nodes.Max {
			t.Fatalf("provision of %d nodes above max %d", len(a.Nodes), in.Reconcile.Nodes.Max)
		}
	}
	if err := errors.Join(p.View.validate("view")...); err != nil {
		t.Fatalf("the view left for the next step is invalid: %v\n%+v", err, p.View)
	}
	if !p.NextTick.After(s.Time) {
		t.Fatalf("next tick %s is not after the step %s", p.NextTick, s.Time)
	}
}

// FuzzSteps replays a fuzzed step after a valid first one (seeded with the
// shipped walkthroughs): a refused step is named in the error, and every
// decided step keeps desired within the bounds and leaves a valid view.
func FuzzSteps(f *testing.F) {
	files, _ := filepath.Glob("../../examples/decide/steps/*.json")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		steps, err := SplitSteps(name, data)
		if err != nil {
			f.Fatal(err)
		}
		for _, st := range steps[1:] {
			f.Add(st.Data)
		}
	}
	f.Add([]byte(`{"time": "2026-01-01T00:00:20Z", "controller": {"provision": {"outcome": "some", "created": [9]}}}`))
	f.Add([]byte(`{"time": "2025-01-01T00:00:00Z"}`))
	nodes := capacity.Elastic(1, 8)
	in := Input{Pool: "fuzz", Policy: policy.Config{Policy: policy.Skyward, Nodes: nodes, SlotsPerNode: 2},
		Reconcile: reconcile.Config{Nodes: nodes, ProtectFirstNode: true}, Interval: 15 * time.Second}
	first := Step{Name: "first", Data: []byte(controllerSnapshot)}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := RunSteps(in, []Step{first, {Name: "second", Data: data}})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "second: ") {
				t.Fatalf("error does not name the step: %q", err)
			}
			return
		}
		for _, r := range res {
			if r.Desired < nodes.Min || r.Desired > nodes.Max {
				t.Fatalf("%s: desired %d outside %s", r.Name, r.Desired, nodes)
			}
			if r.Controller == nil {
				t.Fatalf("%s: the controller view was lost", r.Name)
			}
			if err := errors.Join(r.Controller.View.validate("view")...); err != nil {
				t.Fatalf("%s: invalid view: %v", r.Name, err)
			}
		}
	})
}
