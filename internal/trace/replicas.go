package trace

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// maxReplicas caps the replicas one bin may need, so that a PerReplica
// given in the wrong unit fails instead of exhausting memory.
const maxReplicas = 1 << 24

// Replicas turns a rate or level series into instances of one shape, as a
// service's horizontal autoscaler would run them: in each bin, the number
// of replicas is
//
//	rate series:  ceil(Value / Width in seconds / PerReplica)
//	level series: ceil(Value / PerReplica)
//
// and never below Min. The count follows the mean rate of each bin, so the
// replicas are busy at PerReplica on average within a bin but may queue
// within it; choose PerReplica below a replica's peak throughput to leave
// headroom. For example, azure-llm2023-rate with PerReplica 2 (requests/s
// one LLM replica sustains) and Shape 1 GPU; helios-gpu-demand with
// PerReplica 1 and Shape 1 GPU (one replica per GPU demanded);
// philly-active-nodes with PerReplica 1 and Shape a whole node.
type Replicas struct {
	// PerReplica is what one replica carries: for a rate series the
	// arrivals per second it serves, for a level series the amount of the
	// level (GPUs, nodes) it stands for. It must be positive.
	PerReplica float64
	// Shape is what one replica requests.
	Shape capacity.Resources
	// Min is the fewest replicas at any time, a serving floor (≥ 0).
	Min int
}

// Validate checks the converter's fields; errors name the field.
func (c Replicas) Validate() error {
	var errs []error
	if !(c.PerReplica > 0) || math.IsInf(c.PerReplica, 0) {
		errs = append(errs, fmt.Errorf("per_replica: must be a positive finite number, got %v", c.PerReplica))
	}
	if c.Shape.Negative() {
		errs = append(errs, errors.New("shape: must not be negative"))
	}
	if c.Min < 0 || c.Min > maxReplicas {
		errs = append(errs, fmt.Errorf("min: must be within [0, %d], got %d", maxReplicas, c.Min))
	}
	return errors.Join(errs...)
}

// Count returns the number of replicas bin b of a series of the given kind
// needs.
func (c Replicas) Count(kind Kind, b Bin) (int, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	var need float64
	switch kind {
	case KindRate:
		if b.Width <= 0 {
			return 0, fmt.Errorf("bin at %v: width: must be positive for a rate, got %v", b.Start, b.Width)
		}
		need = b.Value / b.Width.Seconds() / c.PerReplica
	case KindLevel:
		need = b.Value / c.PerReplica
	default:
		return 0, fmt.Errorf("%w: replicas follow a rate or level series, not %s", ErrWrongKind, kind)
	}
	if !(need >= 0) {
		return 0, fmt.Errorf("bin at %v: value: must be a non-negative number, got %v", b.Start, b.Value)
	}
	if need > maxReplicas {
		return 0, fmt.Errorf("bin at %v: needs %.0f replicas, more than %d: %w (is per_replica in the right unit?)", b.Start, need, maxReplicas, ErrOutOfRange)
	}
	return max(int(scaleUp(need, 1)), c.Min), nil
}

// Jobs turns the bins of a series (sorted, non-overlapping) into replica
// jobs with Requests = Shape, ready for the same replay and LowerBound as a
// job trace. Replica k (k = 1, 2, ...) runs while a bin needs at least k
// replicas: it is submitted at the start of the bin where the count rises
// to k and ends at the start of the bin where the count falls below k, so
// the newest replica is the first removed. Replicas that start and end
// together are one Job with Replicas > 1. Where bins are missing (a gap
// left by skipped rows), the count is Min. Every replica ends when the
// series ends. The jobs come sorted by Submit; IDs are "replica-N".
func (c Replicas) Jobs(kind Kind, bins []Bin) ([]Job, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	type level struct {
		start, end time.Duration
		k          int
	}
	var open []time.Duration // open[k-1] is when level k started
	var done []level
	closeTo := func(n int, at time.Duration) {
		for len(open) > n {
			k := len(open)
			done = append(done, level{start: open[k-1], end: at, k: k})
			open = open[:k-1]
		}
	}
	var prevEnd time.Duration
	for i, b := range bins {
		if b.Width <= 0 {
			return nil, fmt.Errorf("bin %d at %v: width: must be positive, got %v", i, b.Start, b.Width)
		}
		if b.Start < 0 {
			return nil, fmt.Errorf("bin %d: start: must not be negative, got %v", i, b.Start)
		}
		if i > 0 && b.Start < prevEnd {
			return nil, fmt.Errorf("bin %d: start %v is before the previous bin's end %v: %w", i, b.Start, prevEnd, ErrUnsorted)
		}
		if i > 0 && b.Start > prevEnd {
			closeTo(c.Min, prevEnd)
		}
		n, err := c.Count(kind, b)
		if err != nil {
			return nil, fmt.Errorf("bin %d: %w", i, err)
		}
		closeTo(n, b.Start)
		for len(open) < n {
			open = append(open, b.Start)
		}
		prevEnd = b.End()
	}
	closeTo(0, prevEnd)
	slices.SortFunc(done, func(a, b level) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.k, b.k))
	})
	var jobs []Job
	for _, l := range done {
		if n := len(jobs); n > 0 && jobs[n-1].Submit == l.start && jobs[n-1].Duration == l.end-l.start {
			jobs[n-1].Replicas++
			continue
		}
		jobs = append(jobs, Job{Submit: l.start, Duration: l.end - l.start, Requests: c.Shape.Clone(), Replicas: 1})
	}
	for i := range jobs {
		jobs[i].ID = "replica-" + strconv.Itoa(i+1)
	}
	return jobs, nil
}
