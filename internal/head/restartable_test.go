package head

import (
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
