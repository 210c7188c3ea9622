package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/trace"
)

// Workload is a trace made ready for replay: every job has a finite
// duration, fits a node of the pool and requests something.
type Workload struct {
	// Trace is the trace's file name as given.
	Trace string
	// Format is the trace's format.
	Format trace.Format
	// Jobs are the jobs to replay, sorted by Submit. Censored jobs run to
	// Horizon; Censored is false on every job here.
	Jobs []trace.Job
	// Horizon is when censored jobs were stopped.
	Horizon time.Duration
	// Read counts what the trace reader read and skipped.
	Read trace.Stats
	// Instances is the total number of replicas.
	Instances int
	// SampledOut counts the jobs Sample left out.
	SampledOut int
	// Preexisting counts the jobs that ran before the trace's origin: the
	// initial load, started on a warm pool (see Run).
	Preexisting int
	// Empty counts jobs dropped because they end at or before they start
	// (zero duration, or censored jobs submitted at or after Horizon): they
	// need no capacity, and the lower bound ignores them too.
	Empty int
	// NoRequest counts jobs dropped because they request nothing.
	NoRequest int
	// From and To are the window of the trace replayed (zero: all of it);
	// OutOfWindow counts the jobs outside it.
	From, To    time.Duration
	OutOfWindow int
}

func (w *Workload) windowString() string { return windowString(w.From, w.To) }

// windowString formats a trace window as "[from, to)".
func windowString(from, to time.Duration) string {
	end := "end"
	if to > 0 {
		end = to.String()
	}
	return "[" + from.String() + ", " + end + ")"
}

// ReadWorkload reads the trace at path as cfg says and prepares it. With
// skipBadRows, malformed rows are skipped and counted in Read; otherwise
// the first one is an error naming the file, line and column (a
// *trace.Error).
func ReadWorkload(path string, cfg *Config, skipBadRows bool) (*Workload, error) {
	// A series may skip bins (philly_active_nodes_5min.csv does): they are
	// read as no demand, or no change of a level (PrepareWorkload), and
	// counted in the report.
	opts := trace.Options{SkipBadRows: skipBadRows, DropLabels: true, NormalizedMachine: cfg.Workload.NormalizedMachine,
		AllowGaps: true}
	if cfg.Workload.NormalizedMachine.IsZero() {
		opts.IgnoreNormalized = true
	}
	if cfg.Workload.SplitToNode {
		opts.SplitTo = cfg.largestNode()
	}
	tw, err := trace.ReadFile(path, opts)
	if err != nil {
		return nil, err
	}
	return PrepareWorkload(tw, cfg)
}

// PrepareWorkload turns a trace read in full into a Workload: a rate or
// level series becomes replica jobs (WorkloadOptions.Replicas), jobs are
// sampled, censored jobs run to the horizon, and jobs that need no
// capacity are dropped and counted. It fails when a job fits no offering.
func PrepareWorkload(tw *trace.Workload, cfg *Config) (*Workload, error) {
	w := &Workload{Trace: tw.Name, Format: tw.Format, Read: tw.Stats}
	jobs := tw.Jobs
	switch tw.Format.Kind {
	case trace.KindJobs:
		if cfg.Workload.Replicas != nil {
			return nil, fmt.Errorf("workload.replicas: %s is a job trace; replicas apply to rate and level series", tw.Name)
		}
	case trace.KindRate, trace.KindLevel:
		r := cfg.Workload.Replicas
		if r == nil {
			return nil, fmt.Errorf("workload.replicas: %s is a %s series: say how it becomes replicas (per_replica, shape)", tw.Name, tw.Format.Kind)
		}
		bins := tw.Bins
		if tw.Format.Kind == trace.KindLevel {
			bins = holdLevel(bins)
		}
		bins, err := rebin(tw.Format.Kind, bins, time.Duration(r.Window))
		if err != nil {
			return nil, fmt.Errorf("workload.replicas.window: %w", err)
		}
		conv := trace.Replicas{PerReplica: r.PerReplica, Shape: r.Shape, Min: r.Min}
		if jobs, err = conv.Jobs(tw.Format.Kind, bins); err != nil {
			return nil, fmt.Errorf("workload.replicas: %w", err)
		}
		// The service was running before the series began: the replicas
		// of its first bin are the initial load, up when the trace starts.
		for i := range jobs {
			jobs[i].Preexisting = len(bins) > 0 && jobs[i].Submit == bins[0].Start
		}
	default:
		return nil, fmt.Errorf("%s: a %s trace is a node list, not a workload", tw.Name, tw.Format.Kind)
	}

	horizon := time.Duration(cfg.Workload.Horizon)
	if horizon == 0 {
		for i := range jobs {
			horizon = max(horizon, jobs[i].Submit+jobs[i].Duration)
		}
	}
	w.Horizon = horizon
	if from, to := time.Duration(cfg.Workload.From), time.Duration(cfg.Workload.To); from > 0 || to > 0 {
		jobs, w.OutOfWindow = window(jobs, horizon, from, to)
		w.From, w.To = from, to
		w.Horizon = max(horizon-from, 0)
		if to > 0 {
			w.Horizon = min(w.Horizon, to-from)
		}
		horizon = w.Horizon
	}
	sample := cfg.Workload.Sample
	out := make([]trace.Job, 0, len(jobs))
	for _, j := range jobs {
		if sample > 0 && sample < 1 && !keep(j.ID, sample) {
			w.SampledOut++
			continue
		}
		end := j.End(horizon)
		if end <= j.Submit {
			w.Empty++
			continue
		}
		if j.Requests.IsZero() {
			w.NoRequest++
			continue
		}
		j.Duration = end - j.Submit
		j.Censored = false
		j.Labels = nil
		fits := false
		for _, o := range cfg.Pool.Offerings {
			fits = fits || j.Requests.Fits(o.Resources)
		}
		if !fits {
			return nil, fmt.Errorf("%s: job %s requests %s, more than any offering of pool %q provides (set workload.split_to_node, or offer a larger node)",
				tw.Name, j.ID, j.Requests, cfg.Pool.Name)
		}
		w.Instances += j.Replicas
		if j.Preexisting {
			w.Preexisting++
		}
		out = append(out, j)
	}
	// The initial load first: preexisting jobs arrive before the others.
	slices.SortStableFunc(out, func(a, b trace.Job) int {
		switch {
		case a.Preexisting == b.Preexisting:
			return 0
		case a.Preexisting:
			return -1
		}
		return 1
	})
	w.Jobs = out
	if len(out) == 0 {
		if w.From > 0 || w.To > 0 {
			return nil, fmt.Errorf("%s: no job left to replay in the window %s (--from/--to; %d jobs outside it)", tw.Name, w.windowString(), w.OutOfWindow)
		}
		return nil, fmt.Errorf("%s: no job left to replay (%d sampled out, %d empty, %d without a request)", tw.Name, w.SampledOut, w.Empty, w.NoRequest)
	}
	return w, nil
}

// window keeps the jobs of the trace window [from, to) (to 0: no end),
// shifted so that from is second 0: those submitted in it, and those
// submitted before it and still running at from, as the initial load
// (Preexisting, with what is left of their run). Censored jobs end at
// horizon, and every job still running at to ends there. It returns the
// jobs kept and how many were left out.
func window(jobs []trace.Job, horizon, from, to time.Duration) ([]trace.Job, int) {
	out := jobs[:0:0]
	left := 0
	for _, j := range jobs {
		end := j.End(horizon)
		if to > 0 {
			end = min(end, to) // the window ends the run of what still runs
		}
		switch {
		case to > 0 && j.Submit >= to, end <= from:
			left++
			continue
		case j.Submit < from || j.Preexisting:
			j.Preexisting = true
			j.Submit, j.Start = 0, 0
		default:
			j.Submit -= from
			if j.Start > 0 {
				j.Start = max(j.Start-from, 0)
			}
		}
		j.Duration = end - from - j.Submit
		j.Censored = false
		out = append(out, j)
	}
	return out, left
}

// holdLevel fills the bins a level series skips with the level before
// them: a missing sample means no change.
func holdLevel(bins []trace.Bin) []trace.Bin {
	var out []trace.Bin
	for i, b := range bins {
		if i > 0 {
			prev := bins[i-1]
			for t := prev.End(); t < b.Start && prev.Width > 0; t += prev.Width {
				if out == nil {
					out = slices.Clone(bins[:i])
				}
				out = append(out, trace.Bin{Start: t, Width: prev.Width, Value: prev.Value, Capacity: prev.Capacity})
			}
		}
		if out != nil {
			out = append(out, b)
		}
	}
	if out == nil {
		return bins
	}
	return out
}

// keep decides by a hash of the job id whether a job is in a sample of
// the given fraction: the same jobs for every run.
func keep(id string, fraction float64) bool {
	h := fnv.New64a()
	h.Write([]byte(id))
	// FNV mixes short keys poorly into its high bits: finish with
	// splitmix64's mixer.
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/float64(1<<53) < fraction
}

// restartable decides by a hash of the job id whether a job's instances
// may be moved, for a fraction of the jobs (WorkloadOptions.Restartable);
// the hash is salted so that the choice is independent of the sample's.
func restartable(id string, fraction float64) bool {
	return fraction > 0 && (fraction >= 1 || keep("restartable/"+id, fraction))
}

// rebin merges consecutive bins into windows of width window: a rate's
// arrivals are summed, a level's values take the window's maximum. Missing
// bins inside a window count as empty.
func rebin(kind trace.Kind, bins []trace.Bin, window time.Duration) ([]trace.Bin, error) {
	if window <= 0 || len(bins) == 0 {
		return bins, nil
	}
	width := bins[0].Width
	if window < width || window%width != 0 {
		return nil, fmt.Errorf("%v is not a multiple of the trace's bin width %v", window, width)
	}
	var out []trace.Bin
	for _, b := range bins {
		start := b.Start - b.Start%window
		if n := len(out); n > 0 && out[n-1].Start == start {
			switch kind {
			case trace.KindRate:
				out[n-1].Value += b.Value
			default:
				out[n-1].Value = math.Max(out[n-1].Value, b.Value)
			}
			out[n-1].Capacity = math.Max(out[n-1].Capacity, b.Capacity)
			continue
		}
		out = append(out, trace.Bin{Start: start, Width: window, Value: b.Value, Capacity: b.Capacity})
	}
	return out, nil
}

// Bound computes the offline lower bound of the workload on the pool's
// offerings, with the node-count curve when curve is set.
func (w *Workload) Bound(cfg *Config, curve bool) (trace.Bound, error) {
	b, err := trace.LowerBound(w.Jobs, cfg.Pool.Offerings, trace.BoundOptions{Curve: curve})
	if err != nil {
		return trace.Bound{}, fmt.Errorf("lower bound: %w", err)
	}
	return b, nil
}

// DefaultReplicaWindow is the window over which the default configuration
// of a rate or level series averages it before counting replicas.
const DefaultReplicaWindow = time.Minute

// DefaultConfig returns the configuration used when none is given, chosen
// by the trace's format: GPU traces get 8-GPU nodes (96 cores, 768 GiB,
// $24.48/h, the p4d.24xlarge-class price), CPU traces 32-core 128 GiB nodes
// ($1.54/h), with normalized requests read against that machine; rate and
// level series get one 1-GPU, 8-core, 64 GiB replica per request per second
// (or per unit of level; a whole node per node of philly-active-nodes) on
// 8-GPU nodes, never fewer than 1, following the series over windows of
// DefaultReplicaWindow (or the bins, when wider). Every pool boots in
// DefaultBoot and scales from 0 nodes with the tide policy, up to 10,000
// nodes until SizeDefaultPool sizes it from the trace.
func DefaultConfig(f trace.Format) *Config {
	g8 := capacity.Offering{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 24.48,
		Resources: capacity.Resources{MilliCPU: 96000, Memory: 768 << 30, GPUs: 8}}
	c32 := capacity.Offering{Type: "c32", Kind: capacity.OnDemand, PricePerHour: 1.54,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 128 << 30}}
	c := &Config{Name: "default (no --pool-config)", Pool: config.Pool{Name: "default", Provider: config.Provider{Type: "sim"},
		Nodes: capacity.Elastic(0, 10000), Scaling: config.Scaling{Policy: "tide", SlotsPerNode: 8}}}
	switch {
	case f.Kind == trace.KindRate || f.Kind == trace.KindLevel:
		c.Pool.Offerings = []capacity.Offering{g8}
		r := &ReplicaOptions{PerReplica: 1, Shape: capacity.Resources{MilliCPU: 8000, Memory: 64 << 30, GPUs: 1}, Min: 1}
		if f.Name == "philly-active-nodes" {
			r.Shape = g8.Resources // the level counts whole nodes
		}
		// A serving autoscaler follows a metric averaged over about a
		// minute, not second by second: replicas that live a few seconds
		// would make every policy pay a boot for each (24 × the bound on
		// the Azure code trace).
		if w := f.Width; w > 0 && w < DefaultReplicaWindow {
			r.Window = config.Duration((DefaultReplicaWindow + w - 1) / w * w)
		}
		c.Workload.Replicas = r
	case hasGPUColumn(f):
		c.Pool.Offerings = []capacity.Offering{g8}
		c.Workload.SplitToNode = true
	default:
		c.Pool.Offerings = []capacity.Offering{c32}
		c.Pool.Scaling.SlotsPerNode = 32
		c.Workload.NormalizedMachine = c32.Resources
		c.Workload.SplitToNode = true
	}
	if err := c.Validate(); err != nil {
		panic(errors.Join(errors.New("sim: invalid default config"), err))
	}
	return c
}

// SizeDefaultPool sets the max of a default pool (DefaultConfig) from the
// workload's lower bound b: the trace's peak demand in nodes of the
// pool's offerings (of the smallest), doubled, plus 4 (SizeNodes), so that no policy is held
// at the max and the comparison is of the policies, not of the cap. It
// returns the choice as one line for the user.
func SizeDefaultPool(cfg *Config, b trace.Bound) string {
	cfg.Pool.Nodes = capacity.Elastic(cfg.Pool.Nodes.Min, max(SizeNodes(b), cfg.Pool.Nodes.Min, 1))
	return fmt.Sprintf("default pool (no --pool-config): the trace's peak demand is %d nodes of %s (%s, the lower bound's peak); nodes [%d, %d] (twice the peak, plus 4: see sim.SizeNodes)",
		b.PeakNodes, b.Offering.Name(), b.Offering.Resources, cfg.Pool.Nodes.Min, cfg.Pool.Nodes.Max)
}

// hasGPUColumn reports whether a job trace's rows can ask for GPUs.
func hasGPUColumn(f trace.Format) bool {
	switch f.Name {
	case "philly-jobs", "alibaba-gpu2023-pods", "alibaba-dlrm2025-instances":
		return true
	}
	return false
}
