package submit

import (
	"strings"
	"testing"
	"time"
)

func TestCheckPriorityAndGang(t *testing.T) {
	for _, tc := range []struct {
		body     string
		replicas int
		gang     *GangSpec
		prio     int
		err      string
	}{
		{body: `{"command":"x"}`, replicas: 1},
		{body: `{"command":"x","priority":-3}`, replicas: 1, prio: -3},
		{body: `{"command":"x","priority":2000000000}`, err: "priority must be between"},
		{body: `{"command":"x","replicas":4,"gang":true,"name":"job"}`, replicas: 4, gang: &GangSpec{Name: "job", Size: 4}},
		{body: `{"command":"x","replicas":4,"gang":false}`, replicas: 4},
		{body: `{"command":"x","gang":{"name":"t","size":3,"max_wait":"90s"}}`, replicas: 3,
			gang: &GangSpec{Name: "t", Size: 3, MaxWait: 90 * time.Second}},
		{body: `{"command":"x","replicas":2,"gang":{"size":3}}`, err: "differs from replicas"},
		{body: `{"command":"x","gang":{"size":2,"max_wait":"soon"}}`, err: "max_wait"},
		{body: `{"command":"x","gang":{"size":2,"color":"red"}}`, err: "unknown field"},
		{body: `{"command":"x","gang":{"name":"a/b","size":2}}`, err: "gang.name"},
		{body: `{"command":"x","daemon":true,"gang":true}`, err: "daemon"},
	} {
		s, err := Parse([]byte(tc.body))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%s: err %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if s.Replicas != tc.replicas || s.Priority != tc.prio || (s.Gang == nil) != (tc.gang == nil) ||
			(s.Gang != nil && *s.Gang != *tc.gang) {
			t.Fatalf("%s: replicas %d priority %d gang %+v", tc.body, s.Replicas, s.Priority, s.Gang)
		}
	}
}
