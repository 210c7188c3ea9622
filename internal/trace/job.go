package trace

import (
	"fmt"
	"math"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Job is one row of a job trace: Replicas identical instances, each asking
// for Requests, that arrive at Submit and each run for Duration once placed.
type Job struct {
	// ID names the job in the trace: job_id, or job_id/task_index or
	// job_id/task_id where the trace has tasks; "line-N" when it has no
	// job_id column.
	ID string
	// Submit is when the job arrives, from the trace's origin.
	Submit time.Duration
	// Start is when the source cluster started the job, from the same
	// origin; valid only when HasStart. A replay ignores it (the simulated
	// scheduler decides when the job starts); it shows the source's queueing.
	Start time.Duration
	// HasStart reports whether the trace gives Start.
	HasStart bool
	// Duration is how long each replica runs once started. For a Censored
	// job it is only the part the trace saw (0 when the trace gives none).
	Duration time.Duration
	// Censored reports that the trace does not give the whole run time: the
	// job was still running at the end of the trace window (blank
	// duration_s, or alive_at_end=1), or it was never scheduled at all
	// (alibaba-gpu2023-pods deleted while Pending). End(horizon) lets such
	// a job run to a chosen horizon.
	Censored bool
	// Preexisting reports that the job existed before the trace origin (the
	// traces clamp its Submit and Start to 0). Replay it as the initial load.
	Preexisting bool
	// Requests is what one replica asks for.
	Requests capacity.Resources
	// Replicas is the number of identical instances, at least 1.
	Replicas int
	// Parts is how many parts SplitTo cut each replica into (0 when not
	// split): a split job is one multi-node job, a gang.
	Parts int
	// Labels holds the trace's other non-blank columns by name (vc, qos,
	// phase, priority, ...); nil with Options.DropLabels.
	Labels map[string]string
}

// End returns when the job's replicas end if they start at Submit: Submit +
// Duration, or for a Censored job the later of that and horizon.
func (j *Job) End(horizon time.Duration) time.Duration {
	end := j.Submit + j.Duration
	if j.Censored && horizon > end {
		end = horizon
	}
	return end
}

// SplitTo returns j with each replica split into the fewest equal parts k
// that fit within limit (usually the node shape), so that a 32-GPU job
// becomes 4 replicas of 8 GPUs on 8-GPU nodes. Only the dimensions in which
// limit is positive are considered; every dimension of the request is
// divided by k and rounded up, so the parts together may ask for slightly
// more than the whole (12 GPUs on 8-GPU nodes: k = 2, 2 × 6 GPUs exactly;
// 10 CPUs on 4-CPU nodes: k = 3, 3 × 4 CPUs). Replicas is multiplied by k.
// split reports whether j was split. The replicas of a split job are a gang
// in the source trace; a replay that starts them separately is optimistic.
func (j Job) SplitTo(limit capacity.Resources) (out Job, split bool, err error) {
	k := int64(1)
	dim := func(req, lim int64) {
		if lim > 0 && req > lim {
			k = max(k, (req-1)/lim+1)
		}
	}
	dim(j.Requests.MilliCPU, limit.MilliCPU)
	dim(j.Requests.Memory, limit.Memory)
	dim(j.Requests.GPUs, limit.GPUs)
	for name, v := range j.Requests.Extended {
		dim(v, limit.Extended[name])
	}
	if k == 1 {
		return j, false, nil
	}
	if int64(j.Replicas) > math.MaxInt32/k {
		return j, false, fmt.Errorf("job %s: splitting %d replicas into %d parts each: %w", j.ID, j.Replicas, k, ErrOutOfRange)
	}
	part := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return (v-1)/k + 1
	}
	r := capacity.Resources{MilliCPU: part(j.Requests.MilliCPU), Memory: part(j.Requests.Memory), GPUs: part(j.Requests.GPUs)}
	if len(j.Requests.Extended) > 0 {
		r.Extended = make(map[string]int64, len(j.Requests.Extended))
		for name, v := range j.Requests.Extended {
			r.Extended[name] = part(v)
		}
	}
	j.Requests = r
	j.Replicas *= int(k)
	j.Parts = max(j.Parts, 1) * int(k)
	return j, true, nil
}

// NodeShape is one row of a node list: a node's resources.
type NodeShape struct {
	// ID is node_id.
	ID string
	// Resources is what the node provides.
	Resources capacity.Resources
	// Labels holds the other non-blank columns (gpu_model, ...).
	Labels map[string]string
}

// Bin is one time bin of a rate or level series.
type Bin struct {
	// Start is the start of the bin, from the trace's origin (t_s).
	Start time.Duration
	// Width is the bin's length; every bin of a series has the same.
	Width time.Duration
	// Value is, for a rate series, the number of arrivals in the bin (the
	// requests column); for a level series, the amount present during the
	// bin (GPUs or nodes demanded). It is never negative.
	Value float64
	// Capacity is what the source cluster had during the bin (gpus_capacity,
	// nodes_total), for comparison; 0 when the format has no such column.
	Capacity float64
}

// End returns the end of the bin.
func (b Bin) End() time.Duration { return b.Start + b.Width }
