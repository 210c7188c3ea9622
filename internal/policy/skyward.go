package policy

import (
	"time"

	"github.com/tide-project/tide/internal/validate"
)

// skywardLowUtilizationPercent is the inflight/capacity ratio, in percent,
// below which skyward shrinks a busy but over-provisioned pool (seed 000).
const skywardLowUtilizationPercent = 30

// Reason formats of the skyward policy. Every one takes the pressure figures
// so a decision can be read without the report it came from.
const (
	skywardFmtScaleUp  = "queued=%d inflight=%d capacity=%d nodes=%d: adding ceil(queued/slots) nodes to drain the queue"
	skywardFmtCovered  = "queued=%d inflight=%d capacity=%d nodes=%d: desired already covers the queue"
	skywardFmtAtMax    = "queued=%d inflight=%d capacity=%d nodes=%d: the queue needs more nodes than max; desired is at max"
	skywardFmtCooldown = "in cooldown for another %ds: queued=0 inflight=%d capacity=%d nodes=%d"
	skywardFmtIdle     = "idle for %ds, longer than the idle timeout: inflight=0 capacity=%d nodes=%d; releasing to min %d"
	skywardFmtIdleMin  = "idle for %ds, longer than the idle timeout: inflight=0 capacity=%d nodes=%d; already at min %d"
	skywardFmtLow      = "queued=%d inflight=%d capacity=%d nodes=%d: utilization below 30%%; shrinking to ceil(inflight/slots)+1 nodes"
	skywardFmtLowKeep  = "queued=%d inflight=%d capacity=%d nodes=%d: utilization below 30%% but desired is already at or under ceil(inflight/slots)+1 (floored at min)"
	skywardFmtSteady   = "queued=%d inflight=%d capacity=%d nodes=%d: sized for the work"
	skywardFmtClamped  = "desired %d is outside [min %d, max %d]; clamped"
)

// skywardPolicy is seed 000's decision tree (Skyward's original
// _compute_desired, commit 7a5f7b4), evaluated in priority order:
//
//  1. queued > 0: desired = min(max, max(desired, nodes + ceil(queued/slots))).
//     Immediate, not gated by the cooldown, and checked first so an empty
//     pool (scaled to zero) wakes.
//  2. the last change of desired was less than Cooldown ago: keep desired.
//  3. inflight == 0 and no work for longer than IdleTimeout: min.
//  4. inflight > 0 and inflight/capacity < 30%:
//     min(desired, max(min, ceil(inflight/slots) + 1)), the +1 a buffer.
//  5. otherwise keep desired.
//
// The result is always clamped to [Nodes.Min, Nodes.Max]. State.LastScale is
// set whenever desired changes; State.LastBusy is the last evaluation that
// saw queued or inflight work (on the first call, with no LastBusy, the idle
// period starts now).
//
// Decide never allocates, and its count arithmetic saturates (a queue of
// math.MaxInt instances asks for max nodes, never a wrapped negative). The seed's timer tick, which lets an idle pool
// shrink when no new report arrives, is the caller replaying the last
// Pressure with a later Now.
type skywardPolicy struct{ cfg Config }

// NewSkyward returns the skyward policy for a validated cfg. A SlotsPerNode
// of zero is treated as one slot per node.
func NewSkyward(cfg Config) Policy { return skywardPolicy{cfg: cfg} }

// Name returns "skyward".
func (p skywardPolicy) Name() string { return Skyward }

// Decide evaluates the decision tree once.
func (p skywardPolicy) Decide(in Input) Decision {
	spec := p.cfg.Nodes
	queued := in.Pressure.Queued()
	inflight := in.Pressure.Inflight()
	nodes := len(in.Pressure.Nodes)
	slots := max(p.cfg.SlotsPerNode, 1)
	capacity := validate.Mul(nodes, slots)
	current := spec.Clamp(in.Desired)

	st := in.State
	if queued > 0 || inflight > 0 || st.LastBusy.IsZero() {
		st.LastBusy = in.Now
	}
	q, f, c, n := int64(queued), int64(inflight), int64(capacity), int64(nodes)

	desired := current
	var reason Reason
	switch idle := in.Now.Sub(st.LastBusy); {
	case queued > 0:
		need := validate.Add(nodes, validate.CeilDiv(queued, slots))
		switch {
		case need > spec.Max:
			desired = spec.Max
			reason = NewReason(CodeAtMax, skywardFmtAtMax, q, f, c, n)
		case need > current:
			desired = need
			reason = NewReason(CodeScaleUp, skywardFmtScaleUp, q, f, c, n)
		default:
			reason = NewReason(CodeSteady, skywardFmtCovered, q, f, c, n)
		}
	case !st.LastScale.IsZero() && in.Now.Sub(st.LastScale) < p.cfg.Cooldown:
		left := p.cfg.Cooldown - in.Now.Sub(st.LastScale)
		reason = NewReason(CodeCooldown, skywardFmtCooldown, skywardCeilSeconds(left), f, c, n)
	case inflight == 0 && idle > p.cfg.IdleTimeout:
		desired = spec.Min
		code, format := CodeIdle, skywardFmtIdle
		if current == spec.Min {
			code, format = CodeAtMin, skywardFmtIdleMin
		}
		reason = NewReason(code, format, int64(idle/time.Second), c, n, int64(spec.Min))
	case inflight > 0 && capacity > 0 && validate.Mul(inflight, 100) < validate.Mul(capacity, skywardLowUtilizationPercent):
		desired = min(current, max(spec.Min, validate.CeilDiv(inflight, slots)+1))
		switch {
		case desired < current:
			reason = NewReason(CodeScaleDown, skywardFmtLow, q, f, c, n)
		case current == spec.Min:
			reason = NewReason(CodeAtMin, skywardFmtLowKeep, q, f, c, n)
		default:
			reason = NewReason(CodeSteady, skywardFmtLowKeep, q, f, c, n)
		}
	default:
		reason = NewReason(CodeSteady, skywardFmtSteady, q, f, c, n)
	}

	desired = spec.Clamp(desired)
	if desired == current && current != in.Desired {
		// Only the bounds moved desired (e.g. they changed since the last call).
		code := CodeAtMin
		if current == spec.Max && in.Desired > spec.Max {
			code = CodeAtMax
		}
		reason = NewReason(code, skywardFmtClamped, int64(in.Desired), int64(spec.Min), int64(spec.Max))
	}
	if desired != in.Desired {
		st.LastScale = in.Now
	}
	return Decision{Desired: desired, Reason: reason, State: st}
}

// skywardCeilSeconds returns d in whole seconds, rounded up.
func skywardCeilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
