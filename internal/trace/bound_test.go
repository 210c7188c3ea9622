package trace

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

var (
	g8Shape = capacity.Resources{MilliCPU: 32000, Memory: 256 * gib, GPUs: 8}
	g8      = capacity.Offering{Type: "g8", Resources: g8Shape, PricePerHour: 24.5}
	g16     = capacity.Offering{Type: "g16", Resources: capacity.Resources{MilliCPU: 64000, Memory: 512 * gib, GPUs: 16}, PricePerHour: 45}
	h       = time.Hour
	gpuJob  = func(id string, submit, dur time.Duration, gpus int64, replicas int) Job {
		return Job{ID: id, Submit: submit, Duration: dur, Requests: capacity.Resources{GPUs: gpus}, Replicas: replicas}
	}
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

// TestLowerBoundKnownAnswers: small workloads whose optimal node-hours are
// computed by hand in the comments.
func TestLowerBoundKnownAnswers(t *testing.T) {
	// 16 one-GPU jobs submitted together, job i running i quarter-hours: in
	// quarter k (1..16) 17-k jobs run, so 2 nodes for 8 quarters (16..9
	// jobs) and 1 node for 8 quarters (8..1 jobs): 24 quarters = 6 h.
	var staircase []Job
	for i := 1; i <= 16; i++ {
		staircase = append(staircase, gpuJob("s", 0, time.Duration(i)*15*time.Minute, 1, 1))
	}
	tests := []struct {
		name      string
		jobs      []Job
		offerings []capacity.Offering
		opts      BoundOptions
		nodeHours float64
		cost      float64
		peak      int
		work      float64 // WorkNodeHours
		offering  string
	}{
		// 20 one-GPU replicas for 1 h: ceil(20/8) = 3 nodes × 1 h; work 20/8.
		{"single burst", []Job{gpuJob("b", 0, h, 1, 20)}, []capacity.Offering{g8}, BoundOptions{}, 3, 3 * 24.5, 3, 2.5, "g8/on-demand"},
		{"staircase", staircase, []capacity.Offering{g8}, BoundOptions{}, 6, 6 * 24.5, 2, 136.0 / 4 / 8, "g8/on-demand"},
		// A: 8 GPUs [0, 2h); B: 4 GPUs [1h, 3h): 1 + 2 + 1 node-hours.
		{"overlap", []Job{gpuJob("a", 0, 2*h, 8, 1), gpuJob("b", h, 2*h, 4, 1)}, []capacity.Offering{g8}, BoundOptions{}, 4, 98, 2, 24.0 / 8, "g8/on-demand"},
		// Three 5-GPU replicas cannot share an 8-GPU node: 3 nodes, though 15 GPUs fit 2 by volume.
		{"big items", []Job{gpuJob("a", 0, h, 5, 3)}, []capacity.Offering{g8}, BoundOptions{}, 3, 73.5, 3, 15.0 / 8, "g8/on-demand"},
		// 10 replicas of 10 CPUs on 32-CPU nodes: 3 per node, 4 nodes.
		{"cpu bound", []Job{{ID: "c", Duration: h, Replicas: 10, Requests: capacity.CPU(10000)}}, []capacity.Offering{g8}, BoundOptions{}, 4, 98, 4, 100.0 / 32, "g8/on-demand"},
		// Idle between jobs costs nothing: [0,1h) and [2h,3h).
		{"gap", []Job{gpuJob("a", 0, h, 1, 1), gpuJob("b", 2*h, h, 1, 1)}, []capacity.Offering{g8}, BoundOptions{}, 2, 49, 1, 0.25, "g8/on-demand"},
		// A censored job runs to the horizon: [1h, 3h).
		{"censored to horizon", []Job{{ID: "c", Submit: h, Censored: true, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
			[]capacity.Offering{g8}, BoundOptions{Horizon: 3 * h}, 2, 49, 1, 0.25, "g8/on-demand"},
		{"censored without horizon", []Job{{ID: "c", Submit: h, Censored: true, Replicas: 1, Requests: capacity.Resources{GPUs: 1}}},
			[]capacity.Offering{g8}, BoundOptions{}, 0, 0, 0, 0, "g8/on-demand"},
		{"zero duration", []Job{gpuJob("z", h, 0, 8, 4)}, []capacity.Offering{g8}, BoundOptions{}, 0, 0, 0, 0, "g8/on-demand"},
		{"no jobs", nil, []capacity.Offering{g8}, BoundOptions{}, 0, 0, 0, 0, "g8/on-demand"},
		// Half-hour job: fractional hours.
		{"minutes", []Job{gpuJob("m", 0, 30*time.Minute, 16, 1)}, []capacity.Offering{g16}, BoundOptions{}, 0.5, 22.5, 1, 0.5, "g16/on-demand"},
		// Burst of 20 GPUs: g8 needs 3 × $24.5 = $73.5, g16 needs 2 × $45 = $90.
		{"cheapest shape", []Job{gpuJob("b", 0, h, 1, 20)}, []capacity.Offering{g16, g8}, BoundOptions{}, 3, 73.5, 3, 2.5, "g8/on-demand"},
		// A 16-GPU replica fits only g16: 1 node.
		{"only the big shape fits", []Job{gpuJob("x", 0, h, 16, 1), gpuJob("y", 0, h, 1, 2)}, []capacity.Offering{g8, g16}, BoundOptions{}, 2, 90, 2, 18.0 / 16, "g16/on-demand"},
		// Spot at $8 with 10 %/h interruption × $100 penalty: $18 effective, cheaper than $24.5.
		{"spot by effective cost", []Job{gpuJob("b", 0, h, 1, 20)},
			[]capacity.Offering{g8, {Type: "g8", Kind: capacity.Spot, Resources: g8Shape, PricePerHour: 8, InterruptionProbability: 0.1, InterruptionPenalty: 100}},
			BoundOptions{}, 3, 54, 3, 2.5, "g8/spot"},
		// With a $200 penalty spot costs $28 effective: on-demand wins.
		{"spot too risky", []Job{gpuJob("b", 0, h, 1, 20)},
			[]capacity.Offering{{Type: "g8", Kind: capacity.Spot, Resources: g8Shape, PricePerHour: 8, InterruptionProbability: 0.1, InterruptionPenalty: 200}, g8},
			BoundOptions{}, 3, 73.5, 3, 2.5, "g8/on-demand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := LowerBound(tt.jobs, tt.offerings, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !near(b.NodeHours, tt.nodeHours) || !near(b.Cost, tt.cost) || b.PeakNodes != tt.peak || !near(b.WorkNodeHours, tt.work) {
				t.Errorf("node-hours %v cost %v peak %d work %v; want %v, %v, %d, %v",
					b.NodeHours, b.Cost, b.PeakNodes, b.WorkNodeHours, tt.nodeHours, tt.cost, tt.peak, tt.work)
			}
			if b.Offering.Name() != tt.offering {
				t.Errorf("offering = %s, want %s", b.Offering.Name(), tt.offering)
			}
			if len(b.Offerings) != len(tt.offerings) {
				t.Errorf("%d offering bounds, want %d", len(b.Offerings), len(tt.offerings))
			}
			if b.MixCost > b.Cost*(1+1e-12) {
				t.Errorf("mix cost %v above the cheapest single-shape cost %v", b.MixCost, b.Cost)
			}
		})
	}
}

// TestLowerBoundDetails checks the span, replica-hours, the mix floor, the
// curve and the unfit counts on one workload.
func TestLowerBoundDetails(t *testing.T) {
	jobs := []Job{gpuJob("a", 0, 2*h, 8, 1), gpuJob("b", h, 2*h, 4, 1), gpuJob("big", 4*h, h, 16, 1)}
	b, err := LowerBound(jobs, []capacity.Offering{g8, g16}, BoundOptions{Curve: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.Start != 0 || b.End != 5*h || !near(b.ReplicaHours, 5) {
		t.Errorf("span [%v, %v] replica-hours %v; want [0, 5h], 5", b.Start, b.End, b.ReplicaHours)
	}
	g8b, g16b := b.Offerings[0], b.Offerings[1]
	if g8b.Feasible() || g8b.Unfit != 1 || g8b.FirstUnfit != "big" {
		t.Errorf("g8: unfit %d (%s), want 1 (big)", g8b.Unfit, g8b.FirstUnfit)
	}
	// g16: [0,1h) 1, [1h,2h) 1 (12 GPUs), [2h,3h) 1, [3h,4h) 0, [4h,5h) 1 → 4 node-hours, $180.
	if !g16b.Feasible() || !near(g16b.NodeHours, 4) || !near(b.Cost, 180) || b.Offering.Type != "g16" {
		t.Errorf("g16 = %+v, best %s cost %v", g16b, b.Offering.Type, b.Cost)
	}
	wantCurve := []Step{{0, 1}, {3 * h, 0}, {4 * h, 1}, {5 * h, 0}}
	if !slices.Equal(b.Curve, wantCurve) {
		t.Errorf("curve = %v, want %v", b.Curve, wantCurve)
	}
	// g8 covers the feasible part: [0,1h) 1, [1h,2h) 2, [2h,3h) 1 = 4.
	if !near(g8b.NodeHours, 4) || !slices.Equal(g8b.Curve, []Step{{0, 1}, {h, 2}, {2 * h, 1}, {3 * h, 0}}) {
		t.Errorf("g8 = %v node-hours, curve %v", g8b.NodeHours, g8b.Curve)
	}
	// Mix floor: GPUs are cheapest on g16 at $45/16 per GPU-hour; 16 + 8 + 16 = 40 GPU-hours → $112.5.
	// (CPU and memory are not requested.)
	if !near(b.MixCost, 40*45.0/16) {
		t.Errorf("mix cost = %v, want %v", b.MixCost, 40*45.0/16)
	}
}

func TestLowerBoundErrors(t *testing.T) {
	ok := []Job{gpuJob("a", 0, h, 1, 1)}
	tests := []struct {
		name      string
		jobs      []Job
		offerings []capacity.Offering
		opts      BoundOptions
		want      string
	}{
		{"no offerings", ok, nil, BoundOptions{}, "offerings: need at least one"},
		{"invalid offering", ok, []capacity.Offering{{Type: "x", PricePerHour: 1}}, BoundOptions{}, "offerings[0] (x/on-demand): resources"},
		{"negative horizon", ok, []capacity.Offering{g8}, BoundOptions{Horizon: -1}, "horizon"},
		{"negative duration", []Job{gpuJob("a", 0, -h, 1, 1)}, []capacity.Offering{g8}, BoundOptions{}, "job a: duration"},
		{"negative submit", []Job{gpuJob("a", -h, h, 1, 1)}, []capacity.Offering{g8}, BoundOptions{}, "job a: submit"},
		{"zero replicas", []Job{gpuJob("a", 0, h, 1, 0)}, []capacity.Offering{g8}, BoundOptions{}, "job a: replicas"},
		{"negative request", []Job{{ID: "a", Duration: h, Replicas: 1, Requests: capacity.CPU(-1)}}, []capacity.Offering{g8}, BoundOptions{}, "job a: requests"},
		{"fits nothing", []Job{gpuJob("a", 0, h, 1, 1), gpuJob("huge", 0, h, 9, 2)}, []capacity.Offering{g8}, BoundOptions{},
			"no offering fits every job: job huge fits no node of g8/on-demand (2 replicas unfit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LowerBound(tt.jobs, tt.offerings, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestLowerBoundAgainstNaive compares the sweep with an obviously correct
// version on random workloads: at every event time, binpack.LowerBound of
// all jobs running then, recomputed from scratch. It also checks the
// bound's place between the volume bound and a feasible packing
// (binpack.Pack's first-fit decreasing at each moment).
func TestLowerBoundAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	node := capacity.Resources{MilliCPU: 16000, Memory: 64 * gib, GPUs: 4}
	offering := capacity.Offering{Type: "n", Resources: node, PricePerHour: 2}
	for iter := range 200 {
		var jobs []Job
		for i := range 1 + rng.IntN(25) {
			jobs = append(jobs, Job{
				ID: "j" + string(rune('a'+i)), Submit: time.Duration(rng.IntN(20)) * time.Minute,
				Duration: time.Duration(rng.IntN(30)) * time.Minute, Replicas: 1 + rng.IntN(6),
				Requests: capacity.Resources{MilliCPU: 500 * rng.Int64N(20), Memory: gib * rng.Int64N(40), GPUs: rng.Int64N(3)},
			})
		}
		b, err := LowerBound(jobs, []capacity.Offering{offering}, BoundOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var times []time.Duration
		for _, j := range jobs {
			times = append(times, j.Submit, j.End(0))
		}
		slices.Sort(times)
		times = slices.Compact(times)
		naive, packed := 0.0, 0.0
		for i := 0; i+1 < len(times); i++ {
			t0, dt := times[i], (times[i+1] - times[i]).Hours()
			var running []capacity.Pending
			for _, j := range jobs {
				if j.Submit <= t0 && t0 < j.End(0) {
					running = append(running, capacity.Pending{Requests: j.Requests, Count: j.Replicas})
				}
			}
			lb, _ := binpack.LowerBound(running, node)
			naive += float64(lb) * dt
			packed += float64(len(binpack.Pack(running, []capacity.Offering{offering}).New)) * dt
		}
		if !near(b.NodeHours, naive) {
			t.Fatalf("iteration %d: sweep %v node-hours, naive %v", iter, b.NodeHours, naive)
		}
		if b.WorkNodeHours > b.NodeHours*(1+1e-12) || b.NodeHours > packed*(1+1e-12) {
			t.Fatalf("iteration %d: work %v ≤ bound %v ≤ packed %v does not hold", iter, b.WorkNodeHours, b.NodeHours, packed)
		}
		if b.MixCost > b.Cost*(1+1e-12) {
			t.Fatalf("iteration %d: mix cost %v above cost %v", iter, b.MixCost, b.Cost)
		}
	}
}

// TestLowerBoundDoesNotModifyJobs: the function is pure.
func TestLowerBoundDoesNotModifyJobs(t *testing.T) {
	jobs := []Job{gpuJob("b", h, h, 1, 3), gpuJob("a", 0, h, 2, 1)}
	before := slices.Clone(jobs)
	if _, err := LowerBound(jobs, []capacity.Offering{g8}, BoundOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if d := diffJob(jobs[i], before[i]); d != "" {
			t.Errorf("job %d changed: %s", i, d)
		}
	}
}

// TestPhillyLowerBound is the sanity figure for philly_jobs.csv on 8-GPU
// nodes ($24.5/h): its volume bound must match the README's 978k GPU-hours
// / 8, and its peak the README's 1,243 GPUs / 8.
func TestPhillyLowerBound(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the whole Philly trace")
	}
	dir := tracesDir(t)
	w, err := ReadFile(filepath.Join(dir, "philly_jobs.csv"), Options{SplitTo: g8Shape, DropLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LowerBound(w.Jobs, []capacity.Offering{g8}, BoundOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("philly_jobs.csv on g8 (8 GPUs, $24.5/h): %.0f node-hours, $%.0f, peak %d nodes, volume bound %.0f node-hours, span %.1f days, %v",
		b.NodeHours, b.Cost, b.PeakNodes, b.WorkNodeHours, (b.End-b.Start).Hours()/24, w.Stats)
	if math.Abs(b.WorkNodeHours*8-978e3)/978e3 > 0.005 {
		t.Errorf("volume bound %.0f GPU-hours, README says 978k", b.WorkNodeHours*8)
	}
	if b.PeakNodes != (1243+7)/8 {
		t.Errorf("peak %d nodes, want ceil(1243/8) = %d", b.PeakNodes, (1243+7)/8)
	}
	if b.NodeHours < b.WorkNodeHours || b.NodeHours > 1.05*b.WorkNodeHours {
		t.Errorf("bound %.0f node-hours not within 5%% above the volume bound %.0f", b.NodeHours, b.WorkNodeHours)
	}
}
