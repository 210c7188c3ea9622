package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/validate"
)

// Config is a pool's scaling configuration: its node spec, its offerings and
// every policy knob. Each policy reads only the knobs it needs; Validate fills
// defaults for the zero values and rejects impossible combinations with
// messages that name the field.
type Config struct {
	// Policy is the policy name (one of Names; default tide).
	Policy string
	// Nodes is the pool's node spec.
	Nodes capacity.NodeSpec
	// Offerings are what the pool may launch (target-tracking and tide need at least one).
	Offerings []capacity.Offering

	// Cooldown is the minimum time between two scale-down decisions (default 30s).
	Cooldown time.Duration
	// IdleTimeout is how long a pool (skyward) or a node (tide) must be idle
	// before it is released (default 60s; 1s for tide, TideIdleTimeout).
	IdleTimeout time.Duration
	// SlotsPerNode is how many instances one node runs at once (skyward; default 1).
	SlotsPerNode int

	// TargetCapacity is the target CapacityProviderReservation in percent, 1..100 (default 100).
	TargetCapacity int
	// MinStep and MaxStep bound M in [N+MinStep, N+MaxStep] (defaults 1 and 10000).
	MinStep, MaxStep int
	// ScaleInDatapoints is the number of consecutive datapoints below target
	// before a scale-in (default 15).
	ScaleInDatapoints int
	// MetricPeriod is the interval between two datapoints (default 1m).
	MetricPeriod time.Duration
	// InstanceWarmup is ECS's instance warm-up period (seed 002's
	// instanceWarmupPeriod): a node that joined less than this long ago is
	// held out of target-tracking's metric (M and N) while it warms, still
	// counts as capacity a scale-out has bought, and holds scale-in until
	// it has warmed. 0 (the default here; ECS's is 300s) turns it off.
	InstanceWarmup time.Duration

	// MinUtilization is the minimum GPU utilization in percent, 1..100 (default 80).
	MinUtilization int
	// MinUnutilizedNodes is the number of empty nodes kept as a buffer (default 0).
	MinUnutilizedNodes int
	// ScaleDownDelay is how long a deletion mark waits before the node is deleted (default 10m).
	ScaleDownDelay time.Duration

	// BatchWindow is how long the tide policy lets a new backlog accumulate
	// before it scales up, so one decision covers a burst (default 1s).
	BatchWindow time.Duration
	// Headroom is the number of spare nodes the tide policy keeps (default 0).
	Headroom int
	// Prefer is the tide policy's one trade between waits and cost:
	// PreferLatency (the default), PreferBalanced or PreferCost (see
	// Turnover and preferZ).
	Prefer string

	// ConsolidateAfter is how long a node must be empty before the
	// karpenter policy consolidates it (Karpenter's consolidateAfter; zero,
	// Karpenter's default, consolidates at the next disruption poll).
	ConsolidateAfter time.Duration

	// ProtectFirstNode keeps the node with ordinal 0 out of every scale-down.
	ProtectFirstNode bool

	// Limits bound the pool's resources and cost in all (limits.go); the
	// zero value sets none.
	Limits Limits

	// ExpendableBelow, when set, is the priority below which waiting work
	// never causes a scale-up (priority.go).
	ExpendableBelow *int
}

// Validate fills defaults and checks every knob; the returned error names
// each bad field.
func (c *Config) Validate() error {
	if c.Policy == "" {
		c.Policy = Tide
	}
	var errs []error
	known := false
	for _, n := range Names {
		known = known || n == c.Policy
	}
	if !known {
		errs = append(errs, fmt.Errorf("policy: unknown policy %q (want one of %v)", c.Policy, Names))
	}
	if err := c.Nodes.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("nodes: %w", err))
	}
	for i, o := range c.Offerings {
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("offerings[%d]: %w", i, err))
		}
	}
	setDur(&c.Cooldown, 30*time.Second)
	if c.Policy == Tide {
		setDur(&c.IdleTimeout, TideIdleTimeout)
	}
	setDur(&c.IdleTimeout, 60*time.Second)
	setDur(&c.MetricPeriod, time.Minute)
	setDur(&c.ScaleDownDelay, 10*time.Minute)
	setDur(&c.BatchWindow, time.Second)
	setInt(&c.SlotsPerNode, 1)
	setInt(&c.TargetCapacity, 100)
	setInt(&c.MinStep, 1)
	setInt(&c.MaxStep, 10000)
	setInt(&c.ScaleInDatapoints, 15)
	setInt(&c.MinUtilization, 80)
	if c.Prefer == "" {
		c.Prefer = PreferLatency
	}
	if _, ok := preferZ(c.Prefer); !ok && c.Prefer != PreferLatency {
		errs = append(errs, fmt.Errorf("prefer: unknown %q (want %s, %s or %s)", c.Prefer, PreferCost, PreferBalanced, PreferLatency))
	}
	for name, d := range map[string]time.Duration{"cooldown": c.Cooldown, "idle_timeout": c.IdleTimeout,
		"metric_period": c.MetricPeriod, "scale_down_delay": c.ScaleDownDelay, "batch_window": c.BatchWindow,
		"consolidate_after": c.ConsolidateAfter, "instance_warmup": c.InstanceWarmup} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", name, d))
		}
	}
	for name, v := range map[string]int{"slots_per_node": c.SlotsPerNode, "scale_step.min": c.MinStep,
		"scale_step.max": c.MaxStep, "scale_in_datapoints": c.ScaleInDatapoints,
		"min_unutilized_nodes": c.MinUnutilizedNodes, "headroom": c.Headroom} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", name, v))
		} else if v > validate.MaxNodes {
			errs = append(errs, fmt.Errorf("%s: must be at most %d, got %d", name, validate.MaxNodes, v))
		}
	}
	if c.TargetCapacity < 1 || c.TargetCapacity > 100 {
		errs = append(errs, fmt.Errorf("target_capacity: must be within 1..100, got %d", c.TargetCapacity))
	}
	if c.MinUtilization < 1 || c.MinUtilization > 100 {
		errs = append(errs, fmt.Errorf("min_utilization: must be within 1..100, got %d", c.MinUtilization))
	}
	if c.MinStep > c.MaxStep {
		errs = append(errs, fmt.Errorf("scale_step.min: %d is above scale_step.max %d", c.MinStep, c.MaxStep))
	}
	errs = append(errs, c.Limits.Validate(c.Nodes, c.Offerings)...)
	if (c.Policy == TargetTracking || c.Policy == Tide || c.Policy == Karpenter || c.Policy == ClusterAutoscaler) && len(c.Offerings) == 0 {
		errs = append(errs, fmt.Errorf("offerings: policy %s needs at least one offering", c.Policy))
	}
	return errors.Join(errs...)
}

// The values of Config.Prefer, measured on generated cases in
// docs/benchmarks.md ("Scaling quality VIII"): counting on completions
// lowers the mean cost and lengthens the waits of the instances whose
// completions came late, so the default counts on none.
const (
	// PreferLatency (the default) counts on no completion: the backlog is
	// bought for whole at once.
	PreferLatency = "latency"
	// PreferBalanced counts on the running work that finishes within a
	// boot with about 84 % confidence (k − √k of the k completions
	// expected).
	PreferBalanced = "balanced"
	// PreferCost counts on all the completions expected within a boot:
	// fewer nodes, and a longer wait when they come late.
	PreferCost = "cost"
)

// preferZ returns the confidence factor z of a Prefer value (Turnover.Expected)
// and whether completions count at all.
func preferZ(prefer string) (z float64, ok bool) {
	switch prefer {
	case PreferBalanced:
		return 1, true
	case PreferCost:
		return 0, true
	}
	return 0, false
}

func setDur(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func setInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// New validates cfg (filling its defaults) and returns the policy it names.
func New(cfg Config) (Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var p Policy
	switch cfg.Policy {
	case Skyward:
		p = withPurchase(NewSkyward(cfg), cfg)
	case TargetTracking:
		p = withPurchase(NewTargetTracking(cfg), cfg)
	case Utilization:
		p = withPurchase(NewUtilization(cfg), cfg)
	case Karpenter:
		p = NewKarpenter(cfg)
	case ClusterAutoscaler:
		p = NewClusterAutoscaler(cfg)
	default:
		p = NewTide(cfg)
	}
	return withLimits(withPriorities(p, cfg), cfg), nil
}
