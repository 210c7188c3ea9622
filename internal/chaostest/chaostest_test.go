package chaostest

import "testing"

func TestSize(t *testing.T) {
	t.Setenv("TIDE_CHAOS", "")
	if n, full := Size(t, 3); n != 3 || full {
		t.Fatalf("unset: got %d, %v; want 3, false", n, full)
	}
	t.Setenv("TIDE_CHAOS", "100")
	if n, full := Size(t, 3); n != 100 || !full {
		t.Fatalf("100: got %d, %v; want 100, true", n, full)
	}
}

func TestSeed(t *testing.T) {
	t.Setenv("TIDE_CHAOS_SEED", "42")
	if s := Seed(t); s != 42 {
		t.Fatalf("got %d, want 42", s)
	}
	t.Setenv("TIDE_CHAOS_SEED", "")
	if s := Seed(t); s == 0 {
		t.Fatal("unset: got seed 0, want the clock's nanoseconds")
	}
}

// fatalTB records Fatalf instead of stopping the goroutine.
type fatalTB struct {
	testing.TB
	failed bool
}

func (f *fatalTB) Helper()               {}
func (f *fatalTB) Fatalf(string, ...any) { f.failed = true }

func TestBadValuesFail(t *testing.T) {
	for _, v := range []string{"0", "-1", "x"} {
		t.Setenv("TIDE_CHAOS", v)
		f := &fatalTB{TB: t}
		Size(f, 1)
		if !f.failed {
			t.Errorf("TIDE_CHAOS=%q accepted", v)
		}
	}
	t.Setenv("TIDE_CHAOS_SEED", "-5")
	f := &fatalTB{TB: t}
	Seed(f)
	if !f.failed {
		t.Error("TIDE_CHAOS_SEED=-5 accepted")
	}
}
