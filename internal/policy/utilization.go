package policy

import (
	"github.com/tide-project/tide/internal/deletion"
	"github.com/tide-project/tide/internal/validate"
)

// Reason formats of the utilization policy.
const (
	utilFmtScaleUp     = "%d GPUs requested by pending instances need %d more nodes of %d GPUs on top of %d"
	utilFmtScaleUpOne  = "%d GPUs requested by pending instances; node size unknown (no offering or node has GPUs), adding %d node to %d"
	utilFmtNoGPUs      = "the pool's %d nodes have no GPUs: no utilization to act on"
	utilFmtBelow       = "GPU utilization %d%% is below min %d%%: %d of %d GPUs used"
	utilFmtBelowBuffer = "GPU utilization %d%% is below min %d%%; keeping %d busy nodes and a buffer of %d empty nodes"
	utilFmtBelowKeep   = "GPU utilization %d%% is below min %d%%, but %d busy nodes and a buffer of %d empty nodes need every node"
	utilFmtSteady      = "GPU utilization %d%% is at or above min %d%%: %d of %d GPUs used"
	utilFmtAtMax       = "wanted %d nodes (%d GPUs pending, %d GPUs used); capped at max %d"
	utilFmtAtMin       = "wanted %d nodes (%d GPUs pending, %d GPUs used); raised to min %d"
)

// utilizationPolicy is seed 001's NodeProvisioner for GPU pools, in its two
// stages.
//
// Evaluate (the target size; current is the number of nodes in the report):
//
//   - Pending GPU requests (Σ Count × Requests.GPUs over Pressure.Pending):
//     target = current + ceil(pending GPUs / GPUs per new node). Other
//     resource types are ignored, as in the seed. The GPUs of a new node are
//     the largest GPU count among the pool's offerings or, without such an
//     offering, the largest GPU count among the existing nodes; when neither
//     is known the policy adds one node per evaluation.
//   - Else, when used GPUs / total GPUs < MinUtilization:
//     target = ceil(used GPUs / (average GPUs per node × MinUtilization/100)),
//     computed in whole GPUs so partially used nodes count; then raised to at
//     least the busy nodes plus MinUnutilizedNodes empty nodes, and never
//     above current (the buffer only holds back a scale-down).
//   - Else target = current.
//
// The target is clamped to [Nodes.Min, Nodes.Max] and is Decision.Desired.
//
// Reconcile (one action per loop): when current < target the action is the
// provision and no node is marked, unmarked or deleted; otherwise
// deletion.Next plans the marks with ScaleDownDelay, and its one action is
// reported in Decision.Utilization. Nodes are never protected here.
//
// The policy carries no state of its own: the deletion marks travel in the
// pressure report (capacity.Node.MarkedAt), and Decision.State is Input.State.
type utilizationPolicy struct{ cfg Config }

// NewUtilization returns the utilization policy for a validated cfg.
func NewUtilization(cfg Config) Policy { return utilizationPolicy{cfg: cfg} }

// Name returns "utilization".
func (p utilizationPolicy) Name() string { return Utilization }

// Decide evaluates the target size and plans the one reconcile action.
func (p utilizationPolicy) Decide(in Input) Decision {
	spec := p.cfg.Nodes
	nodes := in.Pressure.Nodes
	current := len(nodes)

	var total, used, largest int64
	for i := range nodes {
		n := &nodes[i]
		total = validate.Add64(total, max(n.Resources.GPUs, 0))
		largest = max(largest, n.Resources.GPUs)
		for j := range n.Running {
			if !n.Running[j].Daemon {
				used = validate.Add64(used, max(n.Running[j].Requests.GPUs, 0))
			}
		}
	}
	var pending int64
	for _, pd := range in.Pressure.Pending {
		pending = validate.Add64(pending, validate.Mul64(int64(max(pd.Count, 0)), max(pd.Requests.GPUs, 0)))
	}
	var percent float64
	var percentInt int64
	if total > 0 {
		percent = float64(used) * 100 / float64(total)
		percentInt = validate.Mul64(used, 100) / total
	}
	minUtil := int64(p.cfg.MinUtilization)

	target := current
	var reason Reason
	switch {
	case pending > 0:
		gpn := p.newNodeGPUs(largest)
		if gpn > 0 {
			needed := int64(validate.CeilDiv(int(pending), int(gpn)))
			target = validate.Add(current, int(needed))
			reason = NewReason(CodeScaleUp, utilFmtScaleUp, pending, needed, gpn, int64(current))
		} else {
			target = current + 1
			reason = NewReason(CodeScaleUp, utilFmtScaleUpOne, pending, 1, int64(current))
		}
	case total == 0:
		reason = NewReason(CodeSteady, utilFmtNoGPUs, int64(current))
	case validate.Mul64(used, 100) < validate.Mul64(total, minUtil):
		// ceil(used / (total/current × minUtil/100)) in integers, with a
		// 128-bit product so that no pool size can overflow it.
		want := int(validate.MulDivCeil(validate.Mul64(used, 100), int64(current), validate.Mul64(total, minUtil)))
		busy := in.Pressure.BusyNodes()
		floor := busy + p.cfg.MinUnutilizedNodes
		target = min(max(want, floor), current)
		switch {
		case target == current:
			reason = NewReason(CodeSteady, utilFmtBelowKeep, percentInt, minUtil, int64(busy), int64(p.cfg.MinUnutilizedNodes))
		case floor > want:
			reason = NewReason(CodeScaleDown, utilFmtBelowBuffer, percentInt, minUtil, int64(busy), int64(p.cfg.MinUnutilizedNodes))
		default:
			reason = NewReason(CodeScaleDown, utilFmtBelow, percentInt, minUtil, used, total)
		}
	default:
		reason = NewReason(CodeSteady, utilFmtSteady, percentInt, minUtil, used, total)
	}

	if clamped := spec.Clamp(target); clamped != target {
		if clamped == spec.Max && target > spec.Max {
			reason = NewReason(CodeAtMax, utilFmtAtMax, int64(target), pending, used, int64(spec.Max))
		} else {
			reason = NewReason(CodeAtMin, utilFmtAtMin, int64(target), pending, used, int64(spec.Min))
		}
		target = clamped
	}

	figs := &UtilizationFigures{Utilization: percent, Target: target, Mark: []string{}, Unmark: []string{}, Delete: []string{}}
	if current >= target {
		dn := make([]deletion.Node, len(nodes))
		for i := range nodes {
			n := &nodes[i]
			dn[i] = deletion.Node{ID: n.ID, Ordinal: n.Ordinal, Busy: n.Busy(), MarkedAt: n.MarkedAt,
				Protected: p.cfg.ProtectFirstNode && n.Ordinal == 0}
		}
		plan := deletion.Next(dn, target, in.Now, p.cfg.ScaleDownDelay)
		switch plan.Action {
		case deletion.Mark:
			figs.Mark = plan.IDs
		case deletion.Unmark:
			figs.Unmark = plan.IDs
		case deletion.Delete:
			figs.Delete = plan.IDs
		}
	}
	return Decision{Desired: target, Reason: reason, Utilization: figs, State: in.State}
}

// newNodeGPUs returns the GPUs one new node brings: the largest GPU count of
// the pool's offerings, else largest (the largest among existing nodes);
// zero when unknown.
func (p utilizationPolicy) newNodeGPUs(largest int64) int64 {
	var best int64
	for _, o := range p.cfg.Offerings {
		best = max(best, o.Resources.GPUs)
	}
	if best > 0 {
		return best
	}
	return largest
}
