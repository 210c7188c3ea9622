package policy

import (
	"math"
	"time"
)

// Karpenter's documented defaults (kubernetes-sigs/karpenter, see
// ../shared/reference/peers.md §1).
const (
	// karpenterBatchIdle and karpenterBatchMax are the batcher's window:
	// it closes after 1 s without a new pending pod, or 10 s after it opened
	// (--batch-idle-duration, --batch-max-duration).
	karpenterBatchIdle = time.Second
	karpenterBatchMax  = 10 * time.Second
	// karpenterPoll is the provisioning requeue and the disruption poll.
	karpenterPoll = 10 * time.Second
	// karpenterBudgetPercent is the default disruption budget, nodes: 10%:
	// allowed = roundup(total × 10 %) − deleting.
	karpenterBudgetPercent = 10
)

// karpenterPolicy models Karpenter's provisioning and disruption as its
// documentation and defaults describe them, on tide's pool model (one pool
// = one NodePool whose instance types are the offerings):
//
//	new pending work                  → open a batch; it closes 1 s after the
//	                                    backlog last grew, 10 s after it opened
//	batch closed, or every 10 s while → fill the free space of existing nodes,
//	  work is pending                   then buy the cheapest offerings that fit
//	                                    the rest (binpack.Buy, as tide does);
//	                                    nodes in flight count (desired never drops)
//	every 10 s (disruption poll)      → consolidate nodes empty for
//	                                    ConsolidateAfter (default 0 s), at most
//	                                    roundup(10 % of the nodes) − marked per poll
//
// Karpenter's scheduler packs first fit and launches the cheapest type that
// fits each NodeClaim; Buy's mix is at least as cheap, so this model is, if
// anything, kinder to Karpenter than the real one. Under-used (non-empty)
// consolidation deletes nodes whose pods may move: with tide's rule, only
// nodes whose every instance is restartable and none do-not-disrupt, by
// price alone (consolidate.Karpenter, the same consolidate.Decide that
// tide's pools run). A count cannot name a node, so that part runs beside
// the policy, in the driver that runs it (the simulator's engine, a pool's
// controller). Replace-with-cheaper is not modelled.
type karpenterPolicy struct{ cfg Config }

// NewKarpenter returns the karpenter policy for a validated cfg.
func NewKarpenter(cfg Config) Policy { return &karpenterPolicy{cfg: cfg} }

// Name returns "karpenter".
func (p *karpenterPolicy) Name() string { return Karpenter }

// Decide evaluates the batcher, the provisioner and the disruption poll once.
func (p *karpenterPolicy) Decide(in Input) Decision {
	cfg := &p.cfg
	st := in.State
	v := newPeerView(&in)
	queued := in.Pressure.Queued()
	switch {
	case queued <= 0:
		st.PendingSince, st.BatchGrewAt, st.BatchQueued = time.Time{}, time.Time{}, 0
	case queued > st.BatchQueued:
		// New pending work opens a batch or keeps it open.
		if st.PendingSince.IsZero() {
			st.PendingSince = in.Now
		}
		st.BatchGrewAt = in.Now
		st.BatchQueued = queued
	default:
		st.BatchQueued = queued
	}
	poll := st.LastLoop.IsZero() || !in.Now.Before(st.LastLoop.Add(karpenterPoll))
	d := Decision{Desired: in.Desired,
		Reason: NewReason(CodeSteady, "%d queued instances; %d busy and %d empty nodes", int64(queued), int64(v.busy), int64(len(v.empty)))}
	if !st.PendingSince.IsZero() {
		closeAt := st.BatchGrewAt.Add(karpenterBatchIdle)
		if end := st.PendingSince.Add(karpenterBatchMax); end.Before(closeAt) {
			closeAt = end
		}
		if in.Now.Before(closeAt) {
			d.Reason = NewReason(CodeBatching, "%d queued instances batched for %dms (window closes %dms after the last arrival, %dms at most)",
				int64(queued), in.Now.Sub(st.PendingSince).Milliseconds(), karpenterBatchIdle.Milliseconds(), karpenterBatchMax.Milliseconds())
			d.Recheck = closeAt
			poll = false // the batch decides first
		} else {
			st.PendingSince, st.BatchGrewAt = time.Time{}, time.Time{}
			d = p.provision(&in, &v, queued)
		}
	} else if queued > 0 && poll {
		d = p.provision(&in, &v, queued) // the provisioner's requeue
	}
	if poll {
		st.LastLoop = in.Now
		if d.Desired <= in.Desired {
			p.consolidate(&in, &v, &d)
		}
	}
	peerClamp(cfg, &d)
	if d.Desired < v.busy && d.Desired < in.Desired {
		d.Desired = min(in.Desired, max(v.busy, cfg.Nodes.Min))
	}
	if d.Desired > in.Desired && len(d.Launch) > 0 {
		d.Launch = fitLaunches(cfg, d.Launch, d.Desired-in.Desired, in.Pressure.Pending)
	} else {
		d.Launch = nil
	}
	if d.Recheck.IsZero() {
		d.Recheck = p.recheck(&in, &v, &st, queued)
	}
	if d.Desired != in.Desired {
		st.LastScale = in.Now
	}
	d.State = st
	return d
}

// provision buys the cheapest offerings for the backlog that the free
// space of the existing nodes does not host.
func (p *karpenterPolicy) provision(in *Input, v *peerView, queued int) Decision {
	cfg := &p.cfg
	offs := v.offerings(cfg)
	res := buyNew(cfg, in, v, offs, -1)
	need := v.unmarked + res.Nodes
	if need > cfg.Nodes.Max {
		res = buyNew(cfg, in, v, offs, max(cfg.Nodes.Max-v.unmarked, 0))
	}
	desired := max(in.Desired, need)
	d := Decision{Desired: desired}
	switch {
	case desired > in.Desired:
		d.Reason = NewReason(CodeScaleUp, "%d queued instances need %d new nodes of the cheapest offerings, %d cents/h",
			int64(queued), int64(res.Nodes), int64(math.Round(res.Cost*100)))
		d.Launch = tideLaunches(&res, offs, cfg.Offerings, 0, in.Pressure.Pending)
	case res.Nodes == 0 && res.UnplacedTotal > 0:
		d.Reason = NewReason(CodeSteady, "%d queued instances fit no offering", int64(res.UnplacedTotal))
	case res.Nodes == 0:
		d.Reason = NewReason(CodeSteady, "%d queued instances fit the free space of existing nodes", int64(queued))
	default:
		d.Reason = NewReason(CodeSteady, "%d queued instances need %d nodes; %d already requested", int64(queued), int64(need), int64(in.Desired))
	}
	return d
}

// consolidate removes empty nodes past ConsolidateAfter, within the
// default disruption budget.
func (p *karpenterPolicy) consolidate(in *Input, v *peerView, d *Decision) {
	cfg := &p.cfg
	n, _ := v.emptyFor(in, cfg.ConsolidateAfter)
	if n == 0 {
		return
	}
	budget := (v.unmarked+v.marked)*karpenterBudgetPercent/100 - v.marked
	if (v.unmarked+v.marked)*karpenterBudgetPercent%100 != 0 {
		budget++ // roundup
	}
	release := min(n, max(budget, 0), max(v.unmarked-cfg.Nodes.Min, 0))
	if release <= 0 || d.Desired-release < v.busy {
		return
	}
	d.Desired -= release
	d.Launch = nil
	d.Reason = NewReason(CodeScaleDown, "%d empty nodes past consolidateAfter %ds: consolidating %d (budget %d)",
		int64(n), int64(cfg.ConsolidateAfter/time.Second), int64(release), int64(budget))
}

// recheck returns when the same input may decide differently: the next
// poll while work is pending or empty nodes wait, else when the next empty
// node passes ConsolidateAfter (on the poll's grid).
func (p *karpenterPolicy) recheck(in *Input, v *peerView, st *State, queued int) time.Time {
	nextPoll := st.LastLoop.Add(karpenterPoll)
	n, next := v.emptyFor(in, p.cfg.ConsolidateAfter)
	switch {
	case queued > 0 || n > 0 && v.unmarked > p.cfg.Nodes.Min:
		return nextPoll
	case !next.IsZero():
		if next.Before(nextPoll) {
			return nextPoll
		}
		return next
	}
	return time.Time{}
}
