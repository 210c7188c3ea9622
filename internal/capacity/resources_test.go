package capacity

import "testing"

func TestWorkShare(t *testing.T) {
	node := Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 4}
	for _, tc := range []struct {
		name string
		r, c Resources
		want float64
	}{
		{"cpu dominates", Resources{MilliCPU: 4000, Memory: 4 << 30}, node, 0.5},
		{"gpu dominates", Resources{MilliCPU: 1000, GPUs: 3}, node, 0.75},
		{"over capacity is capped", Resources{MilliCPU: 16000}, node, 1},
		{"a dimension the node lacks", Resources{GPUs: 1}, Resources{MilliCPU: 8000}, 1},
		{"nothing asked", Resources{}, node, 0},
	} {
		if got := WorkShare(tc.r, tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
