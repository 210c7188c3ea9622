package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/consolidate"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/policy"
)

// ReasonConsolidate is the NodePool event of a consolidation move.
const ReasonConsolidate = "Consolidate"

// consolidator is a NodePool's consolidation, with the rules and budgets
// `tide head` applies (internal/consolidate): every Every, an under-used
// Node whose pods may all move (owned by a controller that recreates them,
// not do-not-disrupt) and fit the free room of
// the pool's other busy Nodes is cordoned and its pods evicted through the
// Eviction API (a PodDisruptionBudget that allows no disruption holds its
// pod: that eviction waits for the next pass). Their controllers recreate
// them and the scheduler places them on the other Nodes; the emptied Node
// is then an idle Node the pool's policy releases. A Node it emptied that
// scale-down does not take (the pool's floor) is uncordoned after a grace.
type consolidator struct {
	cfg   consolidate.Config
	grace time.Duration
	next  time.Time
	moved map[string]time.Time // Node name → when this consolidator emptied it
}

// newConsolidator returns the NodePool's consolidator (nil when it does not
// consolidate): tide and karpenter pools, as under `tide head`.
func newConsolidator(p *runner, interval time.Duration) (*consolidator, error) {
	cfg, err := p.pool.Config.Consolidation()
	if err != nil {
		return nil, err
	}
	switch p.pool.Config.PolicyConfig().Policy {
	case policy.Karpenter:
		cfg = consolidate.Karpenter()
	case "", policy.Tide:
	default:
		return nil, nil
	}
	if !cfg.Enabled {
		return nil, nil
	}
	pc := p.pool.Config.PolicyConfig()
	_ = pc.Validate()
	return &consolidator{cfg: cfg, grace: 3*cfg.Every + 2*pc.IdleTimeout + 2*interval, moved: map[string]time.Time{}}, nil
}

// restartable reports whether pod may be evicted to run elsewhere: a
// controller of it recreates it, and it is not marked do-not-disrupt.
func restartable(pod *corev1.Pod) bool {
	if pod.Annotations[demand.DoNotDisrupt] == "true" {
		return false
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind != "DaemonSet" && o.Kind != "Node" {
			return true
		}
	}
	return false
}

func active(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// consolidate runs the pool's consolidation pass when it is due: nodes are
// the pool's Nodes, pods every pod by Node name, pending the pool's pods
// waiting for capacity (nothing moves while work waits).
func (o *Operator) consolidate(ctx context.Context, r *runner, now time.Time, nodes []*corev1.Node, pods map[string][]*corev1.Pod, pending int) error {
	c := r.cons
	if c == nil || r.err != nil || r.deleting || now.Before(c.next) {
		return nil
	}
	c.next = now.Add(c.cfg.Every)
	st := r.ctl.Status()
	if !st.Started || st.Deposed {
		return nil
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	in := consolidate.Input{Now: now, MinNodes: r.pool.Config.Nodes.Min, Pending: pending}
	present := map[string]bool{}
	for _, ns := range st.Nodes {
		name := r.nodeName(ns.MachineID)
		present[name] = true
		node := byName[name]
		if ns.Draining || ns.Replacing != "" {
			in.Disrupting++
			continue
		}
		if !ns.Joined || node == nil || node.DeletionTimestamp != nil {
			continue
		}
		if _, ok := c.moved[name]; ok {
			continue
		}
		cn := consolidate.Node{ID: name, Ordinal: int(ns.ID), Capacity: demand.Resources(node.Status.Allocatable),
			PricePerHour: offeringPrice(r.pool.Config.Offerings, ns.Offering), Cordoned: node.Spec.Unschedulable,
			Protected: r.pool.Config.Scaling.ProtectFirstNode && ns.ID == 0}
		for _, p := range pods[name] {
			if !active(p) {
				continue
			}
			var started time.Time
			if p.Status.StartTime != nil {
				started = p.Status.StartTime.Time
			}
			cn.Instances = append(cn.Instances, consolidate.Instance{ID: p.Namespace + "/" + p.Name, Requests: demand.Requests(p),
				Daemon: demand.Daemon(p), Restartable: restartable(p), DoNotDisrupt: p.Annotations[demand.DoNotDisrupt] == "true",
				StartedAt: started})
		}
		in.Nodes = append(in.Nodes, cn)
	}
	// Nodes emptied earlier: gone, still emptying, or kept by scale-down
	// (uncordoned after the grace).
	var errs []error
	for name, at := range c.moved {
		busy := slices.ContainsFunc(pods[name], func(p *corev1.Pod) bool { return active(p) && !demand.Daemon(p) })
		switch {
		case !present[name] || byName[name] == nil:
			delete(c.moved, name)
		case !busy && now.Sub(at) > c.grace:
			if err := r.work.Uncordon(ctx, controller.Node{Pool: r.name, MachineID: machineOf(r, st, name)}); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(c.moved, name)
		default:
			in.Disrupting++
		}
	}
	slices.SortFunc(in.Nodes, func(a, b consolidate.Node) int { return a.Ordinal - b.Ordinal })
	d := consolidate.Decide(c.cfg, in)
	for _, m := range d.Moves {
		if err := r.work.Cordon(ctx, controller.Node{Pool: r.name, MachineID: machineOf(r, st, m.Node)}); err != nil {
			errs = append(errs, err)
			continue
		}
		var evicted, held []string
		for _, id := range m.Instances {
			ns, name, _ := strings.Cut(id, "/")
			err := o.cfg.API.Evict(ctx, ns, name)
			switch {
			case err == nil, errors.Is(err, kubeapi.ErrNotFound):
				evicted = append(evicted, id)
			case errors.Is(err, kubeapi.ErrTooManyRequests):
				held = append(held, id) // a PodDisruptionBudget: evicted by the drain later, or never
			default:
				errs = append(errs, err)
			}
		}
		c.moved[m.Node] = now
		if o.metrics != nil && o.metrics.disrupted != nil {
			o.metrics.disrupted.WithLabelValues(r.name, "consolidate").Inc()
		}
		msg := fmt.Sprintf("%s; cordoned, evicted %s (their controllers recreate them on the pool's other Nodes)", m, strings.Join(evicted, ", "))
		if len(held) > 0 {
			msg += "; held by a PodDisruptionBudget: " + strings.Join(held, ", ")
		}
		if r.obj != nil {
			o.event(r.obj, corev1.EventTypeNormal, ReasonConsolidate, msg)
		}
		o.log.Info("consolidation move", "pool", r.name, "node", m.Node, "evicted", evicted, "held", held)
	}
	return errors.Join(errs...)
}

// machineOf returns the machine id of the pool's Node called name.
func machineOf(r *runner, st controller.Status, name string) string {
	if id, ok := r.nodes.Machine(name); ok {
		return id
	}
	for _, n := range st.Nodes {
		if r.nodeName(n.MachineID) == name {
			return n.MachineID
		}
	}
	return name
}

// offeringPrice returns the price per hour of the named offering.
func offeringPrice(offs []capacity.Offering, name string) float64 {
	for _, o := range offs {
		if o.Name() == name {
			return o.PricePerHour
		}
	}
	return 0
}
