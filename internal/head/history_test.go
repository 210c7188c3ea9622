package head

import (
	"math"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// TestHistoryIsBounded: a pool that changes every second keeps at most
// historyCap samples, numbered in order, and its cost over the last 24 h
// counts only the last 24 h.
func TestHistoryIsBounded(t *testing.T) {
	hs := newHistory()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 30 h at one change per second, at $2/h.
	n := 30 * 3600
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Second)
		hs.record(now, []httpapi.PoolJSON{{Name: "p", Desired: i % 7, Queued: i}}, map[string]float64{"p": 2})
	}
	now := t0.Add(time.Duration(n-1) * time.Second)
	got := hs.get(now, nil, 0)
	if len(got) != 1 {
		t.Fatalf("%d pools", len(got))
	}
	h := got[0]
	if len(h.Samples) != historyCap {
		t.Errorf("%d samples kept, want %d", len(h.Samples), historyCap)
	}
	if last := h.Samples[len(h.Samples)-1].Seq; last != int64(n) {
		t.Errorf("last seq %d, want %d", last, n)
	}
	if math.Abs(h.CostLast24h-48) > 0.05 {
		t.Errorf("cost over the last 24 h = %.3f, want 48 (24 h at $2)", h.CostLast24h)
	}
	if h.CostPerHour != 2 {
		t.Errorf("cost per hour %v, want 2", h.CostPerHour)
	}
	// since returns only the newer samples.
	if more := hs.get(now, nil, int64(n-3))[0].Samples; len(more) != 3 {
		t.Errorf("since=n-3 returned %d samples, want 3", len(more))
	}
}

// TestHistoryQuietPool: an unchanged pool gains a sample only every
// historyQuiet, so its chart's time axis moves without filling the history.
func TestHistoryQuietPool(t *testing.T) {
	hs := newHistory()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 600 {
		hs.record(t0.Add(time.Duration(i)*time.Second), []httpapi.PoolJSON{{Name: "p", Ready: 1}}, nil)
	}
	if got := len(hs.get(t0, nil, 0)[0].Samples); got != 20 {
		t.Errorf("%d samples over 10 quiet minutes, want 20 (one per %s)", got, historyQuiet)
	}
}
