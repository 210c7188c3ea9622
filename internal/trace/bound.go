package trace

// This file is pure: no I/O, no clock. LowerBound is a function of its
// arguments only.

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// BoundOptions changes how LowerBound reads the jobs.
type BoundOptions struct {
	// Horizon is when Censored jobs end (see Job.End): the end of the
	// replay. Zero ends them at Submit + Duration.
	Horizon time.Duration
	// Curve records each offering's node count over time (OfferingBound.Curve).
	Curve bool
}

// Step is one point of a node-count curve: Nodes from At until the next Step.
type Step struct {
	At    time.Duration
	Nodes int
}

// OfferingBound is the offline lower bound for a fleet of one offering.
type OfferingBound struct {
	// Offering is the offering; its Resources are the node shape.
	Offering capacity.Offering
	// NodeHours is the integral over time of the bin-pack lower bound
	// (binpack.LowerBound) of the replicas running at each moment, when
	// every job starts at Submit and no node takes time to boot.
	NodeHours float64
	// Cost is NodeHours × the offering's effective cost per node-hour
	// (price + interruption probability × penalty).
	Cost float64
	// PeakNodes is the largest node count at any moment.
	PeakNodes int
	// WorkNodeHours is the largest, over the dimensions, of the resource-
	// time requested divided by the node's capacity: a weaker bound that
	// holds for any schedule, even one that delays jobs (NodeHours holds for
	// schedules that start every job at its submit time).
	WorkNodeHours float64
	// Unfit counts the replicas that fit no node of this offering; the
	// offering is then infeasible and its figures cover the other replicas.
	Unfit int
	// FirstUnfit is the ID of the first job with such replicas.
	FirstUnfit string
	// Curve is the node count over time, recorded with BoundOptions.Curve:
	// a Step at every change, from the first arrival to the last end (0).
	Curve []Step
}

// Feasible reports whether every replica fits a node of the offering.
func (b *OfferingBound) Feasible() bool { return b.Unfit == 0 }

// Bound is the offline lower bound of a workload: capacity that follows
// demand exactly, with no boot delay and perfect packing at each moment.
// Its embedded OfferingBound is the cheapest feasible offering's: the
// cheapest fleet of one node shape. A fleet mixing shapes can be cheaper
// than every single-shape fleet; MixCost bounds that.
type Bound struct {
	OfferingBound
	// Start and End span the demand: the first arrival and the last end.
	Start, End time.Duration
	// ReplicaHours is the sum over replicas of their run time, in hours.
	ReplicaHours float64
	// MixCost is a floor on the cost of any mix of the offerings that
	// follows demand: at each moment, the largest over dimensions of the
	// demand times the cheapest effective cost per unit of that dimension
	// (so ≤ Cost). It holds for any mix, but is loose when one dimension's
	// cheapest supplier is another's dearest.
	MixCost float64
	// Offerings has one bound per offering, in the order given.
	Offerings []OfferingBound
}

// LowerBound computes the offline lower bound of jobs on each offering
// (see Bound): it sweeps the jobs' start and end times and, between two
// consecutive times, counts binpack.LowerBound of the running replicas on
// each offering's node shape. Each job runs Replicas replicas from Submit to
// End(opts.Horizon); jobs that end at or before their start add nothing.
// It fails when the arguments are invalid (a negative duration, request or
// replica count, an invalid offering) or when no offering fits every job.
func LowerBound(jobs []Job, offerings []capacity.Offering, opts BoundOptions) (Bound, error) {
	if len(offerings) == 0 {
		return Bound{}, errors.New("offerings: need at least one")
	}
	for i, o := range offerings {
		if err := o.Validate(); err != nil {
			return Bound{}, fmt.Errorf("offerings[%d] (%s): %w", i, o.Name(), err)
		}
	}
	if opts.Horizon < 0 {
		return Bound{}, fmt.Errorf("horizon: must not be negative, got %v", opts.Horizon)
	}
	s, err := newSweep(jobs, offerings, opts)
	if err != nil {
		return Bound{}, err
	}
	s.run()
	return s.result(offerings), nil
}

// interval is one job's replicas on the sweep.
type interval struct {
	start, end time.Duration
	shape      int // index into sweep.shapes
	count      int
}

type shapeKey struct {
	cpu, mem, gpu int64
	ext           string
}

func keyOf(r capacity.Resources) shapeKey {
	k := shapeKey{cpu: r.MilliCPU, mem: r.Memory, gpu: r.GPUs}
	if names := r.ExtendedNames(); len(names) > 0 {
		var b strings.Builder
		for _, n := range names {
			b.WriteString(n)
			b.WriteByte('=')
			b.WriteString(strconv.FormatInt(r.Extended[n], 10))
			b.WriteByte(';')
		}
		k.ext = b.String()
	}
	return k
}

// sweep holds the state of LowerBound's sweep over time.
type sweep struct {
	opts      BoundOptions
	ivals     []interval
	shapes    []capacity.Resources // distinct job shapes
	nodes     []capacity.Resources // distinct node shapes
	nodeOf    []int                // offering → node shape
	dims      []string             // extended dimension names after cpu, memory, gpus
	vec       [][]float64          // job shape → request per dimension
	unit      []float64            // dimension → cheapest effective cost per unit-hour
	work      []float64            // dimension → Σ request × seconds
	unfit     []int                // node shape → replicas that fit nowhere
	firstBad  []string             // node shape → first unfit job
	start     time.Duration
	end       time.Duration
	replicaNs u128

	// running state
	active    []capacity.Pending
	activeOf  []int // active index → job shape
	pos       []int // job shape → index in active, -1 when inactive
	totals    []float64
	cur       []int  // node shape → current bound
	nodeNs    []u128 // node shape → Σ nodes × ns
	peak      []int
	curves    [][]Step
	mixDollar float64 // Σ $/h × ns
}

func newSweep(jobs []Job, offerings []capacity.Offering, opts BoundOptions) (*sweep, error) {
	s := &sweep{opts: opts, start: math.MaxInt64}
	for _, o := range offerings {
		i := slices.IndexFunc(s.nodes, o.Resources.Equal)
		if i < 0 {
			i = len(s.nodes)
			s.nodes = append(s.nodes, o.Resources)
		}
		s.nodeOf = append(s.nodeOf, i)
	}
	index := make(map[shapeKey]int)
	s.unfit = make([]int, len(s.nodes))
	s.firstBad = make([]string, len(s.nodes))
	var fits [][]bool // job shape → node shape → fits
	for i := range jobs {
		j := &jobs[i]
		switch {
		case j.Replicas < 1:
			return nil, fmt.Errorf("job %s: replicas: must be at least 1, got %d", j.ID, j.Replicas)
		case j.Submit < 0:
			return nil, fmt.Errorf("job %s: submit: must not be negative, got %v", j.ID, j.Submit)
		case j.Duration < 0:
			return nil, fmt.Errorf("job %s: duration: must not be negative, got %v", j.ID, j.Duration)
		case j.Requests.Negative():
			return nil, fmt.Errorf("job %s: requests: must not be negative, got %v", j.ID, j.Requests)
		case j.Submit > math.MaxInt64-j.Duration:
			return nil, fmt.Errorf("job %s: submit + duration: %w", j.ID, ErrOutOfRange)
		}
		end := j.End(opts.Horizon)
		if end <= j.Submit {
			continue
		}
		k := keyOf(j.Requests)
		sh, ok := index[k]
		if !ok {
			sh = len(s.shapes)
			index[k] = sh
			s.shapes = append(s.shapes, j.Requests)
			row := make([]bool, len(s.nodes))
			for n, node := range s.nodes {
				_, row[n] = binpack.PerNode(j.Requests, node)
			}
			fits = append(fits, row)
			for _, name := range j.Requests.ExtendedNames() {
				if !slices.Contains(s.dims, name) {
					s.dims = append(s.dims, name)
				}
			}
		}
		for n := range s.nodes {
			if !fits[sh][n] {
				if s.unfit[n] == 0 {
					s.firstBad[n] = j.ID
				}
				s.unfit[n] = satAdd(s.unfit[n], j.Replicas)
			}
		}
		s.ivals = append(s.ivals, interval{start: j.Submit, end: end, shape: sh, count: j.Replicas})
		s.start, s.end = min(s.start, j.Submit), max(s.end, end)
		s.replicaNs.addMul(uint64(j.Replicas), uint64(end-j.Submit))
	}
	if len(s.ivals) == 0 {
		s.start = 0
	}
	feasible := false
	for n := range s.nodes {
		feasible = feasible || s.unfit[n] == 0
	}
	if !feasible {
		return nil, fmt.Errorf("no offering fits every job: job %s fits no node of %s (%d replicas unfit)", s.firstBad[0], offerings[0].Name(), s.unfit[0])
	}
	nd := 3 + len(s.dims)
	s.vec = make([][]float64, len(s.shapes))
	for i, r := range s.shapes {
		s.vec[i] = s.vector(r)
	}
	s.work = make([]float64, nd)
	for _, iv := range s.ivals {
		secs := (iv.end - iv.start).Seconds()
		for d, v := range s.vec[iv.shape] {
			s.work[d] += float64(iv.count) * v * secs
		}
	}
	s.unit = make([]float64, nd)
	for d := range s.unit {
		s.unit[d] = math.Inf(1)
	}
	for _, o := range offerings {
		for d, c := range s.vector(o.Resources) {
			if c > 0 {
				s.unit[d] = min(s.unit[d], o.EffectiveCost()/c)
			}
		}
	}
	s.pos = slices.Repeat([]int{-1}, len(s.shapes))
	s.totals = make([]float64, nd)
	s.cur = make([]int, len(s.nodes))
	s.nodeNs = make([]u128, len(s.nodes))
	s.peak = make([]int, len(s.nodes))
	if opts.Curve {
		s.curves = make([][]Step, len(s.nodes))
	}
	return s, nil
}

// vector returns r per dimension: millicores, bytes, GPUs, then s.dims.
func (s *sweep) vector(r capacity.Resources) []float64 {
	v := make([]float64, 3+len(s.dims))
	v[0], v[1], v[2] = float64(r.MilliCPU), float64(r.Memory), float64(r.GPUs)
	for d, name := range s.dims {
		v[3+d] = float64(r.Extended[name])
	}
	return v
}

func (s *sweep) run() {
	n := len(s.ivals)
	starts := make([]int, n)
	ends := make([]int, n)
	for i := range n {
		starts[i], ends[i] = i, i
	}
	slices.SortStableFunc(starts, func(a, b int) int { return cmp.Compare(s.ivals[a].start, s.ivals[b].start) })
	slices.SortStableFunc(ends, func(a, b int) int { return cmp.Compare(s.ivals[a].end, s.ivals[b].end) })
	var t time.Duration
	si, ei := 0, 0
	for ei < n {
		next := s.ivals[ends[ei]].end
		if si < n {
			next = min(next, s.ivals[starts[si]].start)
		}
		if dt := next - t; dt > 0 && len(s.active) > 0 {
			s.integrate(dt)
		}
		t = next
		for ei < n && s.ivals[ends[ei]].end == t {
			s.change(s.ivals[ends[ei]], -1)
			ei++
		}
		for si < n && s.ivals[starts[si]].start == t {
			s.change(s.ivals[starts[si]], +1)
			si++
		}
		s.evaluate(t)
	}
}

// change adds (sign +1) or removes (-1) an interval's replicas.
func (s *sweep) change(iv interval, sign int) {
	p := s.pos[iv.shape]
	if p < 0 {
		p = len(s.active)
		s.pos[iv.shape] = p
		s.active = append(s.active, capacity.Pending{Requests: s.shapes[iv.shape]})
		s.activeOf = append(s.activeOf, iv.shape)
	}
	s.active[p].Count += sign * iv.count
	for d, v := range s.vec[iv.shape] {
		s.totals[d] += float64(sign*iv.count) * v
	}
	if s.active[p].Count == 0 {
		last := len(s.active) - 1
		s.active[p], s.activeOf[p] = s.active[last], s.activeOf[last]
		s.pos[s.activeOf[p]] = p
		s.active, s.activeOf = s.active[:last], s.activeOf[:last]
		s.pos[iv.shape] = -1
	}
	if len(s.active) == 0 {
		clear(s.totals) // no float residue once nothing runs
	}
}

// evaluate recomputes each node shape's bound for what runs from t on.
func (s *sweep) evaluate(t time.Duration) {
	for n, node := range s.nodes {
		c, _ := binpack.LowerBound(s.active, node) // unfit groups are counted in s.unfit
		if s.curves != nil && (len(s.curves[n]) == 0 || s.curves[n][len(s.curves[n])-1].Nodes != c) {
			s.curves[n] = append(s.curves[n], Step{At: t, Nodes: c})
		}
		s.cur[n] = c
		s.peak[n] = max(s.peak[n], c)
	}
}

// integrate adds dt of the current state to the running sums.
func (s *sweep) integrate(dt time.Duration) {
	for n := range s.nodes {
		s.nodeNs[n].addMul(uint64(s.cur[n]), uint64(dt))
	}
	rate := 0.0 // $/h a mix needs now, at least
	for d, tot := range s.totals {
		if tot > 0 {
			rate = max(rate, tot*s.unit[d])
		}
	}
	s.mixDollar += rate * float64(dt)
}

func (s *sweep) result(offerings []capacity.Offering) Bound {
	b := Bound{Start: s.start, End: s.end, ReplicaHours: s.replicaNs.hours(), MixCost: s.mixDollar / float64(time.Hour)}
	best := -1
	for i, o := range offerings {
		n := s.nodeOf[i]
		ob := OfferingBound{Offering: o, NodeHours: s.nodeNs[n].hours(), PeakNodes: s.peak[n], Unfit: s.unfit[n], FirstUnfit: s.firstBad[n]}
		ob.Cost = ob.NodeHours * o.EffectiveCost()
		for d, c := range s.vector(o.Resources) {
			if c > 0 {
				ob.WorkNodeHours = max(ob.WorkNodeHours, s.work[d]/c/3600)
			}
		}
		if s.curves != nil {
			ob.Curve = slices.Clone(s.curves[n])
		}
		b.Offerings = append(b.Offerings, ob)
		if !ob.Feasible() {
			continue
		}
		if best < 0 || cheaper(ob, b.Offerings[best]) {
			best = i
		}
	}
	b.OfferingBound = b.Offerings[best]
	b.Curve = slices.Clone(b.Curve)
	return b
}

// cheaper orders feasible offering bounds: lower cost, then lower effective
// cost per node-hour, then fewer node-hours; ties keep the first given.
func cheaper(a, b OfferingBound) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if ea, eb := a.Offering.EffectiveCost(), b.Offering.EffectiveCost(); ea != eb {
		return ea < eb
	}
	return a.NodeHours < b.NodeHours
}

func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// u128 is an unsigned 128-bit accumulator of count × nanoseconds, exact
// where a float64 or int64 sum could lose precision or overflow.
type u128 struct{ hi, lo uint64 }

func (a *u128) addMul(x, y uint64) {
	hi, lo := bits.Mul64(x, y)
	var c uint64
	a.lo, c = bits.Add64(a.lo, lo, 0)
	a.hi += hi + c
}

// hours converts a sum of nanoseconds to hours.
func (a u128) hours() float64 {
	return (float64(a.hi)*(1<<64) + float64(a.lo)) / float64(time.Hour)
}
