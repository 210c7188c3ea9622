package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Escalation is one shard's escalated shortfall, as the coordinator receives it.
type Escalation struct {
	Shard     ShardID
	Shortfall Shortfall
}

// DirectiveKind is one of the coordinator's three responses (BigFleet §9).
type DirectiveKind uint8

// The directive kinds, in the order the coordinator tries them.
const (
	// ReassignIdle: From exports Count Idle machines of Profile
	// (Shard.Export), To imports them (Shard.Import).
	ReassignIdle DirectiveKind = iota + 1
	// ReassignQuota: the same with Speculative slots (quota).
	ReassignQuota
	// Preempt: From drains Count machines of Profile held well below
	// Priority (Shard.Preempt); once drained they are exported to To.
	Preempt
)

var directiveNames = [...]string{"", "reassign-idle", "reassign-quota", "preempt"}

// String returns the kind's name.
func (k DirectiveKind) String() string {
	if int(k) < len(directiveNames) && k != 0 {
		return directiveNames[k]
	}
	return fmt.Sprintf("directive(%d)", uint8(k))
}

// Directive is one instruction of a coordinator Plan.
type Directive struct {
	Kind     DirectiveKind
	From, To ShardID
	Profile  ProfileID
	Count    uint32
	// Priority is the shortfall's priority (Preempt: victims must be at
	// least CoordinatorConfig.MinPreemptGap below it).
	Priority int32
}

// String formats the directive with a numeric profile id.
func (d Directive) String() string {
	return fmt.Sprintf("%s %s→%s p%d count=%d prio=%d", d.Kind, d.From, d.To, uint16(d.Profile), d.Count, d.Priority)
}

// Unanswered is an escalation (with the count still unmet) the plan could
// not cover, and why.
type Unanswered struct {
	Escalation
	Reason string
}

// Plan is the coordinator's answer to one round of escalations.
type Plan struct {
	Directives []Directive
	Unanswered []Unanswered
}

// CoordinatorConfig tunes PlanShortfalls.
type CoordinatorConfig struct {
	// Preemption enables response 3, cross-shard preemption.
	Preemption bool
	// MinPreemptGap is the smallest priority gap that justifies preempting
	// across shards. Zero: 500,000.
	MinPreemptGap int64
	// MaxPreemptions bounds the machines a plan preempts. Zero: 100.
	MaxPreemptions int
}

// Validate fills in defaults and checks the fields; errors name the field.
func (c CoordinatorConfig) Validate() (CoordinatorConfig, error) {
	if c.MinPreemptGap == 0 {
		c.MinPreemptGap = 500_000
	}
	if c.MaxPreemptions == 0 {
		c.MaxPreemptions = 100
	}
	var errs []error
	if c.MinPreemptGap < 0 {
		errs = append(errs, fmt.Errorf("min_preempt_gap: must be positive, got %d", c.MinPreemptGap))
	}
	if c.MaxPreemptions < 0 {
		errs = append(errs, fmt.Errorf("max_preemptions: must be positive, got %d", c.MaxPreemptions))
	}
	return c, errors.Join(errs...)
}

// PlanShortfalls is the coordinator's pure logic (BigFleet §9): it answers
// escalated shortfalls, highest priority first (then oldest), by (1)
// reassigning Idle machines from other shards, (2) reassigning Speculative
// quota, and (3), when enabled and the priority gap is wide, cross-shard
// preemption (drain first; rare and bounded). Donors are taken in order of
// most spare capacity in their summary (lowest floor for preemption), then
// lowest shard id. It
// never moves capacity for a topology-constrained shortfall: those stay
// inside their shard. Errors name the summary or escalation.
func PlanShortfalls(cfg CoordinatorConfig, summaries []ShardSummary, escalations []Escalation) (Plan, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return Plan{}, fmt.Errorf("config: %w", err)
	}
	type spare struct {
		shard ShardID
		ProfileSpare
	}
	byProfile := map[ProfileID][]*spare{}
	known := map[ShardID]bool{}
	for i := range summaries {
		sum := &summaries[i]
		if known[sum.Shard] {
			return Plan{}, fmt.Errorf("summaries[%d].shard: %s summarized twice", i, sum.Shard)
		}
		if int(sum.Profiles) > SummaryProfiles {
			return Plan{}, fmt.Errorf("summaries[%d].profiles: %d entries, at most %d", i, sum.Profiles, SummaryProfiles)
		}
		known[sum.Shard] = true
		for _, sp := range sum.Spares() {
			byProfile[sp.Profile] = append(byProfile[sp.Profile], &spare{sum.Shard, sp})
		}
	}
	for i, e := range escalations {
		if !known[e.Shard] {
			return Plan{}, fmt.Errorf("escalations[%d].shard: no summary for %s", i, e.Shard)
		}
		if e.Shortfall.Count <= 0 {
			return Plan{}, fmt.Errorf("escalations[%d].count: must be positive, got %d", i, e.Shortfall.Count)
		}
	}
	order := slices.Clone(escalations)
	slices.SortStableFunc(order, func(x, y Escalation) int {
		return cmp.Or(cmp.Compare(y.Shortfall.Priority, x.Shortfall.Priority), cmp.Compare(y.Shortfall.Age, x.Shortfall.Age),
			cmp.Compare(x.Shard, y.Shard), cmp.Compare(x.Shortfall.Profile, y.Shortfall.Profile))
	})
	// Donor orders per profile, computed once from the summaries: most Idle,
	// most Speculative, lowest floor; ties by shard id.
	type donorOrders struct{ idle, spec, floor []*spare }
	ordered := map[ProfileID]*donorOrders{}
	orders := func(p ProfileID) *donorOrders {
		if o := ordered[p]; o != nil {
			return o
		}
		ds := byProfile[p]
		sorted := func(by func(x, y *spare) int) []*spare {
			out := slices.Clone(ds)
			slices.SortStableFunc(out, func(x, y *spare) int { return cmp.Or(by(x, y), cmp.Compare(x.shard, y.shard)) })
			return out
		}
		o := &donorOrders{
			idle:  sorted(func(x, y *spare) int { return cmp.Compare(y.Idle, x.Idle) }),
			spec:  sorted(func(x, y *spare) int { return cmp.Compare(y.Speculative, x.Speculative) }),
			floor: sorted(func(x, y *spare) int { return cmp.Compare(x.Floor, y.Floor) }),
		}
		ordered[p] = o
		return o
	}
	var plan Plan
	preemptions := 0
	for _, e := range order {
		if e.Shortfall.Topology {
			plan.Unanswered = append(plan.Unanswered, Unanswered{e, "topology-constrained: stays inside its shard"})
			continue
		}
		need := uint32(e.Shortfall.Count)
		take := func(kind DirectiveKind, donors []*spare, avail func(*spare) *uint32, ok func(*spare) bool) {
			for _, d := range donors {
				if need == 0 {
					return
				}
				if d.shard == e.Shard || *avail(d) == 0 || !ok(d) {
					continue
				}
				n := min(need, *avail(d))
				if kind == Preempt {
					n = min(n, uint32(cfg.MaxPreemptions-preemptions))
					if n == 0 {
						return
					}
					preemptions += int(n)
				}
				*avail(d) -= n
				need -= n
				plan.Directives = append(plan.Directives, Directive{Kind: kind, From: d.shard, To: e.Shard,
					Profile: e.Shortfall.Profile, Count: n, Priority: e.Shortfall.Priority})
			}
		}
		o := orders(e.Shortfall.Profile)
		all := func(*spare) bool { return true }
		take(ReassignIdle, o.idle, func(d *spare) *uint32 { return &d.Idle }, all)
		take(ReassignQuota, o.spec, func(d *spare) *uint32 { return &d.Speculative }, all)
		if cfg.Preemption {
			take(Preempt, o.floor, func(d *spare) *uint32 { return &d.Configured }, func(d *spare) bool {
				return int64(e.Shortfall.Priority)-int64(d.Floor) >= cfg.MinPreemptGap
			})
		}
		if need > 0 {
			e.Shortfall.Count = int32(need)
			plan.Unanswered = append(plan.Unanswered, Unanswered{e, "no spare capacity in other shards"})
		}
	}
	return plan, nil
}
