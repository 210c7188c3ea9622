package binpack

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

func offering(typ string, kind capacity.Kind, r capacity.Resources, price float64) capacity.Offering {
	return capacity.Offering{Type: typ, Kind: kind, Resources: r, PricePerHour: price}
}

func spot(typ string, r capacity.Resources, price, prob, penalty float64) capacity.Offering {
	o := offering(typ, capacity.Spot, r, price)
	o.InterruptionProbability, o.InterruptionPenalty = prob, penalty
	return o
}

func TestPack(t *testing.T) {
	small := offering("small", capacity.OnDemand, res(2000, 8, 0), 1)
	large := offering("large", capacity.OnDemand, res(8000, 32, 0), 3.5)
	gpu8 := offering("g8", capacity.OnDemand, res(32000, 256, 8), 24.5)
	tests := []struct {
		name      string
		groups    []capacity.Pending
		offerings []capacity.Offering
		free      []capacity.Resources
		maxNew    int
		// want: new nodes per offering index, items per existing node,
		// unplaced per group, cost.
		wantCounts   []int
		wantExisting []int
		wantUnplaced []int
		wantCost     float64
	}{
		{
			name:       "big node while it fills, small node for the tail",
			groups:     []capacity.Pending{{Requests: res(1000, 1, 0), Count: 9}},
			offerings:  []capacity.Offering{small, large},
			maxNew:     -1,
			wantCounts: []int{1, 1}, wantUnplaced: []int{0}, wantCost: 4.5,
		},
		{
			name:       "only small nodes when the backlog is small",
			groups:     []capacity.Pending{{Requests: res(1000, 1, 0), Count: 3}},
			offerings:  []capacity.Offering{small, large},
			maxNew:     -1,
			wantCounts: []int{2, 0}, wantUnplaced: []int{0}, wantCost: 2,
		},
		{
			name:   "spot when its effective cost is lower",
			groups: []capacity.Pending{{Requests: res(1000, 1, 0), Count: 4}},
			offerings: []capacity.Offering{small,
				spot("small", res(2000, 8, 0), 0.3, 0.1, 2)}, // 0.3 + 0.2 = 0.5 < 1
			maxNew:     -1,
			wantCounts: []int{0, 2}, wantUnplaced: []int{0}, wantCost: 1,
		},
		{
			name:   "on-demand when the penalty makes spot dearer",
			groups: []capacity.Pending{{Requests: res(1000, 1, 0), Count: 4}},
			offerings: []capacity.Offering{small,
				spot("small", res(2000, 8, 0), 0.3, 0.1, 10)}, // 0.3 + 1 = 1.3 > 1
			maxNew:     -1,
			wantCounts: []int{2, 0}, wantUnplaced: []int{0}, wantCost: 2,
		},
		{
			name:         "existing free space first",
			groups:       []capacity.Pending{{Requests: res(1000, 1, 0), Count: 5}},
			offerings:    []capacity.Offering{small},
			free:         []capacity.Resources{res(500, 4, 0), res(2000, 2, 0)},
			maxNew:       -1,
			wantCounts:   []int{2}, // 2 on the second existing node, 3 left → 2 small nodes
			wantExisting: []int{0, 2}, wantUnplaced: []int{0}, wantCost: 2,
		},
		{
			name:         "overcommitted existing node counts as full",
			groups:       []capacity.Pending{{Requests: res(100, 1, 0), Count: 1}},
			offerings:    []capacity.Offering{small},
			free:         []capacity.Resources{{MilliCPU: 1000, Memory: -gi}},
			maxNew:       -1,
			wantCounts:   []int{1},
			wantExisting: []int{0}, wantUnplaced: []int{0}, wantCost: 1,
		},
		{
			name:       "cap on new nodes",
			groups:     []capacity.Pending{{Requests: res(1000, 1, 0), Count: 10}},
			offerings:  []capacity.Offering{small},
			maxNew:     2,
			wantCounts: []int{2}, wantUnplaced: []int{6}, wantCost: 2,
		},
		{
			name:         "cap zero uses existing space only",
			groups:       []capacity.Pending{{Requests: res(1000, 1, 0), Count: 3}},
			offerings:    []capacity.Offering{small},
			free:         []capacity.Resources{res(2000, 8, 0)},
			maxNew:       0,
			wantCounts:   []int{0},
			wantExisting: []int{2}, wantUnplaced: []int{1}, wantCost: 0,
		},
		{
			name: "gpu shape on a cpu-only pool is unplaced, the rest packs",
			groups: []capacity.Pending{
				{Requests: res(1000, 8, 1), Count: 3},
				{Requests: res(1000, 1, 0), Count: 2},
			},
			offerings:  []capacity.Offering{small},
			maxNew:     -1,
			wantCounts: []int{1}, wantUnplaced: []int{3, 0}, wantCost: 1,
		},
		{
			name: "gpu shapes open gpu nodes; cpu work fills their leftovers",
			groups: []capacity.Pending{
				{Requests: res(4000, 32, 1), Count: 10},
				{Requests: res(1000, 1, 0), Count: 4},
			},
			offerings:  []capacity.Offering{small, gpu8},
			maxNew:     -1,
			wantCounts: []int{0, 2}, wantUnplaced: []int{0, 0}, wantCost: 49,
		},
		{
			name:       "dominated offering is never opened",
			groups:     []capacity.Pending{{Requests: res(1000, 1, 0), Count: 1}},
			offerings:  []capacity.Offering{offering("dear", capacity.OnDemand, res(2000, 8, 0), 2), offering("cheap-big", capacity.OnDemand, res(4000, 16, 0), 1)},
			maxNew:     -1,
			wantCounts: []int{0, 1}, wantUnplaced: []int{0}, wantCost: 1,
		},
		{
			name: "cpu-heavy and memory-heavy items share nodes",
			groups: []capacity.Pending{
				{Requests: res(3000, 2, 0), Count: 2},
				{Requests: res(500, 12, 0), Count: 2},
			},
			offerings:  []capacity.Offering{offering("m", capacity.OnDemand, res(4000, 16, 0), 1)},
			maxNew:     -1,
			wantCounts: []int{2}, wantUnplaced: []int{0, 0}, wantCost: 2,
		},
		{
			name: "extended resources are a dimension",
			groups: []capacity.Pending{
				{Requests: withExt(res(100, 1, 0), "fpga", 1), Count: 3},
			},
			offerings:  []capacity.Offering{small, offering("f", capacity.OnDemand, withExt(res(2000, 8, 0), "fpga", 2), 3)},
			maxNew:     -1,
			wantCounts: []int{0, 2}, wantUnplaced: []int{0}, wantCost: 6,
		},
		{
			name: "zero and negative counts and negative requests",
			groups: []capacity.Pending{
				{Requests: res(1000, 1, 0), Count: 0},
				{Requests: res(1000, 1, 0), Count: -2},
				{Requests: res(-1000, 1, 0), Count: 2},
				{Count: 5},
			},
			offerings:  []capacity.Offering{small},
			maxNew:     -1,
			wantCounts: []int{1}, wantUnplaced: []int{0, 0, 2, 0}, wantCost: 1,
		},
		{
			name:         "no offerings",
			groups:       []capacity.Pending{{Requests: res(1000, 1, 0), Count: 2}},
			maxNew:       -1,
			wantCounts:   []int{},
			wantUnplaced: []int{2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Pack(tt.groups, tt.offerings, WithFree(tt.free), WithMaxNew(tt.maxNew))
			if err := checkPack(tt.groups, tt.offerings, tt.free, tt.maxNew, r); err != nil {
				t.Fatal(err)
			}
			if got := r.Counts(len(tt.offerings)); !slices.Equal(got, tt.wantCounts) {
				t.Errorf("new nodes per offering = %v, want %v", got, tt.wantCounts)
			}
			var existing []int
			for _, n := range r.Existing {
				existing = append(existing, n.Items)
			}
			if !slices.Equal(existing, tt.wantExisting) {
				t.Errorf("items on existing nodes = %v, want %v", existing, tt.wantExisting)
			}
			if !slices.Equal(r.Unplaced, tt.wantUnplaced) {
				t.Errorf("unplaced = %v, want %v", r.Unplaced, tt.wantUnplaced)
			}
			if math.Abs(r.Cost-tt.wantCost) > 1e-9 {
				t.Errorf("cost = %v, want %v", r.Cost, tt.wantCost)
			}
		})
	}
}

// TestPackFirstFitOrder pins the order: larger items first, each into the
// lowest-numbered node that fits, so a small item fills an earlier node's gap.
func TestPackFirstFitOrder(t *testing.T) {
	groups := []capacity.Pending{
		{Requests: res(1000, 1, 0), Count: 2}, // small, placed last
		{Requests: res(3000, 1, 0), Count: 2}, // large, placed first
	}
	node := offering("n", capacity.OnDemand, res(4000, 16, 0), 1)
	r := Pack(groups, []capacity.Offering{node})
	if err := checkPack(groups, []capacity.Offering{node}, nil, -1, r); err != nil {
		t.Fatal(err)
	}
	want := [][]Placement{{{Group: 1, Count: 1}, {Group: 0, Count: 1}}, {{Group: 1, Count: 1}, {Group: 0, Count: 1}}}
	if len(r.New) != len(want) {
		t.Fatalf("opened %d nodes, want %d", len(r.New), len(want))
	}
	for i := range want {
		if !slices.Equal(r.New[i].Placements, want[i]) {
			t.Errorf("node %d placements = %v, want %v", i, r.New[i].Placements, want[i])
		}
	}
}

// TestPackDoesNotModifyInputs guards the purity promise.
func TestPackDoesNotModifyInputs(t *testing.T) {
	groups := []capacity.Pending{{Requests: withExt(res(1000, 1, 0), "x", 1), Count: 3}}
	offs := []capacity.Offering{offering("n", capacity.OnDemand, withExt(res(2000, 4, 0), "x", 2), 1)}
	free := []capacity.Resources{withExt(res(1000, 1, 0), "x", 1)}
	g0, o0, f0 := groups[0].Requests.Clone(), offs[0].Resources.Clone(), free[0].Clone()
	Pack(groups, offs, WithFree(free))
	if !groups[0].Requests.Equal(g0) || groups[0].Count != 3 || !offs[0].Resources.Equal(o0) || !free[0].Equal(f0) {
		t.Fatal("Pack modified its arguments")
	}
}

func TestTreeFirst(t *testing.T) {
	// Bin 0 has cpu, bin 1 memory, bin 2 both: the root's component-wise
	// max fits a (cpu, memory) request, but only bin 2 really does.
	tr := newTree(2, 1)
	for i, v := range [][]int64{{8, 0}, {0, 8}, {8, 8}} {
		tr.set(i, v)
	}
	for _, tt := range []struct {
		req  []int64
		want int
	}{
		{[]int64{1, 1}, 2},
		{[]int64{1, 0}, 0},
		{[]int64{0, 1}, 1},
		{[]int64{9, 0}, -1},
	} {
		if got := tr.first(tt.req); got != tt.want {
			t.Errorf("first(%v) = %d, want %d", tt.req, got, tt.want)
		}
	}
	// Growing past the initial 16 leaves keeps earlier bins.
	for i := 3; i < 40; i++ {
		tr.set(i, []int64{0, 0})
	}
	tr.set(39, []int64{20, 20})
	if got := tr.first([]int64{10, 10}); got != 39 {
		t.Errorf("after growth first = %d, want 39", got)
	}
	if got := tr.first([]int64{1, 1}); got != 2 {
		t.Errorf("after growth first = %d, want 2", got)
	}
}

// TestPackTreeBuildUnchanged: the one-pass tree over the existing free
// space, with the bins that fit no item left out, gives the same packing
// as the tree built bin by bin with every bin, on random pools where most
// nodes are full or nearly so.
func TestPackTreeBuildUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 21))
	offs := []capacity.Offering{
		offering("c32", capacity.OnDemand, res(32000, 128, 0), 1.5),
		offering("g8", capacity.OnDemand, res(96000, 768, 8), 24),
	}
	for trial := range 300 {
		free := randomFree(rng, rng.IntN(400))
		var groups []capacity.Pending
		for range 1 + rng.IntN(6) {
			groups = append(groups, capacity.Pending{Requests: res(100*(1+rng.Int64N(80)), 1+rng.Int64N(16), rng.Int64N(2)), Count: 1 + rng.IntN(300)})
		}
		maxNew := rng.IntN(20) - 1
		fast := Pack(groups, offs, WithFree(free), WithMaxNew(maxNew))
		slowTree = true
		slow := Pack(groups, offs, WithFree(free), WithMaxNew(maxNew))
		slowTree = false
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("trial %d: the one-pass tree packs differently:\n%+v\nbin by bin:\n%+v", trial, fast, slow)
		}
	}
}

// randomFree returns n nodes' free space: a quarter full, a quarter nearly
// full, the rest anything up to a 32-CPU node with a few GPUs.
func randomFree(rng *rand.Rand, n int) []capacity.Resources {
	var free []capacity.Resources
	for range n {
		switch rng.IntN(4) {
		case 0:
			free = append(free, res(0, 0, 0))
		case 1:
			free = append(free, res(rng.Int64N(500), rng.Int64N(128), 0))
		default:
			free = append(free, res(rng.Int64N(32001), rng.Int64N(129), rng.Int64N(3)))
		}
	}
	return free
}

// TestPackTwiceMatchesPack: packTwice's two packings equal Pack's with
// WithMaxNew(0) and with the cap, on 400 random pools with existing free
// space (full, partly used, empty) and caps from none to a few nodes.
func TestPackTwiceMatchesPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 23))
	offs := []capacity.Offering{
		offering("c32", capacity.OnDemand, res(32000, 128, 0), 1.5),
		offering("c8", capacity.OnDemand, res(8000, 32, 0), 0.4),
		offering("g8", capacity.OnDemand, res(96000, 768, 8), 24),
	}
	for trial := range 400 {
		free := randomFree(rng, rng.IntN(300))
		var groups []capacity.Pending
		for range 1 + rng.IntN(8) {
			r := res(100*(1+rng.Int64N(80)), 1+rng.Int64N(16), rng.Int64N(2))
			if rng.IntN(10) == 0 {
				r = res(200000, 1, 0) // fits no offering
			}
			groups = append(groups, capacity.Pending{Requests: r, Count: rng.IntN(300)})
		}
		maxNew := rng.IntN(20) - 1
		pre, full := packTwice(groups, offs, free)
		if want := Pack(groups, offs, WithFree(free), WithMaxNew(0)); !reflect.DeepEqual(pre, want) {
			t.Fatalf("trial %d: the first packing differs from Pack's with no new node:\n%+v\nwant\n%+v", trial, pre, want)
		}
		got := full(maxNew)
		if want := Pack(groups, offs, WithFree(free), WithMaxNew(maxNew)); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: the second packing differs from Pack's with at most %d new nodes:\n%+v\nwant\n%+v", trial, maxNew, got, want)
		}
	}
}
