package sim

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/trace"
)

// twoGPUPools is an on-demand pool first in the file and a cheaper spot
// pool of the same 8-GPU node capped at maxSpot nodes, with extra
// top-level lines (a strategy).
func twoGPUPools(maxSpot int, extra string) string {
	pool := func(name, price string, max int) string {
		return `  - name: ` + name + `
    provider:
      type: sim
      options: {boot: 100s, configure: 0s, drain: 0s, delete: 0s}
    nodes: [0, ` + itoa(max) + `]
    offerings:
      - {type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: ` + price + `}
    scaling: {policy: tide, slots_per_node: 8, idle_timeout: 60s, reconcile_interval: 15s}
`
	}
	return "pools:\n" + pool("od", "10", 50) + pool("spot", "3", maxSpot) + extra
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRunPoolsRoutesAsTheHead: with tide's routing the jobs go to the
// cheaper spot pool and cost less than first-match routing, which sends
// them all to on-demand; a spot pool capped below the burst overflows the
// rest to on-demand; a strategy base 2 weight 1:3 splits ten one-node jobs
// 4 / 6; every instance completes and the pools' costs add up.
func TestRunPoolsRoutesAsTheHead(t *testing.T) {
	jobs := func() []trace.Job {
		var js []trace.Job
		for i := range 10 {
			js = append(js, gpuJob(time.Duration(i)*time.Second, time.Hour, 8, 1))
		}
		return js
	}
	run := func(yaml, mode string) *PoolsResult {
		t.Helper()
		ps, err := ParsePools("test.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		w := jobsWorkload(t, ps.Pools[0], jobs())
		r, err := RunPools(context.Background(), ps, w, mode, Options{Seed: 1, Check: true})
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, p := range r.ByPool {
			sum += p.Cost
		}
		if r.Total.Unfinished != 0 || r.Total.Instances != 10 || sum != r.Total.Cost {
			t.Fatalf("%s: unfinished %d of %d, cost %v vs pools' %v", mode, r.Total.Unfinished, r.Total.Instances, r.Total.Cost, sum)
		}
		return r
	}
	tide, first := run(twoGPUPools(50, ""), RoutingTide), run(twoGPUPools(50, ""), RoutingFirst)
	if tide.Routed[1] != 10 || first.Routed[0] != 10 {
		t.Errorf("routed: tide %v, first %v; want all on spot, all on od", tide.Routed, first.Routed)
	}
	if !(tide.Total.Cost < first.Total.Cost*0.4) {
		t.Errorf("cost: tide routing $%.2f, first-match $%.2f", tide.Total.Cost, first.Total.Cost)
	}
	if capped := run(twoGPUPools(6, ""), RoutingTide); capped.Routed[1] != 6 || capped.Routed[0] != 4 {
		t.Errorf("spot capped at 6 nodes: routed %v, want od 4, spot 6", capped.Routed)
	}
	strat := run(twoGPUPools(50, "strategy:\n  - {pool: od, base: 2, weight: 1}\n  - {pool: spot, weight: 3}\n"), RoutingTide)
	if strat.Routed[0] != 4 || strat.Routed[1] != 6 {
		t.Errorf("strategy: routed %v, want od 4 (2 base + 2), spot 6", strat.Routed)
	}
}

// TestShippedTwoPools: the shipped on-demand + spot config loads as two
// pools, and on its trace tide's routing costs less than first-match
// routing under the tide policy (seed 1).
func TestShippedTwoPools(t *testing.T) {
	ps, err := LoadPools(filepath.Join(examplesDir(), "pools", "two-pools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Pools) != 2 || ps.Pools[0].Pool.Name != "on-demand" || ps.Pools[1].Pool.Name != "spot" {
		t.Fatalf("pools %+v", ps.Pools)
	}
	w, err := ReadWorkload(filepath.Join(tracesDir(t), "alibaba2017_batch_tasks.csv"), ps.Pools[0], false)
	if err != nil {
		t.Fatal(err)
	}
	cost := map[string]float64{}
	for _, mode := range []string{RoutingTide, RoutingFirst} {
		r, err := RunPools(context.Background(), ps, w, mode, Options{Policy: "tide", Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		cost[mode] = r.Total.Cost
		t.Logf("%s routing: $%.2f, routed %v, wait p95 %.0fs", mode, r.Total.Cost, r.Routed, r.Total.WaitP95)
	}
	if !(cost[RoutingTide] < cost[RoutingFirst]) {
		t.Errorf("tide routing $%.2f is not below first-match $%.2f", cost[RoutingTide], cost[RoutingFirst])
	}
}
