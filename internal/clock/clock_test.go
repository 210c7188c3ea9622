package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	tk := f.NewTicker(3 * time.Second)
	if f.Waiters() != 3 {
		t.Fatalf("Waiters = %d", f.Waiters())
	}
	f.Advance(1500 * time.Millisecond)
	select {
	case got := <-b.C():
		if !got.Equal(start.Add(time.Second)) {
			t.Fatalf("b fired at %v", got)
		}
	default:
		t.Fatal("b did not fire")
	}
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	if !a.Stop() || a.Stop() {
		t.Fatal("Stop should report true once")
	}
	f.Advance(5 * time.Second) // now 6.5s: the ticker fired at 3s and 6s; one tick is buffered.
	if got := <-tk.C(); !got.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("tick at %v", got)
	}
	if f.Now() != start.Add(6500*time.Millisecond) {
		t.Fatalf("Now = %v", f.Now())
	}
	a.Reset(time.Second)
	f.Advance(time.Second)
	if got := <-a.C(); !got.Equal(start.Add(7500 * time.Millisecond)) {
		t.Fatalf("reset timer fired at %v", got)
	}
	tk.Stop()
}

func TestRealClock(t *testing.T) {
	var c Clock = Real{}
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Fatal("stop")
	}
	c.NewTicker(time.Hour).Stop()
}
