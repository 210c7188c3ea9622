package scheduler

import (
	"slices"
	"testing"
	"time"
)

// TestHeldInstanceWaits: a pending instance with a NotBefore in the future
// is not placed, says why, reserves nothing, and still counts as queued; at
// NotBefore it is placed like any other. The instance behind it is not
// blocked.
func TestHeldInstanceWaits(t *testing.T) {
	ws := []Worker{wk("a", 4, 8, 0)}
	held := with(inst("held", 2, 1, 0), func(i *Instance) {
		i.NotBefore, i.Held = now.Add(time.Minute), "held: fence of w1"
		i.QueuedAt = now.Add(-time.Hour) // starved: would reserve if it were not held
	})
	next := inst("next", 1, 1, 0)
	res := Place(ws, nil, []Instance{held, next}, Config{ReserveAfter: time.Second}, now)
	if got := render(res.Assignments); !slices.Equal(got, []string{"next@a"}) {
		t.Fatalf("assignments %v, want next only", got)
	}
	if res.Waiting["held"] != "held: fence of w1" || len(res.Reserved) != 0 {
		t.Fatalf("waiting %q, reserved %v", res.Waiting["held"], res.Reserved)
	}
	pr := res.Pressure[""]
	if q := pr.Queued(); q != 1 {
		t.Fatalf("queued %d, want the held instance counted", q)
	}
	res = Place(ws, nil, []Instance{held, next}, Config{}, now.Add(time.Minute))
	if got := render(res.Assignments); !slices.Equal(got, []string{"held@a", "next@a"}) {
		t.Fatalf("at not-before: %v", got)
	}
}
