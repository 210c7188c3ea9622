package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/trace"
)

// ShippedConfigs names the shipped config (examples/simulate) of every
// trace in the shared traces folder that the simulator reads: how each
// trace becomes instances. The case generator draws from them.
var ShippedConfigs = map[string]string{
	"philly_jobs.csv":                          "philly.yaml",
	"google2011_jobs.csv":                      "google2011.yaml",
	"azure_llm2023_conv_rate_1s.csv":           "azure-conv.yaml",
	"azure_llm2023_code_rate_1s.csv":           "azure-code.yaml",
	"google2011_tasks_1h-4h.csv":               "google2011-tasks.yaml",
	"google2011_job_rate_5min.csv":             "google2011-job-rate.yaml",
	"alibaba2017_batch_tasks.csv":              "alibaba2017.yaml",
	"alibaba_dlrm2025_instances.csv":           "alibaba-dlrm2025.yaml",
	"alibaba_gpu2023_pods.csv":                 "alibaba-gpu2023.yaml",
	"alibaba_genai_v2026_sd_requests_1min.csv": "alibaba-genai-sd.yaml",
	"helios_earth_gpu_demand_5min.csv":         "helios-earth.yaml",
	"philly_active_nodes_5min.csv":             "philly-active-nodes.yaml",
}

// CaseBase is one shipped trace as the case generator sees it: its
// shipped config (which says how the trace becomes instances) and what the
// generator needs to know of its jobs. Read is the trace read in full
// under that config, jobs not split (each case splits them to its own
// nodes); the generator itself never looks at it.
type CaseBase struct {
	// Trace is the trace's file name; Path where it was read.
	Trace, Path string
	// Config is the trace's shipped config, its window (workload.from and
	// to) cleared.
	Config *Config
	// Span is how long the trace's workload lasts (its horizon).
	Span time.Duration
	// Largest is the component-wise maximum request of any job, before
	// any split.
	Largest capacity.Resources
	// GPUJobs and CPUJobs say whether some job requests a GPU, and
	// whether some job requests none.
	GPUJobs, CPUJobs bool
	// Read is the trace as read (trace.ReadFile), for Case.Workload.
	Read *trace.Workload
}

// LoadCaseBases reads every shipped trace found in tracesDir with its
// config from configsDir (examples/simulate), sorted by trace name. A
// trace missing from tracesDir is left out; none found is an error.
func LoadCaseBases(tracesDir, configsDir string) ([]*CaseBase, error) {
	names := make([]string, 0, len(ShippedConfigs))
	for tr := range ShippedConfigs {
		names = append(names, tr)
	}
	slices.Sort(names)
	var out []*CaseBase
	for _, tr := range names {
		path := filepath.Join(tracesDir, tr)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		cfg, err := LoadConfig(filepath.Join(configsDir, ShippedConfigs[tr]))
		if err != nil {
			return nil, err
		}
		cfg.Workload.From, cfg.Workload.To = 0, 0
		opts := trace.Options{DropLabels: true, NormalizedMachine: cfg.Workload.NormalizedMachine, AllowGaps: true,
			IgnoreNormalized: cfg.Workload.NormalizedMachine.IsZero()}
		tw, err := trace.ReadFile(path, opts)
		if err != nil {
			return nil, err
		}
		w, err := prepareSplit(tw, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s with %s: %w", tr, ShippedConfigs[tr], err)
		}
		b := &CaseBase{Trace: tr, Path: path, Config: cfg, Span: w.Horizon, Read: tw}
		jobs := tw.Jobs // the requests before any split
		if tw.Format.Kind != trace.KindJobs {
			jobs = w.Jobs
		}
		for i := range jobs {
			r := jobs[i].Requests
			b.Largest = tideMaxRes(b.Largest, r)
			b.GPUJobs = b.GPUJobs || r.GPUs > 0
			b.CPUJobs = b.CPUJobs || (r.GPUs == 0 && !r.IsZero())
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no shipped trace found in %s (want one of %s)", tracesDir, strings.Join(names, ", "))
	}
	return out, nil
}

// prepareSplit prepares a trace read without a split (trace.Options.SplitTo)
// as cfg says: its jobs split to the pool's largest node when
// workload.split_to_node is set, then PrepareWorkload.
func prepareSplit(tw *trace.Workload, cfg *Config) (*Workload, error) {
	if !cfg.Workload.SplitToNode {
		return PrepareWorkload(tw, cfg)
	}
	limit := cfg.largestNode()
	cp := *tw
	cp.Jobs = make([]trace.Job, len(tw.Jobs))
	for i, j := range tw.Jobs {
		s, _, err := j.SplitTo(limit)
		if err != nil {
			return nil, err
		}
		cp.Jobs[i] = s
	}
	return PrepareWorkload(&cp, cfg)
}

// tideMaxRes is the component-wise maximum of a and b (CPU, memory, GPUs).
func tideMaxRes(a, b capacity.Resources) capacity.Resources {
	return capacity.Resources{MilliCPU: max(a.MilliCPU, b.MilliCPU), Memory: max(a.Memory, b.Memory), GPUs: max(a.GPUs, b.GPUs)}
}

// Case is one generated benchmark case: a window of a shipped trace on a
// drawn pool.
type Case struct {
	// Seed and Index identify the case: the Index-th case of Seed.
	Seed  uint64
	Index int
	// Base is the trace drawn.
	Base *CaseBase
	// Config is the pool drawn (offerings, boot time), the trace's
	// workload options and the window (Workload.From, To). Its node max is
	// set from the window's lower bound by Case.Workload.
	Config *Config
}

// Name is "seed/index" and the trace, for reports.
func (c *Case) Name() string { return fmt.Sprintf("%d/%d", c.Seed, c.Index) }

// The generator's ranges.
const (
	caseMinOfferings = 1
	caseMaxOfferings = 4
	caseMinBoot      = 30 * time.Second
	caseMaxBoot      = 5 * time.Minute
	// A window is this fraction of the trace's span, at least
	// caseMinWindow (or the whole trace when shorter) and at most
	// caseMaxWindow.
	caseMinWindowFrac = 0.01
	caseMaxWindowFrac = 0.05
	caseMinWindow     = 30 * time.Minute
	caseMaxWindow     = 12 * time.Hour
	// caseMinRetryWindow is the shortest window a retry halves down to.
	caseMinRetryWindow = 5 * time.Minute
	// A case is drawn again when its window holds more instances than
	// caseMaxInstances or its lower bound needs more than caseMaxPeak
	// nodes at once: the benchmark stays fast (minutes for 200 cases).
	caseMaxInstances = 3000
	caseMaxPeak      = 150
)

// GenerateCase draws the index-th case of seed from bases: a trace, a
// window of it, and a pool of 1 to 4 offerings of different sizes (GPU
// nodes of 1 to 8 GPUs for a trace that requests GPUs, with a CPU-only
// offering when some of its jobs request none; CPU nodes of a quarter to
// twice the shipped node otherwise), each on demand or spot, with a boot
// time of 30 s to 5 min. attempt draws another case for the same index
// and trace (Generate uses it when a draw cannot serve its trace or is too
// large): another pool, a window half as long per attempt (from 5 min
// on, no shorter), and from attempt 3 on half as many of the trace's jobs
// per attempt (workload.sample). It is a pure function of its arguments
// (the bases' Read is not looked at).
func GenerateCase(seed uint64, index, attempt int, bases []*CaseBase) *Case {
	// The trace depends on the index alone, so that a draw too large for
	// the benchmark is drawn again on the same trace (each trace as likely
	// as any other), only smaller.
	b := bases[rand.New(rand.NewPCG(seed, uint64(index)<<16|0xffff)).IntN(len(bases))]
	r := rand.New(rand.NewPCG(seed, uint64(index)<<16|uint64(attempt)))
	cfg := *b.Config
	cfg.Name = fmt.Sprintf("case %d/%d (%s)", seed, index, b.Trace)
	cfg.Pool.Name = "case"
	cfg.Pool.Offerings = caseOfferings(r, b)
	cfg.Pool.Nodes = capacity.Elastic(0, validateMaxNodes)
	largest := cfg.largestNode()
	if b.GPUJobs {
		cfg.Pool.Scaling.SlotsPerNode = int(largest.GPUs)
	} else {
		cfg.Pool.Scaling.SlotsPerNode = int(max(largest.MilliCPU/1000, 1))
	}
	med := caseMinBoot + time.Duration(r.Int64N(int64(caseMaxBoot-caseMinBoot)+1))
	med = med.Round(5 * time.Second)
	cfg.Cloud.Boot = Latency{Min: (med * 85 / 100).Round(time.Second), Median: med, Max: (med * 135 / 100).Round(time.Second)}
	// The window.
	span := b.Span
	frac := caseMinWindowFrac + r.Float64()*(caseMaxWindowFrac-caseMinWindowFrac)
	length := min(max(time.Duration(frac*float64(span)), caseMinWindow), caseMaxWindow)
	// Each attempt halves the window (down to caseMinRetryWindow) and,
	// from the third on, the sample of the jobs (trace too dense for
	// any window to fit: Google 2011 jobs, Alibaba DLRM).
	for k := 0; k < attempt && length/2 >= caseMinRetryWindow; k++ {
		length /= 2
	}
	length = length.Round(time.Minute)
	if attempt >= 3 {
		sample := cfg.Workload.Sample
		if sample <= 0 {
			sample = 1
		}
		cfg.Workload.Sample = sample / float64(int(1)<<min(attempt-2, 20))
	}
	cfg.Workload.From, cfg.Workload.To = 0, 0
	if length < span {
		from := time.Duration(r.Int64N(int64(span - length))).Round(time.Minute)
		cfg.Workload.From, cfg.Workload.To = config.Duration(from), config.Duration(from+length)
	}
	return &Case{Seed: seed, Index: index, Base: b, Config: &cfg}
}

// validateMaxNodes is a generated pool's max until its bound is known.
const validateMaxNodes = 100000

// caseOfferings draws the pool's offerings (see GenerateCase). Every job
// fits one of them: the largest offering is grown to the largest request
// when the workload is not split to the nodes.
func caseOfferings(r *rand.Rand, b *CaseBase) []capacity.Offering {
	n := caseMinOfferings + r.IntN(caseMaxOfferings-caseMinOfferings+1)
	var offs []capacity.Offering
	gib := int64(1) << 30
	ref := b.Config.largestNode()
	if b.GPUJobs {
		// One family per pool: CPU and memory per GPU.
		cpg := []int64{8, 12, 16}[r.IntN(3)]
		mpg := []int64{48, 61, 96, 128}[r.IntN(4)]
		perGPU := 1.5 + 2*r.Float64() // $ per GPU-hour
		sizes := []int64{1, 2, 4, 8}
		r.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
		gpuOffs := n
		if b.CPUJobs && n > 1 && r.IntN(2) == 0 {
			gpuOffs = n - 1
		}
		for _, g := range sizes[:gpuOffs] {
			offs = append(offs, capacity.Offering{Type: fmt.Sprintf("g%d.%dc%dg", g, cpg, mpg), Kind: capacity.OnDemand,
				Resources:    capacity.Resources{MilliCPU: g * cpg * 1000, Memory: g * mpg * gib, GPUs: g},
				PricePerHour: round3(float64(g) * perGPU * (0.9 + 0.2*r.Float64()))})
		}
		if gpuOffs < n {
			c := []int64{16, 32, 64, 96}[r.IntN(4)]
			offs = append(offs, capacity.Offering{Type: fmt.Sprintf("c%d.4g", c), Kind: capacity.OnDemand,
				Resources:    capacity.Resources{MilliCPU: c * 1000, Memory: 4 * c * gib},
				PricePerHour: round3(float64(c) * (0.04 + 0.015*r.Float64()))})
		}
	} else {
		refCPU := max(ref.MilliCPU/1000, 4)
		factors := []float64{0.25, 0.5, 1, 2}
		r.Shuffle(len(factors), func(i, j int) { factors[i], factors[j] = factors[j], factors[i] })
		for _, f := range factors[:n] {
			c := max(int64(f*float64(refCPU)), 2)
			mpc := []int64{2, 4, 8}[r.IntN(3)]
			offs = append(offs, capacity.Offering{Type: fmt.Sprintf("c%d.%dg", c, mpc), Kind: capacity.OnDemand,
				Resources:    capacity.Resources{MilliCPU: c * 1000, Memory: c * mpc * gib},
				PricePerHour: round3(float64(c) * (0.035 + 0.005*float64(mpc)) * (0.9 + 0.2*r.Float64()))})
		}
	}
	// Every request fits the largest offering unless the workload is
	// split to the nodes.
	if !b.Config.Workload.SplitToNode {
		big := 0
		for i := range offs {
			if caseSize(offs[i].Resources) > caseSize(offs[big].Resources) {
				big = i
			}
		}
		o := &offs[big]
		if !b.Largest.Fits(o.Resources) {
			grown := tideMaxRes(o.Resources, b.Largest)
			o.PricePerHour = round3(o.PricePerHour * caseSize(grown) / caseSize(o.Resources))
			o.Resources = grown
			o.Type += "x"
		}
	}
	// Spot: an offering may be spot instead, or get a spot twin.
	for i := range offs {
		if r.Float64() < 0.3 {
			caseSpot(r, &offs[i])
		}
	}
	if len(offs) < caseMaxOfferings && r.Float64() < 0.3 {
		twin := offs[r.IntN(len(offs))]
		if twin.Kind == capacity.OnDemand {
			caseSpot(r, &twin)
			offs = append(offs, twin)
		}
	}
	return offs
}

// caseSpot makes o a spot offering: 30 to 45 % of its price, reclaimed 1
// to 10 times per 100 node-hours, each reclaim costing half an hour to two
// hours of its on-demand price.
func caseSpot(r *rand.Rand, o *capacity.Offering) {
	od := o.PricePerHour
	o.Kind = capacity.Spot
	o.PricePerHour = round3(od * (0.30 + 0.15*r.Float64()))
	o.InterruptionProbability = round3(0.01 + 0.09*r.Float64())
	o.InterruptionPenalty = round3(od * (0.5 + 1.5*r.Float64()))
}

// caseSize orders node shapes: GPUs first, then CPU, then memory.
func caseSize(r capacity.Resources) float64 {
	return float64(r.GPUs)*1e6 + float64(r.MilliCPU) + float64(r.Memory>>30)/1e3
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
