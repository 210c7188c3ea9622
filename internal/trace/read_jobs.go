package trace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
)

func (r *Reader) initJobs() error {
	c := &r.jc
	c.id, c.submit, c.start, c.duration = r.col(colJobID), r.col(colSubmit), r.col(colStart), r.col(colDuration)
	c.task = r.col(colTaskIndex)
	if c.task < 0 {
		c.task = r.col(colTaskID)
	}
	c.gpus, c.gpuMilli, c.cpus, c.mem = r.col(colGPUs), r.col(colGPUMilli), r.col(colCPUs), r.col(colMemGB)
	c.cpuNorm, c.memNorm = r.col(colCPUNorm), r.col(colMemNorm)
	c.pre, c.ae = r.col(colPreexisting), r.col(colAliveAtEnd)
	c.replicas = -1
	for _, name := range replicaColumns {
		if i := r.col(name); i >= 0 {
			c.replicas = i
			break
		}
	}
	if c.submit < 0 {
		return r.missing(colSubmit, "jobs need an arrival time")
	}
	if c.duration < 0 {
		return r.missing(colDuration, "jobs need a run time")
	}
	if c.gpus < 0 && c.cpus < 0 && c.mem < 0 && c.cpuNorm < 0 && c.memNorm < 0 {
		return r.missing("gpus", "jobs need at least one of gpus, cpus, mem_gb, cpu_norm, mem_norm")
	}
	if !r.opts.IgnoreNormalized {
		if c.cpuNorm >= 0 && r.opts.NormalizedMachine.MilliCPU <= 0 {
			return r.headerErr(c.cpuNorm, colCPUNorm, fmt.Errorf("%w: the trace gives CPU as a fraction of its largest machine; say what a CPU of 1.0 stands for (workload.normalized_machine in a simulation config)", ErrNeedOption))
		}
		if c.memNorm >= 0 && r.opts.NormalizedMachine.Memory <= 0 {
			return r.headerErr(c.memNorm, colMemNorm, fmt.Errorf("%w: the trace gives memory as a fraction of its largest machine; say what a memory of 1.0 stands for (workload.normalized_machine in a simulation config)", ErrNeedOption))
		}
	}
	used := []int{c.id, c.task, c.submit, c.start, c.duration, c.gpus, c.cpus, c.mem, c.cpuNorm, c.memNorm, c.replicas, c.pre, c.ae}
	if r.opts.GPUShareResource != "" {
		used = append(used, c.gpuMilli)
	}
	c.labels = r.labelColumns(used)
	return nil
}

// labelColumns returns the indexes of the columns not in used, unless
// labels are dropped.
func (r *Reader) labelColumns(used []int) []int {
	if r.opts.DropLabels {
		return nil
	}
	var out []int
	for i := range r.header {
		if !slices.Contains(used, i) {
			out = append(out, i)
		}
	}
	return out
}

// NextJob returns the next job of a job trace, io.EOF after the last. A
// malformed row is an *Error naming the file, line and column, unless
// Options.SkipBadRows is set.
func (r *Reader) NextJob() (Job, error) {
	if r.format.Kind != KindJobs {
		return Job{}, r.wrongKind("a job trace")
	}
	for {
		rec, err := r.record()
		if errors.Is(err, io.EOF) {
			return Job{}, io.EOF
		}
		var j Job
		if err == nil {
			j, err = r.parseJob(rec)
		}
		split := false
		if err == nil && !r.opts.SplitTo.IsZero() {
			if j, split, err = j.SplitTo(r.opts.SplitTo); err != nil {
				err = r.cellErr(-1, err)
			}
		}
		if err != nil {
			if err = r.handle(err); err != nil {
				return Job{}, err
			}
			continue
		}
		r.lastSubmit = j.Submit
		r.stats.Rows++
		if j.Censored {
			r.stats.Censored++
		}
		if j.Preexisting {
			r.stats.Preexisting++
		}
		if j.Requests.IsZero() {
			r.stats.NoRequest++
		}
		if split {
			r.stats.Split++
		}
		r.skippedSince = false
		return j, nil
	}
}

func (r *Reader) parseJob(rec []string) (Job, error) {
	c := &r.jc
	var j Job
	var err error
	if c.id >= 0 {
		id := strings.TrimSpace(rec[c.id])
		if id == "" {
			return j, r.cellErr(c.id, ErrMissingValue)
		}
		if c.task >= 0 && strings.TrimSpace(rec[c.task]) != "" {
			id += "/" + strings.TrimSpace(rec[c.task])
		}
		j.ID = strings.Clone(id)
	} else {
		j.ID = "line-" + strconv.Itoa(r.line)
	}
	if j.Submit, _, err = r.seconds(rec, c.submit, true); err != nil {
		return j, err
	}
	if j.Submit < r.lastSubmit {
		return j, r.cellErr(c.submit, fmt.Errorf("%w: %s %q is before the previous row's %gs", ErrUnsorted, colSubmit, rec[c.submit], r.lastSubmit.Seconds()))
	}
	if j.Start, j.HasStart, err = r.seconds(rec, c.start, false); err != nil {
		return j, err
	}
	var hasDur bool
	if j.Duration, hasDur, err = r.seconds(rec, c.duration, false); err != nil {
		return j, err
	}
	j.Censored = !hasDur
	if j.Preexisting, err = r.flag(rec, c.pre); err != nil {
		return j, err
	}
	alive, err := r.flag(rec, c.ae)
	if err != nil {
		return j, err
	}
	j.Censored = j.Censored || alive
	j.Replicas = 1
	if n, ok, err := r.count(rec, c.replicas); err != nil {
		return j, err
	} else if ok {
		if n == 0 {
			return j, r.cellErr(c.replicas, fmt.Errorf("%w: a job needs at least 1 replica, got 0", ErrOutOfRange))
		}
		j.Replicas = int(n)
	}
	if j.Requests, err = r.requests(rec); err != nil {
		return j, err
	}
	j.Labels = r.labels(rec)
	return j, nil
}

// requests reads the resource request of a job or node row.
func (r *Reader) requests(rec []string) (capacity.Resources, error) {
	c := &r.jc
	var res capacity.Resources
	gpus, _, err := r.count(rec, c.gpus)
	if err != nil {
		return res, err
	}
	res.GPUs = gpus
	cpu, hasCPU, err := r.amount(rec, c.cpus, maxCores)
	if err != nil {
		return res, err
	}
	if hasCPU {
		res.MilliCPU = scaleUp(cpu, 1000)
	} else if !r.opts.IgnoreNormalized {
		norm, ok, err := r.amount(rec, c.cpuNorm, maxCores)
		if err != nil {
			return res, err
		}
		if ok {
			res.MilliCPU = scaleUp(norm, float64(r.opts.NormalizedMachine.MilliCPU))
		}
	}
	mem, hasMem, err := r.amount(rec, c.mem, maxGiB)
	if err != nil {
		return res, err
	}
	if hasMem {
		res.Memory = scaleUp(mem, 1<<30)
	} else if !r.opts.IgnoreNormalized {
		norm, ok, err := r.amount(rec, c.memNorm, maxGiB)
		if err != nil {
			return res, err
		}
		if ok {
			res.Memory = scaleUp(norm, float64(r.opts.NormalizedMachine.Memory))
		}
	}
	if c.gpuMilli >= 0 {
		milli, ok, err := r.count(rec, c.gpuMilli)
		if err != nil {
			return res, err
		}
		if ok && milli > 1000 {
			return res, r.cellErr(c.gpuMilli, fmt.Errorf("%w: thousandths of one GPU must be at most 1000, got %d", ErrOutOfRange, milli))
		}
		if name := r.opts.GPUShareResource; name != "" {
			share := res.GPUs * 1000
			if ok && res.GPUs == 1 && milli > 0 {
				share = milli
			}
			res.GPUs = 0
			if share > 0 {
				res.Extended = map[string]int64{name: share}
			}
		}
	} else if name := r.opts.GPUShareResource; name != "" && res.GPUs > 0 {
		res.Extended = map[string]int64{name: res.GPUs * 1000}
		res.GPUs = 0
	}
	return res, nil
}

func (r *Reader) labels(rec []string) map[string]string {
	var m map[string]string
	for _, i := range r.jc.labels {
		v := strings.TrimSpace(rec[i])
		if v == "" {
			continue
		}
		if m == nil {
			m = make(map[string]string, len(r.jc.labels))
		}
		m[r.header[i]] = strings.Clone(v)
	}
	return m
}

// scaleUp returns v × unit rounded up to a whole number, where a product
// within 1e-12 (relative) of a whole number is that number, so that float
// noise (11.3 × 1000 = 11300.000000000002) does not add a unit.
func scaleUp(v, unit float64) int64 {
	x := v * unit
	if r := math.Round(x); math.Abs(x-r) <= 1e-12*max(1, math.Abs(x)) {
		return int64(r)
	}
	return int64(math.Ceil(x))
}

func (r *Reader) initNodes() error {
	c := &r.jc
	*c = jobColumns{id: r.col(colNodeID), task: -1, submit: -1, start: -1, duration: -1,
		gpus: r.col(colGPUs), gpuMilli: -1, cpus: r.col(colCPUs), mem: r.col(colMemGB),
		cpuNorm: -1, memNorm: -1, replicas: -1, pre: -1, ae: -1}
	if c.id < 0 {
		return r.missing(colNodeID, "nodes need a name")
	}
	if c.gpus < 0 && c.cpus < 0 && c.mem < 0 {
		return r.missing("cpus", "nodes need at least one of cpus, mem_gb, gpus")
	}
	c.labels = r.labelColumns([]int{c.id, c.gpus, c.cpus, c.mem})
	return nil
}

// NextNode returns the next node of a node list, io.EOF after the last.
func (r *Reader) NextNode() (NodeShape, error) {
	if r.format.Kind != KindNodes {
		return NodeShape{}, r.wrongKind("a node list")
	}
	for {
		rec, err := r.record()
		if errors.Is(err, io.EOF) {
			return NodeShape{}, io.EOF
		}
		var n NodeShape
		if err == nil {
			n, err = r.parseNode(rec)
		}
		if err != nil {
			if err = r.handle(err); err != nil {
				return NodeShape{}, err
			}
			continue
		}
		r.stats.Rows++
		r.skippedSince = false
		return n, nil
	}
}

func (r *Reader) parseNode(rec []string) (NodeShape, error) {
	var n NodeShape
	id := strings.TrimSpace(rec[r.jc.id])
	if id == "" {
		return n, r.cellErr(r.jc.id, ErrMissingValue)
	}
	n.ID = strings.Clone(id)
	var err error
	if n.Resources, err = r.requests(rec); err != nil {
		return n, err
	}
	n.Labels = r.labels(rec)
	return n, nil
}
