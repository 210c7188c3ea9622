package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// sliceSource hands groups in order, skipping failed shapes.
type sliceSource struct {
	groups []Group
	next   int
	failed map[int]bool
}

func (s *sliceSource) Next() (Group, bool) {
	for s.next < len(s.groups) {
		g := s.groups[s.next]
		s.next++
		if !s.failed[g.Shape] {
			return g, true
		}
	}
	return Group{}, false
}

func (s *sliceSource) Failed(shape int) { s.failed[shape] = true }

// indexScenario draws workers (some cordoned), what already runs on them
// (one exclusive instance per worker holding CPU, memory and GPU indices,
// as the simulator hands it), and pending groups.
func indexScenario(r *rand.Rand) ([]Worker, []Instance, []Group) {
	shapes := []capacity.Resources{
		{MilliCPU: 500, Memory: 1 << 30},
		{MilliCPU: 2000, Memory: 8 << 30},
		{MilliCPU: 4000, Memory: 2 << 30},
		{MilliCPU: 1000, Memory: 4 << 30, GPUs: 1},
		{MilliCPU: 8000, Memory: 64 << 30, GPUs: 2},
		{MilliCPU: 16000, Memory: 128 << 30, GPUs: 8},
		{MilliCPU: 30000, Memory: 100 << 30},
	}
	offers := []capacity.Resources{
		{MilliCPU: 32000, Memory: 128 << 30},
		{MilliCPU: 64000, Memory: 512 << 30, GPUs: 8},
		{MilliCPU: 16000, Memory: 64 << 30, GPUs: 2},
	}
	nw := 1 + r.IntN(40)
	var workers []Worker
	var placed []Instance
	for i := range nw {
		c := offers[r.IntN(len(offers))]
		w := Worker{Name: "w" + strconv.Itoa(i), Pool: "p", Ordinal: i, Capacity: c, Schedulable: r.IntN(10) > 0, Cordoned: r.IntN(10) == 0}
		workers = append(workers, w)
		if r.IntN(3) > 0 {
			used := capacity.Resources{MilliCPU: r.Int64N(c.MilliCPU + 1), Memory: r.Int64N(c.Memory + 1)}
			var idx []int
			for g := range int(c.GPUs) {
				if r.IntN(2) == 0 {
					idx = append(idx, g)
				}
			}
			used.GPUs = int64(len(idx))
			placed = append(placed, Instance{ID: "run-" + w.Name, Pool: "p", Requests: used, Exclusive: true, GPUIndices: idx, Worker: w.Name})
		}
	}
	// Workers are listed by ordinal, as the simulator lists them: Place
	// breaks a tie of reservation candidates by that order.
	ng := r.IntN(30)
	base := time.Unix(1000, 0)
	var groups []Group
	for i := range ng {
		s := r.IntN(len(shapes))
		groups = append(groups, Group{ID: i, Shape: s, Requests: shapes[s], Count: 1 + r.IntN(20),
			QueuedAt: base.Add(time.Duration(r.IntN(300)) * time.Second)})
	}
	return workers, placed, groups
}

// TestIndexPlacesLikePlace: for random workers, loads and pending groups,
// PlaceGroups over an Index assigns exactly what Place assigns to the same
// instances handed one by one, in the same order, and reserves the same
// worker.
func TestIndexPlacesLikePlace(t *testing.T) {
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 7))
		workers, placed, groups := indexScenario(r)
		cfg := Config{ReserveAfter: time.Duration(r.IntN(3)) * 100 * time.Second}
		now := time.Unix(1300, 0)

		var pending []Instance
		groupOf := map[string]int{}
		for _, g := range groups {
			for k := range g.Count {
				id := fmt.Sprintf("g%d-%d", g.ID, k)
				groupOf[id] = g.ID
				pending = append(pending, Instance{ID: id, Pool: "p", Requests: g.Requests, Exclusive: true, QueuedAt: g.QueuedAt})
			}
		}
		want := Place(workers, placed, pending, cfg, now)
		var wantSeq []string
		for _, a := range want.Assignments {
			wantSeq = append(wantSeq, fmt.Sprintf("g%d@%s", groupOf[a.InstanceID], a.Worker))
		}
		wantRes := ""
		for w, id := range want.Reserved {
			wantRes = fmt.Sprintf("%s for g%d", w, groupOf[id])
		}

		x := NewIndex()
		byName := map[string]int{}
		for i, w := range workers {
			byName[w.Name] = i
		}
		used := map[string]capacity.Resources{}
		for _, p := range placed {
			used[p.Worker] = p.Requests
		}
		for i, w := range workers {
			if !w.Schedulable || w.Cordoned {
				continue
			}
			x.Set(i, w.Ordinal, w.Capacity, w.Capacity.Sub(used[w.Name]))
		}
		got := x.PlaceGroups(&sliceSource{groups: groups, failed: map[int]bool{}}, cfg, now, nil)
		var gotSeq []string
		for _, a := range got.Assignments {
			for range a.Count {
				gotSeq = append(gotSeq, fmt.Sprintf("g%d@%s", a.Group, workers[a.Worker].Name))
			}
		}
		gotRes := ""
		if got.Reserved >= 0 {
			gotRes = fmt.Sprintf("%s for g%d", workers[got.Reserved].Name, got.ReservedFor)
		}
		if !slices.Equal(wantSeq, gotSeq) || wantRes != gotRes {
			t.Fatalf("seed %d: Place assigned\n%v (reserved %q)\nPlaceGroups assigned\n%v (reserved %q)", seed, wantSeq, wantRes, gotSeq, gotRes)
		}
		// The index now holds each worker's free capacity after placement,
		// and the reserved worker is back in it.
		if x.Len() != x.tree.Len() {
			t.Fatalf("seed %d: %d entries, %d in the tree", seed, x.Len(), x.tree.Len())
		}
	}
}

// BenchmarkIndexPlaceGroups places 1,000 groups of 1 to 64 small
// instances on 10,000 partly used CPU workers through the index (compare
// BenchmarkPlace, which scans every worker per instance).
func BenchmarkIndexPlaceGroups(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	c := capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}
	var groups []Group
	total := 0
	for i := range 1000 {
		n := 1 + r.IntN(64)
		total += n
		groups = append(groups, Group{ID: i, Shape: i % 7, Requests: capacity.Resources{MilliCPU: int64(250 * (1 + i%7)), Memory: int64(1+i%5) << 30}, Count: n})
	}
	frees := make([]capacity.Resources, 10000)
	for i := range frees {
		frees[i] = capacity.Resources{MilliCPU: r.Int64N(c.MilliCPU + 1), Memory: r.Int64N(c.Memory + 1)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		x := NewIndex()
		for i, f := range frees {
			x.Set(i, i, c, f)
		}
		b.StartTimer()
		x.PlaceGroups(&sliceSource{groups: groups, failed: map[int]bool{}}, Config{}, time.Unix(0, 0), nil)
	}
	b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "instances/s")
}

// TestIndexBestMatchesScan: over random Sets and Removes on up to 3,000
// workers (GPU levels, empty workers, extended resources), Best returns
// the worker a scan of every worker ranks first: the fewest free GPUs at
// or above the request's, busy before empty, the request's direction
// order, the least free room, the lowest ordinal, the lowest id; and the
// index's order (reserveFor's walk) is that order.
func TestIndexBestMatchesScan(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		x := NewIndex()
		n := 1 + r.IntN(3000)
		caps := []capacity.Resources{
			{MilliCPU: 32000, Memory: 128 << 30},
			{MilliCPU: 64000, Memory: 512 << 30, GPUs: 8},
			{MilliCPU: 16000, Memory: 64 << 30, GPUs: 2, Extended: map[string]int64{"fpga": 2}},
		}
		draw := func(c capacity.Resources) capacity.Resources {
			if r.IntN(8) == 0 {
				return c
			}
			f := capacity.Resources{MilliCPU: r.Int64N(c.MilliCPU + 1), Memory: r.Int64N(c.Memory + 1), GPUs: r.Int64N(c.GPUs + 1)}
			if c.Extended != nil {
				f.Extended = map[string]int64{"fpga": r.Int64N(3)}
			}
			return f
		}
		for step := range 4000 {
			id := r.IntN(n)
			switch r.IntN(6) {
			case 0:
				x.Remove(id)
			default:
				c := caps[id%len(caps)]
				x.Set(id, n-id, c, draw(c))
			}
			if step%5 != 0 {
				continue
			}
			req := capacity.Resources{MilliCPU: r.Int64N(20000), Memory: r.Int64N(100 << 30)}
			switch r.IntN(4) {
			case 0:
				req.GPUs = r.Int64N(4)
			case 1:
				req.Extended = map[string]int64{"fpga": 1}
			}
			rank := directionRanks(req)
			type cand struct {
				gpus        int64
				empty       bool
				rank        int8
				room        int64
				ordinal, id int
			}
			better := func(a, b cand) bool {
				switch {
				case a.gpus != b.gpus:
					return a.gpus < b.gpus
				case a.empty != b.empty:
					return !a.empty
				case a.rank != b.rank:
					return a.rank < b.rank
				case a.room != b.room:
					return a.room < b.room
				case a.ordinal != b.ordinal:
					return a.ordinal < b.ordinal
				}
				return a.id < b.id
			}
			var best cand
			found := false
			for id, e := range x.entries {
				if e.free.GPUs < req.GPUs || !cpuMem(req).Fits(e.free) {
					continue
				}
				k := e.key
				c := cand{k.gpus, k.empty, rank[k.dir], k.room, k.ordinal, id}
				if !found || better(c, best) {
					best, found = c, true
				}
			}
			got, ok := x.Best(req)
			if ok != found || (ok && got != best.id) {
				t.Fatalf("seed %d step %d: Best(%v) = %d, %v; a scan ranks %d, %v first", seed, step, req, got, ok, best.id, found)
			}
			// reserveFor's pass over dense picks what the walk in the
			// tree's order picks (without extended resources).
			if len(req.Extended) == 0 {
				if a, b := x.reserveForDense(req), x.reserveForWalk(req); a != b {
					t.Fatalf("seed %d step %d: reserveFor(%v): dense %+v, walk %+v", seed, step, req, a, b)
				}
			}
		}
		var keys []ixKey
		x.tree.Ascend(func(k ixKey) bool { keys = append(keys, k); return true })
		if len(keys) != x.Len() || x.tree.Len() != x.Len() {
			t.Fatalf("seed %d: %d keys walked, %d in the tree, %d entries", seed, len(keys), x.tree.Len(), x.Len())
		}
		for i := 1; i < len(keys); i++ {
			a, b := keys[i-1], keys[i]
			if !(a.gpus < b.gpus || a.gpus == b.gpus && (!a.empty && b.empty || a.empty == b.empty && (a.dir < b.dir || a.dir == b.dir && inClass(&a, &b)))) {
				t.Fatalf("seed %d: keys out of order at %d: %+v before %+v", seed, i, a, b)
			}
		}
	}
}
