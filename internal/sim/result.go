package sim

import (
	"time"

	"github.com/tide-project/tide/internal/trace"
)

// Result is what one run of one policy measured.
type Result struct {
	// Policy is the policy's name; Seed the run's seed.
	Policy string
	Seed   uint64
	// NodeHours is the billed machine time, from the simulated cloud's
	// ledger: from each Create to the end of its Delete, boot and idle
	// time included.
	NodeHours float64
	// Cost is the ledger's cost: billed hours × price.
	Cost float64
	// WaitP50, WaitP95 and WaitP99 are percentiles (nearest rank) of the
	// instances' queue wait in seconds, from the job's submit to the
	// instance's first start (for the initial load, from the origin, when
	// it was not running by then). An instance that never started counts
	// as waiting until the end of the run. WaitMean is the mean.
	WaitP50, WaitP95, WaitP99, WaitMean float64
	// WaitCurve is the wait in seconds at each whole percentile from 0 to
	// 100 (101 values; empty without instances), for the report's chart.
	WaitCurve []float64
	// Utilization is the fraction of the billed capacity that running
	// instances requested, in the most used dimension (GPUs for a GPU
	// pool): resource-seconds requested / resource-seconds billed.
	Utilization float64
	// ScaleEvents counts the policy's changes of the desired node count.
	ScaleEvents int
	// Machines counts the machines launched.
	Machines int
	// Disrupted counts instances stopped by a scale-down (a drain or
	// delete of a node running them). It must be 0: anything else is an
	// invariant violation and fails the run.
	Disrupted int
	// Interrupted counts instances stopped by a spot reclaim; they are
	// queued again and restart from the beginning.
	Interrupted int
	// Consolidated counts the nodes consolidation emptied; Moved the
	// restartable instances it moved (queued again, restarting from the
	// beginning); LostWorkHours the work they lost, in instance-hours
	// (each one's run time at the move); ExpectedSaving the sum of the
	// savings the moves expected (node price over the horizon).
	Consolidated, Moved int
	LostWorkHours       float64
	ExpectedSaving      float64
	// Where the billed node-hours went: IdleNodeHours is the time nodes
	// spent in the cluster running nothing (waiting for work or for their
	// release); OutsideNodeHours the billed time of machines not in the
	// cluster (booting, configuring, being deleted). NodeHours less both
	// is the time nodes ran work.
	IdleNodeHours, OutsideNodeHours float64
	// Instances is the number of instances replayed; Unfinished those not
	// completed when the run ended.
	Instances, Unfinished int
	// End is when the run ended, from the trace's origin: every instance
	// done and the pool back at its floor, or Tail after the last job.
	End time.Duration
	// Steps is the number of event times the engine processed.
	Steps int
	// Series is the demand and capacity over time, one point per bucket
	// (Options.Buckets).
	Series []Point
	// Gangs counts the jobs split into parts (multi-node jobs);
	// GangWaitP50 and GangWaitP95 are percentiles of their waits in
	// seconds, from submit to the start of their last part (the whole job
	// running; a job never whole counts until the end of the run);
	// PartialGangGPUHours is the GPU-hours their parts held while other
	// parts of the same job waited (0 when gangs start whole).
	Gangs                    int
	GangWaitP50, GangWaitP95 float64
	PartialGangGPUHours      float64

	// waits are every instance's wait, sorted: RunPools merges the pools'.
	waits []waitCount
}

// Point is one bucket of Result.Series: the maxima over the bucket.
type Point struct {
	// At is the bucket's start, from the trace's origin.
	At time.Duration
	// Demand is what running and queued instances request, in nodes of
	// the pool's largest shape (the largest share over the dimensions).
	Demand float64
	// Joined is the number of nodes in the cluster; Billed the number of
	// machines the cloud bills (booting and leaving ones included).
	Joined, Billed int
}

// seriesRecorder folds steps into buckets.
type seriesRecorder struct {
	width  time.Duration
	points []Point
}

func (s *seriesRecorder) add(at time.Duration, demand float64, joined, billed int) {
	start := at - at%s.width
	n := len(s.points)
	if n == 0 || s.points[n-1].At != start {
		// Carry the last values into buckets the run skipped over, so the
		// curve holds its level between events.
		if n > 0 {
			last := s.points[n-1]
			for b := last.At + s.width; b < start; b += s.width {
				s.points = append(s.points, Point{At: b, Demand: last.Demand, Joined: last.Joined, Billed: last.Billed})
			}
		}
		s.points = append(s.points, Point{At: start, Demand: demand, Joined: joined, Billed: billed})
		return
	}
	p := &s.points[n-1]
	p.Demand = max(p.Demand, demand)
	p.Joined = max(p.Joined, joined)
	p.Billed = max(p.Billed, billed)
}

// Report is a benchmark: one workload on one pool under one or more
// policies, beside the offline lower bound.
type Report struct {
	// Trace is the trace's file name.
	Trace string
	// Config is the simulation's configuration.
	Config *Config
	// Workload is the prepared workload.
	Workload *Workload
	// Bound is the offline lower bound (trace.LowerBound) of the workload
	// on the pool's offerings.
	Bound trace.Bound
	// Results has one entry per policy, in the order run.
	Results []*Result
	// Skipped are the policies asked for that cannot serve the workload,
	// with the reason (see Applicable).
	Skipped []Skipped
}

// Skipped is a policy not run because it cannot serve the workload.
type Skipped struct {
	Policy string
	// Reason says why, in terms of the pool and the trace.
	Reason string
}

// JSONReport is the machine-readable form of a Report (`tide simulate -o
// json`).
type JSONReport struct {
	Trace string `json:"trace"`
	// Jobs and Instances are what was replayed; MissingBins the bins a
	// series skipped (read as no demand, or no change of a level).
	Jobs        int          `json:"jobs"`
	Instances   int          `json:"instances"`
	MissingBins int          `json:"missing_bins,omitempty"`
	LowerBound  JSONBound    `json:"lower_bound"`
	Policies    []JSONPolicy `json:"policies"`
	// NotApplicable lists the policies that cannot serve the workload.
	NotApplicable []JSONSkipped `json:"not_applicable,omitempty"`
}

// JSONSkipped is a policy not run, with the reason.
type JSONSkipped struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// JSONBound is the lower bound's figures.
type JSONBound struct {
	NodeHours float64 `json:"node_hours"`
	Cost      float64 `json:"cost"`
	// WorkNodeHours is what the work alone needs (a bound for any schedule).
	WorkNodeHours float64 `json:"work_node_hours"`
	PeakNodes     int     `json:"peak_nodes"`
}

// JSONPolicy is one policy's figures.
type JSONPolicy struct {
	Policy      string  `json:"policy"`
	NodeHours   float64 `json:"node_hours"`
	Cost        float64 `json:"cost"`
	WaitP50     float64 `json:"wait_p50_s"`
	WaitP95     float64 `json:"wait_p95_s"`
	WaitP99     float64 `json:"wait_p99_s"`
	Utilization float64 `json:"utilization"`
	ScaleEvents int     `json:"scale_events"`
	Disrupted   int     `json:"disrupted"`
	// BoundRatio is NodeHours over the lower bound's (the table's × bound).
	BoundRatio  float64 `json:"bound_ratio"`
	WaitMean    float64 `json:"wait_mean_s"`
	Machines    int     `json:"machines"`
	Interrupted int     `json:"interrupted"`
	Instances   int     `json:"instances"`
	Unfinished  int     `json:"unfinished"`
	// EndS is when the run ended, in seconds from the trace's origin.
	EndS float64 `json:"end_s"`
	// Consolidated, MovedInstances and LostWorkHours are consolidation's
	// moves: nodes emptied, restartable instances moved, and the work they
	// lost in instance-hours.
	Consolidated   int     `json:"consolidated_nodes"`
	MovedInstances int     `json:"moved_instances"`
	LostWorkHours  float64 `json:"lost_work_instance_hours"`
	// IdleNodeHours and OutsideNodeHours are Result's: billed node-hours
	// of empty nodes in the cluster, and of machines not in it.
	IdleNodeHours    float64 `json:"idle_node_hours"`
	OutsideNodeHours float64 `json:"outside_node_hours"`
	// Gangs, GangWaitP50, GangWaitP95 and PartialGangGPUHours are
	// Result's; omitted for a workload without multi-node jobs.
	Gangs               int     `json:"gangs,omitempty"`
	GangWaitP50         float64 `json:"gang_wait_p50_s,omitempty"`
	GangWaitP95         float64 `json:"gang_wait_p95_s,omitempty"`
	PartialGangGPUHours float64 `json:"partial_gang_gpu_hours,omitempty"`
}

// JSON returns the report in the shape `tide simulate -o json` prints.
func (r *Report) JSON() JSONReport {
	out := JSONReport{Trace: r.Trace, LowerBound: JSONBound{NodeHours: r.Bound.NodeHours, Cost: r.Bound.Cost,
		WorkNodeHours: r.Bound.WorkNodeHours, PeakNodes: r.Bound.PeakNodes},
		Policies: make([]JSONPolicy, 0, len(r.Results))}
	if w := r.Workload; w != nil {
		out.Jobs, out.Instances, out.MissingBins = len(w.Jobs), w.Instances, w.Read.MissingBins
	}
	for _, p := range r.Results {
		ratio := 0.0
		if r.Bound.NodeHours > 0 {
			ratio = p.NodeHours / r.Bound.NodeHours
		}
		out.Policies = append(out.Policies, JSONPolicy{Policy: p.Policy, NodeHours: p.NodeHours, Cost: p.Cost,
			WaitP50: p.WaitP50, WaitP95: p.WaitP95, WaitP99: p.WaitP99, Utilization: p.Utilization,
			ScaleEvents: p.ScaleEvents, Disrupted: p.Disrupted, BoundRatio: ratio, WaitMean: p.WaitMean,
			Machines: p.Machines, Interrupted: p.Interrupted, Instances: p.Instances, Unfinished: p.Unfinished,
			EndS: p.End.Seconds(), Consolidated: p.Consolidated, MovedInstances: p.Moved, LostWorkHours: p.LostWorkHours,
			IdleNodeHours: p.IdleNodeHours, OutsideNodeHours: p.OutsideNodeHours,
			Gangs: p.Gangs, GangWaitP50: p.GangWaitP50, GangWaitP95: p.GangWaitP95, PartialGangGPUHours: p.PartialGangGPUHours})
	}
	for _, s := range r.Skipped {
		out.NotApplicable = append(out.NotApplicable, JSONSkipped(s))
	}
	return out
}

// waitCurve returns the waits (sorted) at each whole percentile, 0 to 100.
func waitCurve(sorted []waitCount) []float64 {
	if len(sorted) == 0 {
		return nil
	}
	out := make([]float64, 101)
	out[0] = sorted[0].sec
	for p := 1; p <= 100; p++ {
		out[p] = percentile(sorted, float64(p))
	}
	return out
}
