package capacity

import "testing"

// TestCountedInstances: an entry standing for Count instances counts as
// Count in Inflight and gives back one instance's shape from Each, so a
// report with one entry per group says what one entry per instance says.
func TestCountedInstances(t *testing.T) {
	shape := Resources{MilliCPU: 500, Memory: 3 << 30, GPUs: 1, Extended: map[string]int64{"fpga": 2}}
	tests := []struct {
		name    string
		running []Instance
		want    int
	}{
		{"none", nil, 0},
		{"one entry, no count", []Instance{{Requests: shape}}, 1},
		{"count 1", []Instance{{Requests: shape, Count: 1}}, 1},
		{"count 7", []Instance{{Requests: shape.Scale(7), Count: 7}}, 7},
		{"daemons do not count", []Instance{{Requests: shape.Scale(3), Count: 3, Daemon: true}, {Requests: shape, Count: 0}}, 1},
		{"mixed", []Instance{{Requests: shape.Scale(4), Count: 4}, {Requests: shape}, {Requests: shape.Scale(2), Count: 2}}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Pressure{Nodes: []Node{{ID: "a", Running: tt.running}, {ID: "b", Running: tt.running}}}
			if got := p.Inflight(); got != 2*tt.want {
				t.Errorf("Inflight = %d, want %d", got, 2*tt.want)
			}
			for _, in := range tt.running {
				if got := in.Each(); !got.Equal(shape) {
					t.Errorf("Each of %+v = %+v, want %+v", in, got, shape)
				}
			}
		})
	}
}
