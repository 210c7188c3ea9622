// Package fleetpb converts between the fleet's gRPC messages (api/fleetv1)
// and the decision engine's types (internal/fleet): names on the wire,
// catalog ids inside. Errors name the field.
package fleetpb

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/validate"
)

// MaxBootstrap bounds the bootstrap blob a cluster sends with its needs.
const MaxBootstrap = 16 << 10

// maxDrainTimeMs is the longest drain time a need may state: what a
// time.Duration holds in milliseconds (a longer one would wrap negative).
const maxDrainTimeMs = int64(math.MaxInt64 / time.Millisecond)

// CheckNeeds refuses the numbers of a ClusterCapacityNeeds message that
// cannot be meant, without a catalog (a client checks its file before
// sending it): negative counts and priorities, a NaN, infinite or negative
// interruption penalty, a drain time out of range. Errors name the field;
// the fleet applies the same rules (internal/validate) when it converts the
// message.
func CheckNeeds(m *fleetv1.ClusterCapacityNeeds) error {
	var errs []error
	for i, n := range m.GetNeeds() {
		field := fmt.Sprintf("needs[%d]", i)
		errs = append(errs, validate.NonNegative(field+".count", n.GetCount()),
			validate.NonNegative(field+".priority", n.GetPriority()),
			validate.Amount(field+".interruption_penalty", n.GetInterruptionPenalty()),
			validate.Between(field+".drain_time_ms", n.GetDrainTimeMs(), 0, maxDrainTimeMs))
	}
	return errors.Join(errs...)
}

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
		if err := validate.Between(fmt.Sprintf("needs[%d].drain_time_ms", i), n.GetDrainTimeMs(), 0, maxDrainTimeMs); err != nil {
			errs = append(errs, err)
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
