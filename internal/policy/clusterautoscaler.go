package policy

import (
	"math"
	"time"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// Cluster Autoscaler's documented defaults (kubernetes/autoscaler FAQ and
// flags, see ../shared/reference/peers.md §2).
const (
	// caScanInterval is the loop period (--scan-interval).
	caScanInterval = 10 * time.Second
	// caUnneededTime is how long a node must be unneeded before it is
	// removed (--scale-down-unneeded-time).
	caUnneededTime = 10 * time.Minute
	// caDelayAfterAdd is the pause of scale-down after a scale-up
	// (--scale-down-delay-after-add).
	caDelayAfterAdd = 10 * time.Minute
	// caUtilizationPercent is --scale-down-utilization-threshold 0.5.
	caUtilizationPercent = 50
	// caEmptyBulk is how many empty nodes go at once (--max-empty-bulk-delete,
	// --max-scale-down-parallelism).
	caEmptyBulk = 10
)

// clusterAutoscalerPolicy models Kubernetes Cluster Autoscaler with its
// default flags on tide's pool model (each offering is a node group of
// identical machines):
//
//	less than 10 s since the last loop → nothing (the loop runs every 10 s)
//	pending work                       → fill the free space of existing nodes;
//	                                     for each node group, bin-pack the rest on
//	                                     its template; the least-waste expander
//	                                     (least idle CPU + memory share; then more
//	                                     instances placed, then cheaper) picks one
//	                                     group, which grows by its estimate; nodes
//	                                     in flight count (desired never drops)
//	no scale-up for 10 min, nodes      → remove them, 10 at most per loop
//	  unneeded for 10 min
//
// A node is unneeded when max(cpu, memory) requested / allocatable is under
// 50 % and its instances can move elsewhere. tide's work may not move (no
// instance is restartable), so only empty nodes are ever unneeded; the
// unneeded timer starts when the node became empty (IdleSince).
type clusterAutoscalerPolicy struct{ cfg Config }

// NewClusterAutoscaler returns the cluster-autoscaler policy for a validated cfg.
func NewClusterAutoscaler(cfg Config) Policy { return &clusterAutoscalerPolicy{cfg: cfg} }

// Name returns "cluster-autoscaler".
func (p *clusterAutoscalerPolicy) Name() string { return ClusterAutoscaler }

// Decide runs one loop of the autoscaler when one is due.
func (p *clusterAutoscalerPolicy) Decide(in Input) Decision {
	cfg := &p.cfg
	st := in.State
	v := newPeerView(&in)
	queued := in.Pressure.Queued()
	if !st.LastLoop.IsZero() && in.Now.Before(st.LastLoop.Add(caScanInterval)) {
		d := Decision{Desired: in.Desired, State: st,
			Reason: NewReason(CodeSteady, "next loop in %dms", st.LastLoop.Add(caScanInterval).Sub(in.Now).Milliseconds())}
		if queued > 0 || len(v.empty) > 0 {
			d.Recheck = st.LastLoop.Add(caScanInterval)
		}
		return d
	}
	st.LastLoop = in.Now
	d := Decision{Desired: in.Desired,
		Reason: NewReason(CodeSteady, "%d queued instances; %d busy and %d empty nodes", int64(queued), int64(v.busy), int64(len(v.empty)))}
	scaledUp := false
	if queued > 0 {
		d = p.scaleUp(&in, &v, queued)
		scaledUp = d.Desired > in.Desired
	}
	cooling := !st.LastScaleUp.IsZero() && in.Now.Before(st.LastScaleUp.Add(caDelayAfterAdd))
	if !scaledUp && !cooling {
		p.scaleDown(&in, &v, &d)
	}
	peerClamp(cfg, &d)
	if d.Desired < in.Desired && d.Desired < v.busy {
		d.Desired = min(in.Desired, max(v.busy, cfg.Nodes.Min))
	}
	if d.Desired > in.Desired {
		st.LastScaleUp = in.Now
		for i := range d.Launch {
			d.Launch[i].Count = d.Desired - in.Desired
		}
	} else {
		d.Launch = nil
	}
	if d.Desired != in.Desired {
		st.LastScale = in.Now
	}
	// When the same input decides differently: the next loop while work is
	// pending, else when an empty node becomes unneeded long enough and
	// scale-down is allowed (on the loop's grid).
	n, next := v.emptyFor(&in, caUnneededTime)
	switch {
	case queued > 0 || n > 0 && v.unmarked > cfg.Nodes.Min:
		d.Recheck = st.LastLoop.Add(caScanInterval)
		if n > 0 && queued == 0 && !st.LastScaleUp.IsZero() {
			d.Recheck = maxTime(d.Recheck, st.LastScaleUp.Add(caDelayAfterAdd))
		}
	case !next.IsZero():
		d.Recheck = maxTime(maxTime(next, st.LastLoop.Add(caScanInterval)), st.LastScaleUp.Add(caDelayAfterAdd))
	}
	d.State = st
	return d
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// scaleUp estimates each node group's nodes for the backlog and grows the
// one the least-waste expander picks.
func (p *clusterAutoscalerPolicy) scaleUp(in *Input, v *peerView, queued int) Decision {
	cfg := &p.cfg
	offs := v.offerings(cfg)
	room := max(cfg.Nodes.Max-v.unmarked, 0)
	best, bestNodes, bestPods := -1, 0, 0
	var bestWaste, bestCost float64
	fitsExisting := true
	for o := range offs {
		if tideUnavailable(cfg.Offerings[o], in.Unavailable) {
			continue
		}
		limit := make([]int, len(offs))
		limit[o] = -1
		res := binpack.Buy(in.Pressure.Pending, offs, binpack.BuyOptions{Free: v.freeSpace(in), MaxNodes: -1, Limit: limit})
		if res.Nodes == 0 {
			fitsExisting = fitsExisting && res.UnplacedTotal == 0
			continue
		}
		fitsExisting = false
		nodes := res.Nodes
		var used capacity.Resources
		pods := 0
		for _, b := range res.New {
			for _, pl := range b.Placements {
				used = used.Add(in.Pressure.Pending[pl.Group].Requests.Scale(int64(pl.Count * b.Count)))
				pods += pl.Count * b.Count
			}
		}
		if room < nodes {
			nodes = room // a loop grows a group no further than max allows
		}
		capR := cfg.Offerings[o].Resources
		waste := 0.0
		if c := float64(capR.MilliCPU) * float64(res.Nodes); c > 0 {
			waste += (c - float64(used.MilliCPU)) / c
		}
		if m := float64(capR.Memory) * float64(res.Nodes); m > 0 {
			waste += (m - float64(used.Memory)) / m
		}
		cost := cfg.Offerings[o].EffectiveCost() * float64(res.Nodes)
		if best < 0 || waste < bestWaste || waste == bestWaste && (pods > bestPods || pods == bestPods && cost < bestCost) {
			best, bestNodes, bestPods, bestWaste, bestCost = o, nodes, pods, waste, cost
		}
	}
	if best < 0 {
		if fitsExisting {
			return Decision{Desired: in.Desired, Reason: NewReason(CodeSteady, "%d queued instances fit the free space of existing nodes", int64(queued))}
		}
		return Decision{Desired: in.Desired, Reason: NewReason(CodeSteady, "%d queued instances fit no node group", int64(queued))}
	}
	need := v.unmarked + bestNodes
	desired := max(in.Desired, need)
	if desired <= in.Desired {
		return Decision{Desired: in.Desired,
			Reason: NewReason(CodeSteady, "%d queued instances need %d nodes; %d already requested", int64(queued), int64(need), int64(in.Desired))}
	}
	return Decision{Desired: desired,
		Launch: []capacity.Launch{{Offering: cfg.Offerings[best].Name(), Count: desired - in.Desired}},
		Reason: NewReason(CodeScaleUp, "%d queued instances: the least-waste node group grows by %d nodes (%d%% idle cpu+memory)",
			int64(queued), int64(desired-in.Desired), int64(math.Round(bestWaste*50)))}
}

// scaleDown removes nodes unneeded for caUnneededTime, caEmptyBulk at most.
func (p *clusterAutoscalerPolicy) scaleDown(in *Input, v *peerView, d *Decision) {
	cfg := &p.cfg
	n, _ := v.emptyFor(in, caUnneededTime)
	release := min(n, caEmptyBulk, max(v.unmarked-cfg.Nodes.Min, 0))
	if release <= 0 || d.Desired-release < v.busy {
		if d.Reason.Code == CodeSteady && in.Pressure.Queued() == 0 {
			if low := caUnderused(in); low > 0 {
				d.Reason = NewReason(CodeSteady, "%d nodes under %d%% use run work that may not move", int64(low), caUtilizationPercent)
			}
		}
		return
	}
	d.Desired -= release
	d.Reason = NewReason(CodeScaleDown, "%d nodes unneeded for %ds: removing %d", int64(n), int64(caUnneededTime/time.Second), int64(release))
}

// caUnderused counts the busy unmarked nodes under the utilization
// threshold: max(cpu, memory) requested / allocatable.
func caUnderused(in *Input) int {
	low := 0
	for i := range in.Pressure.Nodes {
		n := &in.Pressure.Nodes[i]
		if !n.MarkedAt.IsZero() || !n.Busy() {
			continue
		}
		a := n.Allocated()
		var u float64
		if n.Resources.MilliCPU > 0 {
			u = float64(a.MilliCPU) / float64(n.Resources.MilliCPU)
		}
		if n.Resources.Memory > 0 {
			u = max(u, float64(a.Memory)/float64(n.Resources.Memory))
		}
		if u*100 < caUtilizationPercent {
			low++
		}
	}
	return low
}

// tideUnavailable reports whether o is out of capacity now.
func tideUnavailable(o capacity.Offering, unavailable []string) bool {
	for _, u := range unavailable {
		if u == o.Name() {
			return true
		}
	}
	return false
}
