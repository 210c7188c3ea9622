package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const gi = int64(1) << 30

func wk(name string, cpu, memGi, gpus int64) Worker {
	return Worker{Name: name, Capacity: capacity.Resources{MilliCPU: cpu * 1000, Memory: memGi * gi, GPUs: gpus}, Schedulable: true}
}

func inst(id string, cpu, memGi, gpus int64) Instance {
	return Instance{ID: id, Requests: capacity.Resources{MilliCPU: cpu * 1000, Memory: memGi * gi, GPUs: gpus},
		Exclusive: true, QueuedAt: now}
}

func with(i Instance, f func(*Instance)) Instance { f(&i); return i }

// prefer sets i's preferred worker.
func prefer(i Instance, w string) Instance { i.PreferWorker = w; return i }

func placedOn(w string, i Instance, gpus ...int) Instance {
	i.Worker, i.GPUIndices = w, gpus
	return i
}

// render turns assignments into "id@worker[gpus]" sorted strings.
func render(as []Assignment) []string {
	var out []string
	for _, a := range as {
		s := a.InstanceID + "@" + a.Worker
		if len(a.GPUIndices) > 0 {
			s += fmt.Sprint(a.GPUIndices)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name    string
		workers []Worker
		placed  []Instance
		pending []Instance
		cfg     Config
		now     time.Time
		want    []string
		waiting map[string]string // id -> substring of reason
	}{
		{
			name:    "cpu is accounted (PyLet ignores it)",
			workers: []Worker{wk("w", 4, 16, 0)},
			pending: []Instance{inst("a", 3, 1, 0), inst("b", 2, 1, 0)},
			want:    []string{"a@w"},
			waiting: map[string]string{"b": "insufficient"},
		},
		{
			name:    "memory is accounted",
			workers: []Worker{wk("w", 16, 4, 0)},
			placed:  []Instance{placedOn("w", inst("r", 1, 3, 0))},
			pending: []Instance{inst("a", 1, 2, 0), inst("b", 1, 1, 0)},
			want:    []string{"b@w"},
		},
		{
			name:    "exclusive gpus: 2-gpu job fits, next 1-gpu job waits",
			workers: []Worker{wk("w", 16, 64, 2)},
			pending: []Instance{inst("a", 1, 1, 2), inst("b", 1, 1, 1)},
			want:    []string{"a@w[0 1]"},
			waiting: map[string]string{"b": "insufficient"},
		},
		{
			name:    "shared instance never lands on an exclusively held gpu",
			workers: []Worker{wk("w", 16, 64, 2)},
			placed:  []Instance{placedOn("w", inst("x", 1, 1, 1), 0)},
			pending: []Instance{
				with(inst("s2", 1, 1, 2), func(i *Instance) { i.Exclusive = false }),
				with(inst("s1", 1, 1, 1), func(i *Instance) { i.Exclusive = false }),
			},
			want: []string{"s1@w[1]"},
		},
		{
			name:    "exclusive prefers gpus without shared users but may join them",
			workers: []Worker{wk("w", 16, 64, 3)},
			placed: []Instance{placedOn("w", with(inst("store", 1, 1, 2), func(i *Instance) {
				i.Exclusive, i.Daemon = false, true
			}), 0, 1)},
			pending: []Instance{inst("a", 1, 1, 1), inst("b", 1, 1, 1)},
			want:    []string{"a@w[2]", "b@w[0]"},
		},
		{
			name:    "gpu_indices on a target worker",
			workers: []Worker{wk("w1", 16, 64, 4), wk("w2", 16, 64, 4)},
			placed:  []Instance{placedOn("w2", inst("x", 1, 1, 1), 1)},
			pending: []Instance{
				with(inst("held", 1, 1, 0), func(i *Instance) { i.TargetWorker, i.GPUIndices = "w2", []int{1, 2} }),
				with(inst("ok", 1, 1, 0), func(i *Instance) { i.TargetWorker, i.GPUIndices = "w2", []int{3, 2} }),
				with(inst("bad", 1, 1, 0), func(i *Instance) { i.TargetWorker, i.GPUIndices = "w1", []int{4} }),
			},
			want:    []string{"ok@w2[2 3]"},
			waiting: map[string]string{"held": "insufficient", "bad": "gpu index 4 does not exist"},
		},
		{
			name:    "target worker by name, offline or unknown target waits",
			workers: []Worker{wk("a", 4, 4, 0), wk("b", 4, 4, 0), {Name: "c", Capacity: capacity.CPU(8000)}},
			pending: []Instance{
				with(inst("x", 1, 1, 0), func(i *Instance) { i.TargetWorker = "b" }),
				with(inst("y", 1, 1, 0), func(i *Instance) { i.TargetWorker = "c" }),
				with(inst("z", 1, 1, 0), func(i *Instance) { i.TargetWorker = "gone" }),
			},
			want:    []string{"x@b"},
			waiting: map[string]string{"y": "not online", "z": "not registered"},
		},
		{
			name:    "a cordoned worker gets no new work, even as the best fit",
			workers: []Worker{with2(wk("tight", 2, 4, 0), func(w *Worker) { w.Cordoned = true }), wk("roomy", 16, 64, 0)},
			pending: []Instance{inst("a", 1, 1, 0)},
			want:    []string{"a@roomy"},
		},
		{
			name:    "an instance pinned to a cordoned worker waits",
			workers: []Worker{with2(wk("c", 4, 4, 0), func(w *Worker) { w.Cordoned = true }), wk("d", 4, 4, 0)},
			pending: []Instance{with(inst("x", 1, 1, 0), func(i *Instance) { i.TargetWorker = "c" })},
			want:    nil,
			waiting: map[string]string{"x": "cordoned"},
		},
		{
			name:    "no reservation on a cordoned worker",
			workers: []Worker{with2(wk("w1", 4, 16, 0), func(w *Worker) { w.Cordoned = true }), wk("w2", 4, 16, 0)},
			placed:  []Instance{placedOn("w1", inst("r1", 1, 1, 0)), placedOn("w2", inst("r2", 3, 1, 0))},
			pending: []Instance{inst("big", 4, 1, 0), inst("small", 1, 1, 0)},
			cfg:     Config{ReserveAfter: time.Minute},
			now:     now.Add(2 * time.Minute),
			want:    nil,
			waiting: map[string]string{"big": "reserved worker w2", "small": "insufficient"},
		},
		{
			name:    "backfill: a small instance overtakes a large one that does not fit",
			workers: []Worker{wk("w", 4, 16, 0)},
			placed:  []Instance{placedOn("w", inst("r", 2, 1, 0))},
			pending: []Instance{inst("big", 4, 1, 0), inst("small", 1, 1, 0)},
			want:    []string{"small@w"},
		},
		{
			name:    "starved head reserves a worker: no backfill onto it",
			workers: []Worker{wk("w", 4, 16, 0)},
			placed:  []Instance{placedOn("w", inst("r", 2, 1, 0))},
			pending: []Instance{inst("big", 4, 1, 0), inst("small", 1, 1, 0)},
			cfg:     Config{ReserveAfter: time.Minute},
			now:     now.Add(time.Minute),
			want:    nil,
			waiting: map[string]string{"big": "reserved worker w", "small": "insufficient"},
		},
		{
			name:    "reservation takes the closest worker, backfill continues elsewhere",
			workers: []Worker{wk("w1", 4, 16, 0), wk("w2", 4, 16, 0)},
			placed:  []Instance{placedOn("w1", inst("r1", 3, 1, 0)), placedOn("w2", inst("r2", 1, 1, 0))},
			pending: []Instance{inst("big", 4, 1, 0), inst("small", 1, 1, 0)},
			cfg:     Config{ReserveAfter: time.Minute},
			now:     now.Add(2 * time.Minute),
			want:    []string{"small@w1"},
			waiting: map[string]string{"big": "reserved worker w2"},
		},
		{
			name:    "best fit packs, and cpu work avoids gpu workers",
			workers: []Worker{wk("gpu", 32, 64, 8), wk("empty", 8, 32, 0), wk("half", 8, 32, 0)},
			placed:  []Instance{placedOn("half", inst("r", 4, 1, 0))},
			pending: []Instance{inst("a", 2, 1, 0), inst("g", 1, 1, 1)},
			want:    []string{"a@half", "g@gpu[0]"},
		},
		{
			// m1 runs CPU-heavy work (memory is what it has left), m2
			// memory-heavy work (CPU is). Ranking by free CPU alone put
			// the memory-heavy request on m2, stranding m1's memory.
			name:    "memory-heavy work goes where CPU-heavy work left memory, and the other way round",
			workers: []Worker{wk("m1", 32, 128, 0), wk("m2", 32, 128, 0)},
			placed:  []Instance{placedOn("m1", inst("r1", 16, 4, 0)), placedOn("m2", inst("r2", 20, 100, 0))},
			pending: []Instance{inst("mem", 2, 20, 0), inst("cpu", 8, 2, 0)},
			want:    []string{"cpu@m2", "mem@m1"},
		},
		{
			name:    "a busy worker before an empty one, even a looser fit",
			workers: []Worker{wk("empty", 8, 32, 0), wk("busy", 32, 128, 0)},
			placed:  []Instance{placedOn("busy", inst("r", 2, 8, 0))},
			pending: []Instance{inst("a", 2, 8, 0)},
			want:    []string{"a@busy"},
		},
		{
			// Consolidation planned "b1" for the moved instance: it goes
			// there though the score prefers "b2"; where the planned
			// worker has no room the score decides.
			name:    "a preferred worker wins where the instance fits",
			workers: []Worker{wk("b1", 32, 128, 0), wk("b2", 32, 128, 0)},
			placed:  []Instance{placedOn("b1", inst("r1", 2, 8, 0)), placedOn("b2", inst("r2", 28, 112, 0))},
			pending: []Instance{prefer(inst("a", 2, 8, 0), "b1"), prefer(inst("big", 26, 8, 0), "b2")},
			want:    []string{"a@b1", "big@b1"},
		},
		{
			name: "pools are separate",
			workers: []Worker{
				with2(wk("c", 8, 8, 0), func(w *Worker) { w.Pool = "cpu" }),
				with2(wk("g", 8, 8, 1), func(w *Worker) { w.Pool = "gpu" }),
			},
			pending: []Instance{
				with(inst("a", 1, 1, 1), func(i *Instance) { i.Pool = "cpu" }),
				with(inst("b", 1, 1, 1), func(i *Instance) { i.Pool = "gpu" }),
				with(inst("c", 1, 1, 0), func(i *Instance) { i.Pool = "none" }),
			},
			want:    []string{"b@g[0]"},
			waiting: map[string]string{"a": "needs 1 GPUs", "c": `no worker in pool "none"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.now
			if at.IsZero() {
				at = now
			}
			res := Place(tc.workers, tc.placed, tc.pending, tc.cfg, at)
			if got := render(res.Assignments); !slices.Equal(got, tc.want) {
				t.Fatalf("assignments %v, want %v", got, tc.want)
			}
			for id, sub := range tc.waiting {
				if !strings.Contains(res.Waiting[id], sub) {
					t.Errorf("waiting[%s] = %q, want it to contain %q", id, res.Waiting[id], sub)
				}
			}
		})
	}
}

func with2(w Worker, f func(*Worker)) Worker { f(&w); return w }

// TestLargeInstanceNotStarved drives cycles where small instances keep
// arriving: without reservations the large one never runs; with them it
// runs once the reserved worker drains.
func TestLargeInstanceNotStarved(t *testing.T) {
	for _, reserve := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("reserve=", reserve), func(t *testing.T) {
			workers := []Worker{wk("w1", 4, 64, 0), wk("w2", 4, 64, 0)}
			// Both workers start partly busy, so "big" (a whole worker) does not fit.
			placed := []Instance{placedOn("w1", inst("s-a", 1, 1, 0)), placedOn("w2", inst("s-b", 1, 1, 0))}
			big := inst("big", 4, 1, 0)
			pending := []Instance{big}
			ranBig := false
			seq := 0
			for cycle := 0; cycle < 20 && !ranBig; cycle++ {
				at := now.Add(time.Duration(cycle) * 30 * time.Second)
				// Every cycle two small instances arrive, and after placement the
				// oldest running one ends.
				for _, target := range []string{"w1", "w2"} { // spread: neither worker drains by itself
					seq++
					pending = append(pending, with(inst(fmt.Sprint("s", seq), 1, 1, 0), func(i *Instance) {
						i.QueuedAt, i.TargetWorker = at, target
					}))
				}
				res := Place(workers, placed, pending, Config{ReserveAfter: reserve}, at)
				done := map[string]bool{}
				for _, a := range res.Assignments {
					done[a.InstanceID] = true
					for _, p := range pending {
						if p.ID == a.InstanceID {
							placed = append(placed, placedOn(a.Worker, p))
						}
					}
					if a.InstanceID == "big" {
						ranBig = true
					}
				}
				pending = slices.DeleteFunc(pending, func(p Instance) bool { return done[p.ID] })
				checkCapacity(t, workers, placed)
				if len(placed) > 0 {
					placed = placed[1:]
				}
			}
			if ranBig != (reserve > 0) {
				t.Fatalf("big ran = %v with ReserveAfter %v", ranBig, reserve)
			}
		})
	}
}

func TestPressurePerPool(t *testing.T) {
	workers := []Worker{
		with2(wk("g0", 8, 32, 2), func(w *Worker) { w.Pool, w.Ordinal = "gpu", 0 }),
		with2(wk("g1", 8, 32, 2), func(w *Worker) { w.Pool, w.Ordinal, w.Schedulable = "gpu", 1, false }),
		with2(wk("g2", 8, 32, 2), func(w *Worker) { w.Pool, w.Offline, w.Schedulable = "gpu", true, false }),
	}
	gp := func(id string, gpus int64) Instance {
		return with(inst(id, 1, 1, gpus), func(i *Instance) { i.Pool = "gpu" })
	}
	daemon := with(gp("d", 1), func(i *Instance) { i.Exclusive, i.Daemon = false, true })
	res := Place(workers, []Instance{placedOn("g0", daemon, 0)}, []Instance{gp("a", 2), gp("b", 2), gp("c", 2), gp("e", 4)}, Config{}, now)
	pr := res.Pressure["gpu"]
	if len(pr.Nodes) != 2 || pr.Nodes[0].ID != "g0" || pr.Nodes[1].ID != "g1" || pr.Nodes[1].Ordinal != 1 {
		t.Fatalf("nodes = %+v", pr.Nodes)
	}
	if len(pr.Nodes[0].Running) != 2 || pr.Nodes[0].Running[0].Requests.GPUs != 0 || !pr.Nodes[0].Running[0].Daemon ||
		pr.Nodes[0].Running[1].Requests.GPUs != 2 {
		t.Fatalf("g0 running = %+v", pr.Nodes[0].Running)
	}
	want := []capacity.Pending{
		{Requests: capacity.Resources{MilliCPU: 1000, Memory: gi, GPUs: 2}, Count: 2},
		{Requests: capacity.Resources{MilliCPU: 1000, Memory: gi, GPUs: 4}, Count: 1},
	}
	if len(pr.Pending) != len(want) {
		t.Fatalf("pending = %+v", pr.Pending)
	}
	for i := range want {
		if !pr.Pending[i].Requests.Equal(want[i].Requests) || pr.Pending[i].Count != want[i].Count {
			t.Fatalf("pending[%d] = %+v, want %+v", i, pr.Pending[i], want[i])
		}
	}
	if pr.Queued() != 3 || pr.Inflight() != 1 || pr.BusyNodes() != 1 {
		t.Fatalf("queued %d inflight %d busy %d", pr.Queued(), pr.Inflight(), pr.BusyNodes())
	}
}

// checkCapacity holds invariant 1 and the GPU rules on a placement.
func checkCapacity(t *testing.T, workers []Worker, placed []Instance) {
	t.Helper()
	for _, w := range workers {
		var used capacity.Resources
		excl := map[int]int{}
		shared := map[int]bool{}
		for _, p := range placed {
			if p.Worker != w.Name {
				continue
			}
			used = used.Add(cpuMem(p.Requests))
			for _, g := range p.GPUIndices {
				if g >= int(w.Capacity.GPUs) {
					t.Fatalf("%s: gpu %d beyond %d", w.Name, g, w.Capacity.GPUs)
				}
				if p.Exclusive {
					excl[g]++
				} else {
					shared[g] = true
				}
			}
			if n := len(p.GPUIndices); int64(n) != p.Requests.GPUs && p.Requests.GPUs != 0 {
				t.Fatalf("%s got %d GPUs, asked %d", p.ID, n, p.Requests.GPUs)
			}
		}
		if !used.Fits(cpuMem(w.Capacity)) {
			t.Fatalf("worker %s over capacity: %s > %s", w.Name, used, w.Capacity)
		}
		for g, n := range excl {
			if n > 1 {
				t.Fatalf("worker %s gpu %d held exclusively %d times", w.Name, g, n)
			}
		}
	}
}

// TestPlaceInvariantsRandom checks capacity and GPU exclusivity over random
// inputs (seeded; the seed is printed on failure).
func TestPlaceInvariantsRandom(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		var workers []Worker
		for i := range 1 + r.IntN(8) {
			workers = append(workers, wk(fmt.Sprint("w", i), int64(1+r.IntN(16)), int64(1+r.IntN(64)), int64(r.IntN(5))))
		}
		var placed, pending []Instance
		for i := range r.IntN(60) {
			p := inst(fmt.Sprint("p", i), int64(r.IntN(4)), int64(r.IntN(8)), int64(r.IntN(3)))
			p.Exclusive = r.IntN(3) > 0
			if r.IntN(5) == 0 {
				p.TargetWorker = workers[r.IntN(len(workers))].Name
				if r.IntN(2) == 0 {
					p.GPUIndices = []int{r.IntN(4)}
					p.Requests.GPUs = 0
				}
			}
			pending = append(pending, p)
		}
		// Place in two rounds so the second one starts from a busy state.
		for round := 0; round < 2; round++ {
			res := Place(workers, placed, pending, Config{ReserveAfter: time.Second}, now.Add(time.Duration(round)*time.Hour))
			// Exclusive GPUs held before this round, then in assignment order:
			// a shared placement must never take one already held.
			excl := map[string]bool{}
			for _, p := range placed {
				if p.Exclusive {
					for _, g := range p.GPUIndices {
						excl[fmt.Sprint(p.Worker, "/", g)] = true
					}
				}
			}
			for _, a := range res.Assignments {
				for _, g := range a.GPUIndices {
					k := fmt.Sprint(a.Worker, "/", g)
					if !a.Exclusive && excl[k] {
						t.Fatalf("seed %d: shared %s on exclusive gpu %s", seed, a.InstanceID, k)
					}
					if a.Exclusive {
						excl[k] = true
					}
				}
				for j, p := range pending {
					if p.ID == a.InstanceID {
						placed = append(placed, placedOn(a.Worker, p, a.GPUIndices...))
						pending = slices.Delete(pending, j, j+1)
						break
					}
				}
			}
			checkCapacity(t, workers, placed)
		}
	}
}

// BenchmarkPlace10kOn1k is the target: 10,000 pending instances on
// 1,000 workers at >= 20,000 placements/s.
func BenchmarkPlace10kOn1k(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var workers []Worker
	for i := range 1000 {
		w := wk(fmt.Sprint("w", i), 32, 128, 0)
		if i%4 == 0 {
			w.Capacity.GPUs = 8
		}
		w.Ordinal = i
		workers = append(workers, w)
	}
	var pending []Instance
	for i := range 10000 {
		p := inst(fmt.Sprint("p", i), int64(1+r.IntN(4)), int64(1+r.IntN(8)), 0)
		if i%5 == 0 {
			p.Requests.GPUs = int64(1 + r.IntN(2))
		}
		pending = append(pending, p)
	}
	b.ReportAllocs()
	b.ResetTimer()
	placed := 0
	for b.Loop() {
		res := Place(workers, nil, pending, Config{ReserveAfter: time.Minute}, now)
		placed += len(res.Assignments)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
}

// TestCordonedNodeStaysInPressure: a cordoned node is still a node of its
// pool, with what runs there (daemon flags included), but a queued instance
// that would fit its free room stays queued.
func TestCordonedNodeStaysInPressure(t *testing.T) {
	workers := []Worker{with2(wk("c", 8, 16, 0), func(w *Worker) { w.Cordoned, w.Pool = true, "p" })}
	placed := []Instance{
		placedOn("c", with(inst("d", 1, 1, 0), func(i *Instance) { i.Pool, i.Daemon = "p", true })),
		placedOn("c", with(inst("r", 1, 1, 0), func(i *Instance) { i.Pool = "p" })),
	}
	pending := []Instance{with(inst("q", 1, 1, 0), func(i *Instance) { i.Pool = "p" })}
	res := Place(workers, placed, pending, Config{}, now)
	p := res.Pressure["p"]
	if len(res.Assignments) != 0 || len(p.Nodes) != 1 || len(p.Nodes[0].Running) != 2 || p.Queued() != 1 ||
		p.Inflight() != 1 || !p.Nodes[0].Running[0].Daemon || p.Nodes[0].Running[1].Daemon {
		t.Fatalf("pressure with a cordoned node: %+v (assignments %v)", p, res.Assignments)
	}
}
