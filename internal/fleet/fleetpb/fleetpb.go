// Package fleetpb converts between the fleet's gRPC messages (api/fleetv1)
// and the decision engine's types (internal/fleet): names on the wire,
// catalog ids inside. Errors name the field.
package fleetpb

import (
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
)

// MaxBootstrap bounds the bootstrap blob a cluster sends with its needs.
const MaxBootstrap = 16 << 10

// Needs converts a ClusterCapacityNeeds message for the cluster with id
// cluster and validates it against the catalog.
func Needs(cat *fleet.Catalog, cluster fleet.ClusterID, m *fleetv1.ClusterCapacityNeeds) (fleet.ClusterCapacityNeeds, error) {
	if m == nil {
		return fleet.ClusterCapacityNeeds{}, errors.New("needs: must be set")
	}
	if len(m.GetBootstrap()) > MaxBootstrap {
		return fleet.ClusterCapacityNeeds{}, fmt.Errorf("needs.bootstrap: %d bytes, at most %d", len(m.GetBootstrap()),
			MaxBootstrap)
	}
	out := fleet.ClusterCapacityNeeds{Cluster: cluster, Needs: make([]fleet.Need, 0, len(m.GetNeeds()))}
	var errs []error
	for i, n := range m.GetNeeds() {
		p, ok := cat.Profile(n.GetProfile())
		if !ok {
			errs = append(errs, fmt.Errorf("needs[%d].profile: unknown profile %q", i, n.GetProfile()))
			continue
		}
		if n.GetDrainTimeMs() < 0 {
			errs = append(errs, fmt.Errorf("needs[%d].drain_time_ms: must not be negative", i))
			continue
		}
		out.Needs = append(out.Needs, fleet.Need{Profile: p, Count: n.GetCount(), Priority: n.GetPriority(),
			InterruptionPenalty: n.GetInterruptionPenalty(),
			DrainTime:           time.Duration(n.GetDrainTimeMs()) * time.Millisecond, Topology: n.GetTopology()})
	}
	if err := errors.Join(errs...); err != nil {
		return fleet.ClusterCapacityNeeds{}, fmt.Errorf("cluster %q: %w", m.GetCluster(), err)
	}
	if err := out.Validate(cat); err != nil {
		return fleet.ClusterCapacityNeeds{}, err
	}
	return out, nil
}

// Shortfall converts one shard's shortfall.
func Shortfall(cat *fleet.Catalog, shard uint16, sf fleet.Shortfall, escalateAfter int) *fleetv1.Shortfall {
	return &fleetv1.Shortfall{Shard: uint32(shard), Profile: cat.ProfileName(sf.Profile), Priority: sf.Priority,
		Count: sf.Count, Age: sf.Age, InterruptionPenalty: sf.InterruptionPenalty, Topology: sf.Topology,
		Escalated: int(sf.Age) > escalateAfter}
}

// Directive converts a directive record.
func Directive(d *etcdstate.Directive) *fleetv1.Directive {
	return &fleetv1.Directive{Id: d.ID, Kind: d.Kind, From: uint32(d.From), To: uint32(d.To), Profile: d.Profile,
		Count: d.Count, Priority: d.Priority, State: d.State, Moved: uint32(len(d.Exported))}
}

// ShardStatus converts a shard's report.
func ShardStatus(r *etcdstate.Report, live bool) *fleetv1.ShardStatus {
	return &fleetv1.ShardStatus{Shard: uint32(r.Shard), Address: r.Address, Epoch: uint64(r.Epoch), Live: live,
		Cycle: r.Cycle, Machines: r.Summary.Machines, Configured: r.Summary.Configured, Idle: r.Summary.Idle,
		Speculative: r.Summary.Speculative, Escalated: r.Summary.Escalated, Clusters: uint32(r.Clusters),
		ProvisioningPaused: r.Paused, PausedReason: r.PausedReason, UpdatedUnixMs: r.Updated.UnixMilli()}
}
