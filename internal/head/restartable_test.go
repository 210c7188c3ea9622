package head

import (
	"context"
	"testing"
)

// TestRestartableIsAnOptionalExtension: `restartable` is an optional field
// of the submit request; an instance without it reads back without the
// field (PyLet's shape unchanged), one with it reads back restartable.
func TestRestartableIsAnOptionalExtension(t *testing.T) {
	e := newEnv(t, nil)
	plain := e.submit(obj{"command": "echo hi"})
	var raw obj
	if code := e.do("GET", "/instances/"+plain, nil, &raw); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	if _, ok := raw["restartable"]; ok {
		t.Fatalf("instance submitted without restartable carries the field: %v", raw)
	}
	moving := e.submit(obj{"command": "echo hi", "restartable": true})
	if in := e.instance(moving); !in.Restartable {
		t.Fatalf("restartable instance reads back %+v", in)
	}
	if code := e.do("POST", "/instances", obj{"command": "echo hi", "restartable": "yes"}, nil); code != 422 && code != 400 {
		t.Fatalf("restartable \"yes\": %d, want a 4xx", code)
	}
}

// TestMoveOffPlacesOnPlannedWorker: the instances MoveOff moves go to the
// worker consolidation planned for them (its targets) when they fit
// there, not where the placement score would put them; one without a
// target is placed by the score.
func TestMoveOffPlacesOnPlannedWorker(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.register("w1", 0)
	one := obj{"cpu_cores": 1}
	m1 := e.submit(obj{"command": "x", "restartable": true, "resource_requirements": one})
	m2 := e.submit(obj{"command": "x", "restartable": true, "resource_requirements": one})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d, want 2", n)
	}
	e.register("w2", 0)
	e.register("w3", 0)
	// w2 keeps 4 free cores, w3 2: for a one-core request the score
	// prefers w2 (its free CPU and memory point nearer the request's way).
	e.submit(obj{"command": "x", "target_worker": "w2", "resource_requirements": obj{"cpu_cores": 4}})
	e.submit(obj{"command": "x", "target_worker": "w3", "resource_requirements": obj{"cpu_cores": 6}})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d fillers, want 2", n)
	}
	moved, err := e.h.MoveOff(ctx, "w1", map[string]string{m1: "w3"})
	if err != nil || len(moved) != 2 {
		t.Fatalf("MoveOff: %v %v", moved, err)
	}
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d moved instances, want 2", n)
	}
	for id, want := range map[string]string{m1: "w3", m2: "w2"} {
		in := e.instance(id)
		if in.AssignedTo == nil || *in.AssignedTo != want || in.Attempt != 2 {
			t.Errorf("%s: attempt %d on %v, want attempt 2 on %s", id, in.Attempt, in.AssignedTo, want)
		}
	}
	e.h.mu.Lock()
	left := len(e.h.prefer)
	e.h.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d planned destinations kept after placement", left)
	}
}
