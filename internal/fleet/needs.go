package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/validate"
)

// ClusterCapacityNeeds is one cluster's full roll-up of what it needs (BigFleet
// §1): per profile, a count of machines at a priority. A message replaces the
// cluster's previous needs entirely: a profile it no longer names is needed
// no more (Phase 3 reclaims its machines). Sending the same message again
// changes nothing.
type ClusterCapacityNeeds struct {
	Cluster ClusterID
	Needs   []Need
	// Release names machines of the cluster that it gives back (emptied by
	// the cluster). When the cluster's needs leave machines of a profile in
	// excess, Phase 3 reclaims these first and without a grace; ids that
	// are not the cluster's are ignored.
	Release []MachineID
}

// Need is one profile's line of a ClusterCapacityNeeds.
type Need struct {
	Profile ProfileID
	// Count is how many machines of the profile the cluster needs joined.
	Count int32
	// Priority orders needs (higher first) and decides preemption; the
	// drain grace of a preemption scales with the priority gap (BigFleet
	// uses values up to about 1,000,000).
	Priority int32
	// InterruptionPenalty is what interrupting one of the cluster's
	// machines costs, in dollars; victim scoring prefers low penalties.
	InterruptionPenalty float64
	// DrainTime is how long draining one machine of the cluster takes;
	// victim scoring prefers quick drains. Zero: Config.DefaultDrainTime.
	DrainTime time.Duration
	// Topology, when set, constrains the machines to one topology domain
	// (e.g. a GPU rack group). A shard is such a domain: a constrained need
	// is served from this shard's inventory only, and the coordinator never
	// moves capacity across shards for it.
	Topology string
}

// Validate checks the message against the catalog; errors name the field.
func (n *ClusterCapacityNeeds) Validate(cat *Catalog) error {
	var errs []error
	if n.Cluster == 0 {
		errs = append(errs, errors.New("cluster: must not be 0"))
	}
	seen := make(map[ProfileID]int, len(n.Needs))
	for i, need := range n.Needs {
		field := fmt.Sprintf("needs[%d]", i)
		if !cat.validProfile(need.Profile) {
			errs = append(errs, fmt.Errorf("%s.profile: unknown profile %d", field, need.Profile))
		} else if j, dup := seen[need.Profile]; dup {
			errs = append(errs, fmt.Errorf("%s.profile: profile %s already needed by needs[%d]", field,
				cat.ProfileName(need.Profile), j))
		}
		seen[need.Profile] = i
		errs = append(errs, validate.NonNegative(field+".count", need.Count),
			validate.NonNegative(field+".priority", need.Priority),
			validate.Amount(field+".interruption_penalty", need.InterruptionPenalty))
		if need.DrainTime < 0 {
			errs = append(errs, fmt.Errorf("%s.drain_time: must not be negative, got %s", field, need.DrainTime))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %s: %w", n.Cluster, err)
	}
	return nil
}
