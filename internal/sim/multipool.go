package sim

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/routing"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/internal/trace"
)

// Routing modes of a multi-pool simulation (RunPools).
const (
	// RoutingTide routes as the head does (internal/routing): the
	// heaviest, then cheapest pool that fits, a pool at its max
	// overflowing to the next; with a strategy, its base/weight split.
	RoutingTide = "tide"
	// RoutingFirst is first-match routing, tide's behaviour before
	// issue 35: the first pool in the file whose selector and offerings
	// fit, never overflowing.
	RoutingFirst = "first"
)

// Pools is a simulation of several pools: tide's configuration file with
// two or more pools of provider type sim (each with its own simulated
// cloud options), an optional capacity-provider strategy, and the
// workload and scheduler sections shared by all.
type Pools struct {
	// Name is where the configuration came from.
	Name string
	// Pools are the pools in file order, each as a one-pool Config
	// sharing the workload and scheduler options.
	Pools []*Config
	// Strategy is the file's capacity-provider strategy (may be empty).
	Strategy routing.Strategy
}

// ParsePools decodes and validates a configuration of one or more pools
// (ParseConfig's format, with several pools and an optional strategy).
func ParsePools(name string, data []byte) (*Pools, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var raw struct {
		Pools     []json.RawMessage `json:"pools"`
		Strategy  json.RawMessage   `json:"strategy"`
		Workload  json.RawMessage   `json:"workload"`
		Scheduler json.RawMessage   `json:"scheduler"`
	}
	if err := strictjson.Decode(js, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// The whole file through config.Parse first: pool names, the
	// strategy, every pool's fields, errors naming the pool.
	whole := map[string]any{"pools": raw.Pools}
	if len(raw.Strategy) > 0 {
		whole["strategy"] = raw.Strategy
	}
	wholeJSON, err := json.Marshal(whole)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := config.Parse(name, wholeJSON)
	if err != nil {
		return nil, err
	}
	out := &Pools{Name: name, Strategy: f.Strategy}
	for _, rp := range raw.Pools {
		one := map[string]json.RawMessage{"pools": json.RawMessage("[" + string(rp) + "]")}
		if len(raw.Workload) > 0 {
			one["workload"] = raw.Workload
		}
		if len(raw.Scheduler) > 0 {
			one["scheduler"] = raw.Scheduler
		}
		b, err := json.Marshal(one)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		c, err := ParseConfig(name, b)
		if err != nil {
			return nil, err
		}
		out.Pools = append(out.Pools, c)
	}
	return out, nil
}

// LoadPools reads and validates a configuration of one or more pools.
func LoadPools(path string) (*Pools, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePools(path, data)
}

// PoolsResult is one multi-pool run: the figures summed (cost, node
// hours, machines) or merged (waits over every instance) over the pools,
// and each pool's own run with the instances routed to it.
type PoolsResult struct {
	// Routing is the mode (RoutingTide or RoutingFirst).
	Routing string
	// Total is the whole cluster's figures. Its Utilization is billed
	// capacity used, weighted by each pool's node hours.
	Total Result
	// ByPool are the pools' runs, in file order; Routed the instances
	// routed to each.
	ByPool []*Result
	Routed []int
}

// RunPools replays the workload on several pools under one policy
// (opts.Policy for every pool; "" keeps each pool's own): each job is
// routed at its submission by routing (RoutingTide: internal/routing,
// as the head routes a submitted instance, with the file's strategy;
// RoutingFirst: the first pool that fits), and each pool then runs its
// share on its own simulated cloud, as Run does. A pool is short, and
// RoutingTide overflows past it, when the work routed to it and still
// running by the trace's own times (submit to submit + duration) would
// pass what its max nodes of its largest offering hold: the head sees a
// pool at its max with work queued. Jobs no pool fits go to the first
// pool (they wait there, as in a one-pool replay).
func RunPools(ctx context.Context, ps *Pools, w *Workload, mode string, opts Options) (*PoolsResult, error) {
	if len(ps.Pools) == 0 {
		return nil, fmt.Errorf("%s: no pool", ps.Name)
	}
	if mode != RoutingTide && mode != RoutingFirst {
		return nil, fmt.Errorf("routing: want %s or %s, got %q", RoutingTide, RoutingFirst, mode)
	}
	parts, routed := route(ps, w, mode)
	res := &PoolsResult{Routing: mode, Routed: routed}
	var waits []waitCount
	var used float64
	for i, c := range ps.Pools {
		r, err := Run(ctx, c, parts[i], opts)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", c.Pool.Name, err)
		}
		res.ByPool = append(res.ByPool, r)
		t := &res.Total
		t.Policy, t.Seed = r.Policy, r.Seed
		t.NodeHours += r.NodeHours
		t.Cost += r.Cost
		t.Machines += r.Machines
		t.ScaleEvents += r.ScaleEvents
		t.Interrupted += r.Interrupted
		t.Disrupted += r.Disrupted
		t.IdleNodeHours += r.IdleNodeHours
		t.OutsideNodeHours += r.OutsideNodeHours
		t.Instances += r.Instances
		t.Unfinished += r.Unfinished
		t.End = max(t.End, r.End)
		t.Steps += r.Steps
		used += r.Utilization * r.NodeHours
		waits = append(waits, r.waits...)
	}
	t := &res.Total
	if t.NodeHours > 0 {
		t.Utilization = used / t.NodeHours
	}
	slices.SortFunc(waits, func(a, b waitCount) int { return cmp.Compare(a.sec, b.sec) })
	t.WaitP50, t.WaitP95, t.WaitP99 = percentile(waits, 50), percentile(waits, 95), percentile(waits, 99)
	t.WaitCurve = waitCurve(waits)
	var sum float64
	var n int64
	for _, x := range waits {
		sum += x.sec * float64(x.count)
		n += x.count
	}
	if n > 0 {
		t.WaitMean = sum / float64(n)
	}
	return res, nil
}

// route splits w's jobs between the pools (RunPools) and counts the
// instances routed to each.
func route(ps *Pools, w *Workload, mode string) ([]*Workload, []int) {
	pools := make([]config.Pool, len(ps.Pools))
	index := map[string]int{}
	holds := make([]capacity.Resources, len(ps.Pools)) // max nodes x the largest offering
	for i, c := range ps.Pools {
		pools[i] = c.Pool
		index[c.Pool.Name] = i
		holds[i] = c.largestNode().Scale(int64(max(c.Pool.Nodes.Max, c.Pool.Nodes.Min)))
	}
	routes := config.Routes(pools)
	live := make([]capacity.Resources, len(ps.Pools))
	count := make([]int, len(ps.Pools))
	var ends endHeap
	parts := make([]*Workload, len(ps.Pools))
	for i := range parts {
		p := *w
		p.Jobs, p.Instances, p.Preexisting = nil, 0, 0
		parts[i] = &p
	}
	routed := make([]int, len(ps.Pools))
	for _, job := range w.Jobs {
		for len(ends) > 0 && ends[0].at <= job.Submit {
			e := heap.Pop(&ends).(jobEnd)
			live[e.pool] = live[e.pool].Sub(e.res)
			count[e.pool] -= e.n
		}
		total := job.Requests.Scale(int64(job.Replicas))
		short := func(pool string, _ []string) string {
			i := index[pool]
			if !live[i].Add(total).Fits(holds[i]) {
				return "at its max"
			}
			return ""
		}
		d := routing.Route(routes, short, job.Labels, job.Requests)
		pick := 0
		switch {
		case d.Pool == "":
		case mode == RoutingFirst:
			pick = index[d.First()]
		case len(ps.Strategy) > 0:
			counts := map[string]int{}
			for name, i := range index {
				counts[name] = count[i]
			}
			pick = index[routing.Split(ps.Strategy, d, counts, 1)[0].Pool]
		default:
			pick = index[d.Pool]
		}
		p := parts[pick]
		p.Jobs = append(p.Jobs, job)
		p.Instances += job.Replicas
		if job.Preexisting {
			p.Preexisting++
		}
		routed[pick] += job.Replicas
		live[pick] = live[pick].Add(total)
		count[pick] += job.Replicas
		heap.Push(&ends, jobEnd{at: job.Submit + runTime(job, w.Horizon), pool: pick, res: total, n: job.Replicas})
	}
	return parts, routed
}

// runTime is how long a job's replicas run once started.
func runTime(job trace.Job, horizon time.Duration) time.Duration {
	if job.Censored {
		return max(horizon-job.Submit, 0)
	}
	return job.Duration
}

// jobEnd is when the work a job routed to a pool ends, by the trace.
type jobEnd struct {
	at   time.Duration
	pool int
	res  capacity.Resources
	n    int
}

type endHeap []jobEnd

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(jobEnd)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
