package shardctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet"
)

// Errors of Operator.Bootstrap.
var (
	// ErrBootstrapPending: the cluster has been asked for the machine's blob
	// and has not answered yet; Configure waits for its next needs.
	ErrBootstrapPending = errors.New("bootstrap requested from the cluster's operator; waiting for its answer")
	// ErrBootstrapRefused: the cluster answered that it gives no blob for the
	// machine (it no longer needs one of that profile).
	ErrBootstrapRefused = errors.New("the cluster's operator refused to bootstrap the machine")
)

// DefaultBootstrapTimeout bounds how long a machine waits for its cluster
// to answer a bootstrap request before it returns to Idle.
const DefaultBootstrapTimeout = 2 * time.Minute

// opCluster is what the shard holds for a cluster that is its own operator
// (ClusterCapacityNeeds.operator): the requests it has not answered yet, the
// answers not yet used, and the machines bound to it as of the last cycle.
type opCluster struct {
	requests map[string]*fleetv1.OperatorRequest // by machine
	answers  map[string]*fleetv1.BootstrapAnswer // by machine
	machines []*fleetv1.ClusterMachine
	listed   bool // machines has been computed since the cluster became an operator
}

// clusterOperator is the default Operator. A cluster that is its own
// operator is asked for each machine's blob and told of each cordon through
// its SendNeeds answers, and answers in its next needs; for any other
// cluster the blob is the static one it sent with its needs, and a cordon
// is only the grace waited before the provider's Drain.
type clusterOperator struct{ c *Controller }

// Bootstrap returns the cluster's answer for the machine, or asks for one
// (ErrBootstrapPending).
func (o clusterOperator) Bootstrap(_ context.Context, cluster, machine, profile string) ([]byte, error) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	id, known := c.clusters[cluster]
	oc := c.operators[id]
	if !known || oc == nil {
		if len(c.blobs[id]) > 0 {
			return c.blobs[id], nil
		}
		return nil, fmt.Errorf("bootstrap: cluster %q sent no bootstrap blob with its needs and is not its own operator", cluster)
	}
	if a, ok := oc.answers[machine]; ok {
		delete(oc.answers, machine)
		delete(oc.requests, machine)
		if a.GetError() != "" || len(a.GetBlob()) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrBootstrapRefused, a.GetError())
		}
		return a.GetBlob(), nil
	}
	oc.requests[machine] = &fleetv1.OperatorRequest{Kind: "bootstrap", Machine: machine, Profile: profile}
	return nil, ErrBootstrapPending
}

// Cordon tells an operator cluster to stop placing work on the machine; the
// request stays listed while the machine is bound to the cluster.
func (o clusterOperator) Cordon(_ context.Context, cluster, machine string, grace time.Duration, reason string) error {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if oc := c.operators[c.clusters[cluster]]; oc != nil {
		oc.requests[machine] = &fleetv1.OperatorRequest{Kind: "cordon", Machine: machine, GraceMs: grace.Milliseconds(),
			Reason: reason}
	}
	return nil
}

// noteOperator records what an operator cluster's needs carry: its answers
// to bootstrap requests. Called with c.mu held.
func (c *Controller) noteOperator(id fleet.ClusterID, m *fleetv1.ClusterCapacityNeeds) {
	if !m.GetOperator() {
		delete(c.operators, id)
		return
	}
	oc := c.operators[id]
	if oc == nil {
		oc = &opCluster{requests: map[string]*fleetv1.OperatorRequest{}, answers: map[string]*fleetv1.BootstrapAnswer{}}
		c.operators[id] = oc
	}
	for _, a := range m.GetBootstraps() {
		if r := oc.requests[a.GetMachine()]; r != nil && r.GetKind() == "bootstrap" {
			oc.answers[a.GetMachine()] = a
		}
	}
}

// operatorView lists what the shard asks of the cluster and the machines
// bound to it, for its SendNeeds answer.
func (c *Controller) operatorView(id fleet.ClusterID) ([]*fleetv1.OperatorRequest, []*fleetv1.ClusterMachine, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	oc := c.operators[id]
	if oc == nil {
		return nil, nil, false
	}
	reqs := make([]*fleetv1.OperatorRequest, 0, len(oc.requests))
	for _, r := range oc.requests {
		if _, answered := oc.answers[r.GetMachine()]; !answered {
			reqs = append(reqs, r)
		}
	}
	slices.SortFunc(reqs, func(a, b *fleetv1.OperatorRequest) int { return strings.Compare(a.GetMachine(), b.GetMachine()) })
	return reqs, oc.machines, oc.listed
}

// refreshOperators lists, once a cycle, the machines bound to each operator
// cluster, and drops requests that became moot: a bootstrap for a machine no
// longer configuring into the cluster, a cordon for one no longer bound to
// it. Called by the cycle goroutine.
func (c *Controller) refreshOperators() {
	c.mu.Lock()
	ops := len(c.operators)
	c.mu.Unlock()
	if ops == 0 {
		return
	}
	bound := map[fleet.ClusterID][]*fleetv1.ClusterMachine{}
	for id, slot := range c.byID {
		info, ok := c.shard.Machine(slot)
		if !ok || info.Cluster == 0 {
			continue
		}
		var st string
		switch info.State {
		case fleet.Configuring:
			st = "configuring"
		case fleet.Configured:
			st = "configured"
		case fleet.Draining:
			st = "draining"
		default:
			continue
		}
		bound[info.Cluster] = append(bound[info.Cluster], &fleetv1.ClusterMachine{Machine: id,
			Profile: c.cat.ProfileName(c.cat.OfferingProfile(info.Offering)), State: st})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for cid, oc := range c.operators {
		ms := bound[cid]
		slices.SortFunc(ms, func(a, b *fleetv1.ClusterMachine) int { return strings.Compare(a.GetMachine(), b.GetMachine()) })
		oc.machines, oc.listed = ms, true
		state := map[string]string{}
		for _, m := range ms {
			state[m.GetMachine()] = m.GetState()
		}
		for machine, r := range oc.requests {
			st := state[machine]
			if r.GetKind() == "bootstrap" && st != "configuring" || st == "" {
				delete(oc.requests, machine)
				delete(oc.answers, machine)
			}
		}
	}
}

// offeringOf returns the offering of one of the shard's machines.
func (c *Controller) offeringOf(slot fleet.MachineID) fleet.OfferingID {
	info, _ := c.shard.Machine(slot)
	return info.Offering
}

// drainReason says why a drain takes a machine from its cluster, for the
// cluster's events.
func (c *Controller) drainReason(a fleet.Action) string {
	switch {
	case a.Reason == fleet.ReasonPreempt && a.For != 0:
		return fmt.Sprintf("preempted by the fleet for cluster %s, a need of higher priority (gap %d)",
			c.clusterName(a.For), a.Gap)
	case a.Reason == fleet.ReasonPreempt:
		return fmt.Sprintf("preempted by the fleet for a need of higher priority (gap %d)", a.Gap)
	}
	return "reclaimed by the fleet: " + a.Reason.String()
}

// clusterEvery bounds how often the clusters' status is computed (it costs
// the clusters' profiles; the status is for people, the cycle is not).
const clusterEvery = time.Second

// refreshClusters computes, at most once per clusterEvery, what each
// cluster asked, what it holds and why it is short. Called by the cycle
// goroutine.
func (c *Controller) refreshClusters(now time.Time) {
	if now.Sub(c.clustersAt) < clusterEvery {
		return
	}
	c.clustersAt = now
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.needs))
	names := maps.Clone(c.names)
	ops := map[fleet.ClusterID]bool{}
	for id := range c.operators {
		ops[id] = true
	}
	c.mu.Unlock()
	slices.Sort(ids)
	sfs := c.shard.Shortfalls()
	out := make([]*fleetv1.ClusterStatus, 0, len(ids))
	for _, id := range ids {
		cs := &fleetv1.ClusterStatus{Cluster: names[id], Shard: uint32(c.cfg.Shard), Operator: ops[id]}
		var whys []string
		for _, a := range c.shard.ClusterAllocs(id) {
			cs.Asked += a.Want
			cs.Granted += a.Bound
			if d := a.Want - a.Bound - a.Incoming; d > 0 {
				why := fmt.Sprintf("%d of profile %s at priority %d not placed", d, c.cat.ProfileName(a.Profile), a.Priority)
				for _, sf := range sfs {
					if sf.Profile == a.Profile && sf.Priority == a.Priority {
						why = fmt.Sprintf("the shard is short of %d of profile %s at priority %d for %d cycle(s)",
							sf.Count, c.cat.ProfileName(a.Profile), a.Priority, sf.Age)
					}
				}
				whys = append(whys, why)
			} else if a.Incoming > 0 {
				whys = append(whys, fmt.Sprintf("%d of profile %s on their way", a.Incoming, c.cat.ProfileName(a.Profile)))
			}
		}
		cs.Short = max(cs.Asked-cs.Granted, 0)
		cs.Why = strings.Join(whys, "; ")
		out = append(out, cs)
	}
	c.mu.Lock()
	c.clusterStatus = out
	c.mu.Unlock()
}

// ClusterStatus returns what each of the shard's clusters asked, holds and
// lacks, as of the last refresh (at most clusterEvery old).
func (c *Controller) ClusterStatus() []*fleetv1.ClusterStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterStatus
}
