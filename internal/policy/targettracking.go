package policy

import (
	"cmp"
	"math"
	"slices"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// How target-tracking computed M (TargetTrackingFigures.Method).
const (
	// MethodNoProvisioning: nothing pending (that fits an offering): M is the
	// number of nodes running at least one non-daemon instance.
	MethodNoProvisioning = "no-provisioning"
	// MethodSingleType: one node size: M = N + max over task groups of the
	// group's exact bin-pack node count.
	MethodSingleType = "single-type"
	// MethodMultiType: several node sizes: per group the least node count
	// over the largest size of each attribute, M = N + max over groups.
	MethodMultiType = "multi-type"
	// MethodMinStepFallback: offerings in more than one zone: M = N + MinStep.
	MethodMinStepFallback = "min-step-fallback"
)

// targetTrackingPolicy is ECS cluster auto scaling (seed 002): it computes M,
// the nodes the pool needs, publishes CapacityProviderReservation = M/N×100,
// and tracks N toward the target capacity as an AWS target tracking policy
// would: scale out at once, scale in only after ScaleInDatapoints consecutive
// datapoints below target (one datapoint per MetricPeriod).
//
// M with nothing provisioning is the number of nodes running a non-daemon
// instance (Figures 1, 3, 4: M = N when all are busy, otherwise the busy
// count, never an optimal repacking). With a backlog, M = N + a bin-pack
// estimate, clamped to [N + MinStep, N + MaxStep].
type targetTrackingPolicy struct {
	cfg Config
	// types are the distinct node sizes among the offerings (ECS instance types).
	types []capacity.Resources
	// largest indexes types: for each attribute (cpu, memory, gpus, each
	// extended resource) the type with the most of it (multi-type rule).
	largest []int
	// multiZone is set when the offerings name more than one zone.
	multiZone bool
}

// NewTargetTracking returns the target-tracking policy for a validated cfg.
func NewTargetTracking(cfg Config) Policy {
	if cfg.TargetCapacity <= 0 { // unvalidated config: avoid dividing by zero
		cfg.TargetCapacity = 100
	}
	p := &targetTrackingPolicy{cfg: cfg}
	zones := map[string]bool{}
	for _, o := range cfg.Offerings {
		if o.Zone != "" {
			zones[o.Zone] = true
		}
		if !slices.ContainsFunc(p.types, o.Resources.Equal) {
			p.types = append(p.types, o.Resources)
		}
	}
	// The seed falls back to M = N + minimumScalingStepSize when the ASG
	// "isn't confined to a single-AZ". Our reading: a pool whose offerings
	// name two or more distinct zones may launch a node where the pending
	// work cannot run (zone-bound volumes or constraints, zone rebalancing),
	// so the bin-pack count is no longer a lower bound. An empty zone means
	// "any or the only one" and does not count as a zone of its own.
	p.multiZone = len(zones) > 1
	p.largest = largestTypes(p.types)
	return p
}

// largestTypes returns, for each attribute, the index of the type with the
// most of it (ties: the type that is larger in cpu, then memory, then gpus;
// then the first). Attributes no type has are skipped; duplicates removed.
func largestTypes(types []capacity.Resources) []int {
	attrs := []func(capacity.Resources) int64{
		func(r capacity.Resources) int64 { return r.MilliCPU },
		func(r capacity.Resources) int64 { return r.Memory },
		func(r capacity.Resources) int64 { return r.GPUs },
	}
	var ext []string
	for _, t := range types {
		for _, k := range t.ExtendedNames() {
			if !slices.Contains(ext, k) {
				ext = append(ext, k)
			}
		}
	}
	slices.Sort(ext)
	for _, k := range ext {
		attrs = append(attrs, func(r capacity.Resources) int64 { return r.Extended[k] })
	}
	larger := func(a, b capacity.Resources) int {
		return cmp.Or(cmp.Compare(a.MilliCPU, b.MilliCPU), cmp.Compare(a.Memory, b.Memory), cmp.Compare(a.GPUs, b.GPUs))
	}
	var out []int
	for _, attr := range attrs {
		best := -1
		for i, t := range types {
			v := attr(t)
			if v <= 0 {
				continue
			}
			if best < 0 || v > attr(types[best]) || v == attr(types[best]) && larger(t, types[best]) > 0 {
				best = i
			}
		}
		if best >= 0 && !slices.Contains(out, best) {
			out = append(out, best)
		}
	}
	return out
}

// Name returns "target-tracking".
func (p *targetTrackingPolicy) Name() string { return TargetTracking }

// ttEstimate is M and how it was found.
type ttEstimate struct {
	m      int
	method string
	unfit  int // pending instances that fit no offering (ignored for M)
}

// estimate computes M for a pool of n nodes.
func (p *targetTrackingPolicy) estimate(pr *capacity.Pressure, n int) ttEstimate {
	groups := ttGroups(pr.Pending)
	var e ttEstimate
	add, fitting := 0, 0
	for _, g := range groups {
		need, ok := p.groupNodes(g)
		if !ok {
			e.unfit = validate.Add(e.unfit, g.Count)
			continue
		}
		fitting++
		add = max(add, need)
	}
	switch {
	case fitting == 0:
		// Nothing provisioning (a group that fits no offering is ignored):
		// M = N if every node runs a non-daemon instance, else the number
		// of nodes that do; both are the busy count.
		e.m, e.method = pr.BusyNodes(), MethodNoProvisioning
		return e
	case p.multiZone:
		e.m, e.method = validate.Add(n, p.cfg.MinStep), MethodMinStepFallback
		return e
	case len(p.types) == 1:
		e.method = MethodSingleType
	default:
		e.method = MethodMultiType
	}
	e.m = min(max(validate.Add(n, add), validate.Add(n, p.cfg.MinStep)), validate.Add(n, p.cfg.MaxStep))
	return e
}

// groupNodes returns the node count one task group needs: with one type,
// its exact bin-pack count; with several, the least count over the largest
// types that fit it. A group that fits none of the largest types but fits
// another type (possible when no type is largest in every attribute) takes
// the least count over the types it fits. ok is false when no type fits.
//
// A count of math.MaxInt is a legitimate answer (a saturated huge group), so
// "no type fits yet" is ok, never a sentinel value.
func (p *targetTrackingPolicy) groupNodes(g capacity.Pending) (n int, ok bool) {
	best := math.MaxInt
	for _, i := range p.largest {
		if c, fit := binpack.NodesFor(g.Requests, g.Count, p.types[i]); fit {
			best, ok = min(best, c), true
		}
	}
	if !ok {
		for _, t := range p.types {
			if c, fit := binpack.NodesFor(g.Requests, g.Count, t); fit {
				best, ok = min(best, c), true
			}
		}
	}
	if !ok {
		return 0, false
	}
	return best, true
}

// ttGroups merges pending groups with identical requests (ECS groups the
// provisioning tasks by exact resource requirements); counts ≤ 0 are dropped.
func ttGroups(pending []capacity.Pending) []capacity.Pending {
	out := make([]capacity.Pending, 0, len(pending))
	for _, g := range pending {
		if g.Count > 0 {
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b capacity.Pending) int {
		return cmp.Or(cmp.Compare(a.Requests.MilliCPU, b.Requests.MilliCPU),
			cmp.Compare(a.Requests.Memory, b.Requests.Memory), cmp.Compare(a.Requests.GPUs, b.Requests.GPUs))
	})
	merged := out[:0]
	for _, g := range out {
		// Equal cpu/memory/gpus are adjacent; search that run for equal extended resources.
		j := len(merged) - 1
		for ; j >= 0; j-- {
			r := merged[j].Requests
			if r.MilliCPU != g.Requests.MilliCPU || r.Memory != g.Requests.Memory || r.GPUs != g.Requests.GPUs {
				j = -1
				break
			}
			if r.Equal(g.Requests) {
				break
			}
		}
		if j >= 0 {
			merged[j].Count = validate.Add(merged[j].Count, g.Count)
		} else {
			merged = append(merged, g)
		}
	}
	return merged
}

// ttMetric is CapacityProviderReservation as an exact fraction num/den.
type ttMetric struct{ num, den int64 }

// ttReservation returns M/N×100, with the seed's special cases: 100 when M
// and N are both zero, 200 when M > 0 and N = 0.
func ttReservation(m, n int) ttMetric {
	switch {
	case n > 0:
		return ttMetric{num: validate.Mul64(100, int64(m)), den: int64(n)}
	case m == 0:
		return ttMetric{num: 100, den: 1}
	default:
		return ttMetric{num: 200, den: 1}
	}
}

// float is the metric as published (TargetTrackingFigures.Reservation).
func (r ttMetric) float() float64 { return float64(r.num) / float64(r.den) }

// percent is the metric rounded down, as the seed quotes it (133, 66).
func (r ttMetric) percent() int64 { return r.num / r.den }

// cmpTarget compares the metric with a target in percent.
func (r ttMetric) cmpTarget(t int) int { return cmp.Compare(r.num, int64(t)*r.den) }

// desired is the capacity target tracking asks for, ceil(max(N,1) × metric
// / T): a group at zero capacity counts as capacity 1 (the seed's
// scale-from-zero rule). With N > 0 it is the smallest N' with
// M/N'×100 ≤ T (the metric at or below target is preferred), since
// N × (100M/N) = 100M = num; with N = 0 the metric is 100 or 200 (den = 1)
// and max(N,1) × metric = num as well.
// The division is exact and cannot overflow (a saturated num gives a count
// far above any pool's max, which the caller clamps).
func (r ttMetric) desired(t int) int { return validate.CeilDiv(int(r.num), t) }

// belowWarming is Decide's case of a metric below target while a node
// warms up: AWS target tracking does not scale in while instances warm.
const belowWarming = -2

// Decide evaluates one datapoint.
func (p *targetTrackingPolicy) Decide(in Input) Decision {
	cfg := &p.cfg
	pr := &in.Pressure
	// Instance warm-up (ECS's instanceWarmupPeriod): a node that joined
	// less than InstanceWarmup ago contributes nothing to the metric.
	warming := 0
	if cfg.InstanceWarmup > 0 {
		var warmed []capacity.Node
		for i := range pr.Nodes {
			if j := pr.Nodes[i].JoinedAt; !j.IsZero() && in.Now.Before(j.Add(cfg.InstanceWarmup)) {
				warming++
				continue
			}
			warmed = append(warmed, pr.Nodes[i])
		}
		if warming > 0 {
			cp := *pr
			cp.Nodes = warmed
			pr = &cp
		}
	}
	n := len(pr.Nodes)
	est := p.estimate(pr, n)
	metric := ttReservation(est.m, n)
	t := cfg.TargetCapacity
	st := in.State
	cur := in.Desired
	due := st.LastDatapoint.IsZero() || !in.Now.Before(st.LastDatapoint.Add(cfg.MetricPeriod))
	pct, t64, m64, n64, u64 := metric.percent(), int64(t), int64(est.m), int64(n), int64(est.unfit)
	unfit := est.unfit > 0

	desired := cur
	var reason Reason
	side := metric.cmpTarget(t)
	if side < 0 && warming > 0 {
		side = belowWarming
	}
	switch side {
	case 1: // above target: scale out at once
		st.LowDatapoints = 0
		if due {
			st.LastDatapoint = in.Now
		}
		want := metric.desired(t)
		if warming > 0 {
			// The warming nodes are capacity already bought: the
			// warmed nodes' need, plus them (the scale-from-zero rule
			// is for a pool with no node at all).
			want = validate.Add(validate.CeilDiv(validate.Mul(100, est.m), t), warming)
		}
		switch {
		case want > cur && !unfit:
			desired = want
			reason = NewReason(CodeScaleUp, "capacity provider reservation %d%% is above target %d%% (M=%d, N=%d)", pct, t64, m64, n64)
		case want > cur:
			desired = want
			reason = NewReason(CodeScaleUp, "capacity provider reservation %d%% is above target %d%% (M=%d); %d pending instances fit no offering", pct, t64, m64, u64)
		case !unfit:
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is above target %d%% (M=%d); %d nodes already requested", pct, t64, m64, int64(cur))
		default:
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is above target %d%%; %d nodes already requested; %d pending instances fit no offering", pct, t64, int64(cur), u64)
		}
	case 0: // at target
		st.LowDatapoints = 0
		if due {
			st.LastDatapoint = in.Now
		}
		if !unfit {
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is at target %d%% (M=%d, N=%d)", pct, t64, m64, n64)
		} else {
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is at target %d%% (M=%d); %d pending instances fit no offering", pct, t64, m64, u64)
		}
	case belowWarming: // below target with a node warming up: no low datapoint, no scale-in
		st.LowDatapoints = 0
		if due {
			st.LastDatapoint = in.Now
		}
		reason = NewReason(CodeSteady, "capacity provider reservation %d%% is below target %d%%; %d nodes warming up hold scale-in (instance_warmup)", pct, t64, int64(warming))
	default: // below target: scale in after enough consecutive datapoints
		if due {
			st.LowDatapoints++
			st.LastDatapoint = in.Now
		}
		want := metric.desired(t)
		if t < 100 {
			want = max(want, 1) // spare capacity is incompatible with scaling to zero
		}
		low, need := int64(st.LowDatapoints), int64(cfg.ScaleInDatapoints)
		switch {
		case st.LowDatapoints < cfg.ScaleInDatapoints && !unfit:
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is below target %d%%: %d of %d low datapoints", pct, t64, low, need)
		case st.LowDatapoints < cfg.ScaleInDatapoints:
			reason = NewReason(CodeSteady, "capacity provider reservation %d%% is below target: %d of %d low datapoints; %d pending instances fit no offering", pct, low, need, u64)
		case want < cur:
			desired = want
			st.LowDatapoints = 0 // a further scale-in needs a new run of low datapoints
			if !unfit {
				reason = NewReason(CodeScaleDown, "capacity provider reservation %d%% was below target %d%% for %d datapoints: scale in to %d", pct, t64, low, int64(want))
			} else {
				reason = NewReason(CodeScaleDown, "capacity provider reservation %d%% was below target for %d datapoints: scale in to %d; %d pending instances fit no offering", pct, low, int64(want), u64)
			}
		default:
			st.LowDatapoints = cfg.ScaleInDatapoints // keep the count bounded
			if !unfit {
				reason = NewReason(CodeSteady, "capacity provider reservation %d%% is below target %d%%; %d nodes already requested", pct, t64, int64(cur))
			} else {
				reason = NewReason(CodeSteady, "capacity provider reservation %d%% is below target; %d nodes already requested; %d pending instances fit no offering", pct, int64(cur), u64)
			}
		}
	}

	if clamped := cfg.Nodes.Clamp(desired); clamped != desired {
		want := int64(desired)
		switch {
		case desired > cfg.Nodes.Max && !unfit:
			reason = NewReason(CodeAtMax, "capacity provider reservation %d%% asks for %d nodes; held at max %d", pct, want, int64(cfg.Nodes.Max))
		case desired > cfg.Nodes.Max:
			reason = NewReason(CodeAtMax, "capacity provider reservation %d%% asks for %d nodes; held at max %d; %d pending instances fit no offering", pct, want, int64(cfg.Nodes.Max), u64)
		case !unfit:
			reason = NewReason(CodeAtMin, "capacity provider reservation %d%% asks for %d nodes; held at min %d", pct, want, int64(cfg.Nodes.Min))
		default:
			reason = NewReason(CodeAtMin, "capacity provider reservation %d%% asks for %d nodes; held at min %d; %d pending instances fit no offering", pct, want, int64(cfg.Nodes.Min), u64)
		}
		desired = clamped
	}
	if desired != cur {
		st.LastScale = in.Now
	}
	return Decision{
		Desired: desired,
		Reason:  reason,
		TargetTracking: &TargetTrackingFigures{
			M: est.m, N: n, Reservation: metric.float(), Target: t,
			LowDatapoints: st.LowDatapoints, Method: est.method, Warming: warming,
		},
		State: st,
	}
}
