package shardctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleetpb"
)

// Errors of SubmitNeeds.
var (
	// ErrNotAssigned: the cluster has not made first contact (send its
	// needs to the coordinator, which assigns it).
	ErrNotAssigned = errors.New("cluster not assigned to a shard yet: send its needs to the coordinator")
	// ErrWrongShard: the cluster belongs to another shard.
	ErrWrongShard = errors.New("cluster assigned to another shard")
)

// SubmitNeeds accepts a cluster's needs for the next cycle (the latest
// message of a cluster wins). The cluster must be assigned to this shard;
// its assignment is looked up in etcd once, then remembered, so needs of
// known clusters are accepted while etcd is down. Safe for concurrent use.
func (c *Controller) SubmitNeeds(ctx context.Context, m *fleetv1.ClusterCapacityNeeds) (fleet.ClusterID, error) {
	if m == nil {
		return 0, errors.New("needs: must be set")
	}
	name := m.GetCluster()
	if err := etcdstate.ValidClusterName(name); err != nil {
		return 0, err
	}
	c.mu.Lock()
	cat := c.catalog
	id, known := c.clusters[name]
	c.mu.Unlock()
	if cat == nil {
		return 0, ErrNotStarted
	}
	if !known {
		rec, err := c.store.LookupCluster(ctx, name)
		switch {
		case errors.Is(err, etcdstate.ErrNotFound):
			return 0, fmt.Errorf("cluster %q: %w", name, ErrNotAssigned)
		case err != nil:
			return 0, fmt.Errorf("cluster %q: assignment: %w", name, err)
		case rec.Shard != uint16(c.cfg.Shard):
			return 0, fmt.Errorf("cluster %q: %w (s%d)", name, ErrWrongShard, rec.Shard)
		}
		id = fleet.ClusterID(rec.ID)
	}
	needs, err := fleetpb.Needs(cat, id, m)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.clusters[name], c.names[id] = id, name
	c.inbox[id] = needs
	c.needs[id] = needs
	c.releases[id] = slices.Clone(m.GetRelease())
	if len(m.GetBootstrap()) > 0 {
		c.blobs[id] = append([]byte(nil), m.GetBootstrap()...)
	}
	c.noteOperator(id, m)
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
	return id, nil
}

// takeInbox returns the needs received since the last cycle, the machines
// they release resolved from provider ids to the shard's.
func (c *Controller) takeInbox() []fleet.ClusterCapacityNeeds {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]fleet.ClusterCapacityNeeds, 0, len(c.inbox))
	for id, n := range c.inbox {
		for _, name := range c.releases[id] {
			if slot, ok := c.byID[name]; ok {
				n.Release = append(n.Release, slot)
			}
		}
		out = append(out, n)
	}
	clear(c.inbox)
	clear(c.releases)
	return out
}

// publish writes the shard's report to etcd (on its lease) and refreshes
// the status.
func (c *Controller) publish(ctx context.Context, now time.Time) {
	c.refreshOperators()
	c.refreshClusters(now)
	sum := c.shard.Summary(c.cfg.Shard, c.wanted...)
	sfs := c.shard.Shortfalls()
	c.mu.Lock()
	clusters := len(c.needs)
	c.mu.Unlock()
	cfg := c.shard.Config()
	r := etcdstate.Report{Shard: uint16(c.cfg.Shard), Epoch: c.epoch, Address: c.cfg.Address, Cycle: c.shard.Cycle(),
		Updated: now, Summary: sum, Shortfalls: sfs, EscalateAfter: cfg.EscalateAfter, Clusters: clusters,
		Refused: c.refused}
	if !c.lost {
		if c.paused != "" {
			r.Paused, r.PausedReason = true, c.paused
		}
		if err := c.store.PutReport(ctx, r, c.lease); err != nil {
			c.etcdFailed("report", err)
		}
	}
	c.mu.Lock()
	c.sfs = sfs
	c.status = Status{Shard: c.cfg.Shard, Address: c.cfg.Address, Epoch: c.epoch, Started: true, Cycle: c.shard.Cycle(),
		Summary: sum, Clusters: clusters, Escalated: int(sum.Escalated), Refused: c.refused, Paused: c.paused,
		Deposed: c.deposed, Updated: now, Directives: append([]etcdstate.Directive(nil), c.inFlight...)}
	c.mu.Unlock()
}
