package binpack

import (
	"math"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

const gi = int64(1) << 30

func res(cpu, memGi, gpus int64) capacity.Resources {
	return capacity.Resources{MilliCPU: cpu, Memory: memGi * gi, GPUs: gpus}
}

func withExt(r capacity.Resources, name string, v int64) capacity.Resources {
	r = r.Clone()
	if r.Extended == nil {
		r.Extended = map[string]int64{}
	}
	r.Extended[name] = v
	return r
}

func TestNodesFor(t *testing.T) {
	node := res(4000, 16, 0)
	tests := []struct {
		name   string
		req    capacity.Resources
		count  int
		node   capacity.Resources
		want   int
		wantOK bool
	}{
		{"cpu bound", res(1000, 1, 0), 9, node, 3, true},               // 4 per node
		{"memory bound", res(500, 5, 0), 7, node, 3, true},             // 3 per node (16/5)
		{"exact multiple", res(1000, 4, 0), 8, node, 2, true},          // 4 per node
		{"one item", res(4000, 16, 0), 1, node, 1, true},               // fills a node exactly
		{"zero count", res(1000, 1, 0), 0, node, 0, true},              // nothing to place
		{"negative count", res(1000, 1, 0), -3, node, 0, true},         // nothing to place
		{"too big cpu", res(4001, 1, 0), 1, node, 0, false},            // never fits
		{"gpu on cpu node", res(100, 1, 1), 1, node, 0, false},         // node has no GPU
		{"gpu bound", res(1000, 8, 1), 5, res(32000, 256, 2), 3, true}, // 2 per node
		{"zero request", capacity.Resources{}, 1000, node, 1, true},    // all on one node
		{"negative request", res(-1, 1, 0), 1, node, 0, false},         // invalid
		{"extended", withExt(res(100, 0, 0), "fpga", 1), 5, withExt(node, "fpga", 2), 3, true},
		{"extended missing", withExt(res(100, 0, 0), "fpga", 1), 5, node, 0, false},
		{"huge count", res(1, 0, 0), math.MaxInt, res(1, 0, 0), math.MaxInt, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NodesFor(tt.req, tt.count, tt.node)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("NodesFor(%v, %d, %v) = %d, %v; want %d, %v", tt.req, tt.count, tt.node, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestLowerBound(t *testing.T) {
	node := res(4000, 16, 0)
	tests := []struct {
		name   string
		groups []capacity.Pending
		node   capacity.Resources
		want   int
		wantOK bool
	}{
		{"empty", nil, node, 0, true},
		{"zero counts", []capacity.Pending{{Requests: res(1000, 1, 0)}}, node, 0, true},
		{"single group is exact", []capacity.Pending{{Requests: res(1000, 5, 0), Count: 7}}, node, 3, true},
		{"total cpu", []capacity.Pending{
			{Requests: res(3000, 1, 0), Count: 1},
			{Requests: res(1000, 1, 0), Count: 5},
		}, node, 2, true}, // 8 cores over 4-core nodes
		{"big items cannot share", []capacity.Pending{
			{Requests: res(2100, 1, 0), Count: 2},
			{Requests: res(2500, 1, 0), Count: 1},
		}, node, 3, true}, // each takes more than half the cpu; totals alone say 2
		{"memory dimension", []capacity.Pending{
			{Requests: res(100, 6, 0), Count: 2},
			{Requests: res(100, 5, 0), Count: 3},
		}, node, 2, true}, // 27Gi over 16Gi nodes
		{"zero request needs a node", []capacity.Pending{{Count: 3}}, node, 1, true},
		{"unfit group ignored", []capacity.Pending{
			{Requests: res(8000, 1, 0), Count: 1},
			{Requests: res(1000, 1, 0), Count: 5},
		}, node, 2, false},
		{"gpu", []capacity.Pending{{Requests: res(1000, 1, 1), Count: 9}}, res(32000, 256, 8), 2, true},
		{"overflow-safe", []capacity.Pending{
			{Requests: capacity.Resources{Memory: math.MaxInt64 / 2}, Count: math.MaxInt / 2},
			{Requests: capacity.Resources{Memory: math.MaxInt64 / 2}, Count: math.MaxInt / 2},
		}, capacity.Resources{Memory: math.MaxInt64}, math.MaxInt / 2, true}, // 128-bit totals
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := LowerBound(tt.groups, tt.node)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("LowerBound = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
