package sim

import (
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/trace"
)

// TestWindow: --from/--to keep the jobs submitted in the window, start
// those running at its start as the initial load with what is left of
// their run, and end at its end what still runs.
func TestWindow(t *testing.T) {
	h := time.Hour
	r := capacity.Resources{GPUs: 1}
	jobs := []trace.Job{
		{ID: "before", Submit: 0, Duration: h, Requests: r},                    // ends before the window
		{ID: "across", Submit: 30 * time.Minute, Duration: 2 * h, Requests: r}, // runs at from
		{ID: "inside", Submit: 3 * h, Duration: h, Requests: r},
		{ID: "past-to", Submit: 4 * h, Duration: 10 * h, Requests: r},
		{ID: "censored", Submit: 5 * h, Duration: time.Minute, Censored: true, Requests: r},
		{ID: "after", Submit: 6 * h, Duration: h, Requests: r},
	}
	got, left := window(jobs, 20*h, 2*h, 6*h)
	want := []struct {
		id       string
		submit   time.Duration
		duration time.Duration
		pre      bool
	}{
		{"across", 0, 30 * time.Minute, true},
		{"inside", h, h, false},
		{"past-to", 2 * h, 2 * h, false},
		{"censored", 3 * h, h, false},
	}
	if left != 2 || len(got) != len(want) {
		t.Fatalf("kept %d (left %d): %+v", len(got), left, got)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.id || g.Submit != w.submit || g.Duration != w.duration || g.Preexisting != w.pre || g.Censored {
			t.Errorf("job %d: got %s submit %v duration %v preexisting %t censored %t, want %+v", i, g.ID, g.Submit, g.Duration, g.Preexisting, g.Censored, w)
		}
	}
}

// TestHoldLevel: a level series' missing bins hold the level before them
// (no change); a rate's are left empty (no demand).
func TestHoldLevel(t *testing.T) {
	m := time.Minute
	bins := []trace.Bin{{Start: 0, Width: m, Value: 3}, {Start: m, Width: m, Value: 5}, {Start: 4 * m, Width: m, Value: 1}}
	got := holdLevel(bins)
	want := []float64{3, 5, 5, 5, 1}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i, v := range want {
		if got[i].Start != time.Duration(i)*m || got[i].Value != v {
			t.Errorf("bin %d: %+v, want start %v value %v", i, got[i], time.Duration(i)*m, v)
		}
	}
	if whole := holdLevel(bins[:2]); len(whole) != 2 {
		t.Errorf("a series without gaps changed: %+v", whole)
	}
}
