// Package config reads tide's YAML configuration: the node pools, each with
// its provider, node spec, offerings, selector and scaling policy knobs.
//
// Configuration is validated once, here, into typed structs; every error
// names the file, the pool and the field. Unknown fields are errors, so a
// typo never silently falls back to a default.
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/internal/validate"
)

// File is a whole configuration file.
type File struct {
	// Pools are the node pools, in file order.
	Pools []Pool `json:"pools"`
	// Strategy splits the instances that name no pool across pools by
	// base and weight, as an ECS capacity-provider strategy does
	// (strategy.go). Empty: each goes to the heaviest, then cheapest pool
	// that fits.
	Strategy Strategy `json:"strategy,omitempty"`
}

// Pool is one node pool.
type Pool struct {
	// Name identifies the pool (a DNS label: lowercase letters, digits, '-').
	Name string `json:"name"`
	// Provider says where the pool's machines come from.
	Provider Provider `json:"provider"`
	// Nodes is the node spec: 4, [2, 16], {min, desired} or {min, desired, max}.
	Nodes capacity.NodeSpec `json:"nodes"`
	// Offerings are the machine kinds the pool may launch.
	Offerings []capacity.Offering `json:"offerings"`
	// Selector decides which instances the pool serves.
	Selector Selector `json:"selector"`
	// Scaling holds the policy and its knobs.
	Scaling Scaling `json:"scaling"`
	// Disruption is the pool's consolidation and its budgets (disruption.go).
	Disruption *Disruption `json:"disruption,omitempty"`
	// Lifecycle is what happens to the pool's nodes after launch:
	// launch and registration timeouts, repair, expiry (lifecycle.go).
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Weight prefers the pool outright when routing an instance that names
	// no pool (0..100, Karpenter's NodePool weight): among the pools whose
	// selector and offerings fit, the heaviest first, the cheapest
	// breaking ties.
	Weight int `json:"weight,omitempty"`
	// MaxQueued caps the instances waiting (PENDING) in the pool: a submit
	// that would pass it is refused with 429 (seed 002's provisioning
	// queue cap). 0, the default, is no cap.
	MaxQueued int `json:"max_queued,omitempty"`
	// MaxWait fails an instance of the pool that has waited (PENDING)
	// this long without being placed: it ends FAILED with the reason "no
	// capacity within <max_wait>: <why it waited>" (seed 002: ECS stops a
	// task left in its provisioning queue). An instance's own max_wait
	// wins. 0, the default, waits for ever.
	MaxWait Duration `json:"max_wait,omitempty"`
	// Limits bound the pool's CPU, memory, GPUs and cost per hour in all
	// (limits.go); a purchase never crosses them.
	Limits Limits `json:"limits,omitzero"`
}

// Provider selects and configures a capacity provider.
type Provider struct {
	// Type is the provider kind: local, sim, plugin, netns, aws, kwok or fleet.
	Type string `json:"type"`
	// Options are provider-specific settings, passed through as given.
	Options map[string]any `json:"options,omitempty"`
}

// ProviderTypes lists the provider kinds a config may name.
var ProviderTypes = []string{"local", "sim", "plugin", "netns", "aws", "kwok", "fleet"}

// Selector matches instances to a pool by labels (all must match).
type Selector struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// Scaling is a pool's scaling policy and knobs; zero values take the
// defaults documented on policy.Config.
type Scaling struct {
	Policy             string    `json:"policy,omitempty"`
	Cooldown           Duration  `json:"cooldown,omitempty"`
	IdleTimeout        Duration  `json:"idle_timeout,omitempty"`
	ReconcileInterval  Duration  `json:"reconcile_interval,omitempty"`
	SlotsPerNode       int       `json:"slots_per_node,omitempty"`
	TargetCapacity     int       `json:"target_capacity,omitempty"`
	ScaleStep          ScaleStep `json:"scale_step,omitzero"`
	ScaleInDatapoints  int       `json:"scale_in_datapoints,omitempty"`
	MetricPeriod       Duration  `json:"metric_period,omitempty"`
	InstanceWarmup     Duration  `json:"instance_warmup,omitempty"`
	MinUtilization     int       `json:"min_utilization,omitempty"`
	MinUnutilizedNodes int       `json:"min_unutilized_nodes,omitempty"`
	ScaleDownDelay     Duration  `json:"scale_down_delay,omitempty"`
	ProtectFirstNode   bool      `json:"protect_first_node,omitempty"`
	BatchWindow        Duration  `json:"batch_window,omitempty"`
	Headroom           int       `json:"headroom,omitempty"`
	Prefer             string    `json:"prefer,omitempty"`
	ConsolidateAfter   Duration  `json:"consolidate_after,omitempty"`
	OrphanGrace        Duration  `json:"orphan_grace,omitempty"`
	// ExpendableBelow is the priority below which waiting work never
	// causes a scale-up (policy.Config.ExpendableBelow).
	ExpendableBelow *int `json:"expendable_below,omitempty"`
}

// ScaleStep bounds one target-tracking step.
type ScaleStep struct {
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
}

// DefaultReconcileInterval is the reconcile tick when the config sets none.
const DefaultReconcileInterval = 15 * time.Second

// Duration is a time.Duration written as "30s", "10m" or a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "30s" or a number of seconds; negative durations are errors.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v time.Duration
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		var err error
		if v, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("want a duration like 30s or 10m: %w", err)
		}
	} else {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("want a duration like 30s or a number of seconds, got %s", b)
		}
		if max := time.Duration(math.MaxInt64).Seconds(); f > max {
			return fmt.Errorf("must be at most %.0f seconds, got %s", max, b)
		}
		v = time.Duration(f * float64(time.Second))
	}
	if v < 0 {
		return fmt.Errorf("must not be negative, got %v", v)
	}
	*d = Duration(v)
	return nil
}

// PolicyConfig returns the policy configuration of the pool (not yet validated).
func (p *Pool) PolicyConfig() policy.Config {
	s := p.Scaling
	return policy.Config{
		Policy: s.Policy, Nodes: p.Nodes, Offerings: p.Offerings,
		Cooldown: time.Duration(s.Cooldown), IdleTimeout: time.Duration(s.IdleTimeout), SlotsPerNode: s.SlotsPerNode,
		TargetCapacity: s.TargetCapacity, MinStep: s.ScaleStep.Min, MaxStep: s.ScaleStep.Max,
		ScaleInDatapoints: s.ScaleInDatapoints, MetricPeriod: time.Duration(s.MetricPeriod),
		InstanceWarmup: time.Duration(s.InstanceWarmup),
		MinUtilization: s.MinUtilization, MinUnutilizedNodes: s.MinUnutilizedNodes,
		ScaleDownDelay: time.Duration(s.ScaleDownDelay), BatchWindow: time.Duration(s.BatchWindow), Headroom: s.Headroom, Prefer: s.Prefer,
		ProtectFirstNode: s.ProtectFirstNode, ConsolidateAfter: time.Duration(s.ConsolidateAfter),
		Limits: p.Limits.Limits, ExpendableBelow: s.ExpendableBelow,
	}
}

// ReconcileEvery returns the pool's reconcile tick interval.
func (p *Pool) ReconcileEvery() time.Duration {
	if p.Scaling.ReconcileInterval > 0 {
		return time.Duration(p.Scaling.ReconcileInterval)
	}
	return DefaultReconcileInterval
}

// EvaluateEvery returns how often the pool's autoscale loop evaluates
// its policy when no new report comes (replaying the last one): the
// cooldown or the reconcile interval, whichever is shorter, and 5 s when
// no cooldown is set.
func (p *Pool) EvaluateEvery() time.Duration {
	return cmp.Or(min(time.Duration(p.Scaling.Cooldown), p.ReconcileEvery()), 5*time.Second)
}

// Pool returns the pool with the given name.
func (f *File) Pool(name string) (*Pool, bool) {
	for i := range f.Pools {
		if f.Pools[i].Name == name {
			return &f.Pools[i], true
		}
	}
	return nil, false
}

// Load reads and validates the configuration file at path.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d MiB: not a tide configuration", path, maxFileSize>>20)
	}
	return Parse(path, data)
}

// maxFileSize bounds what Load reads, so that no file, however large, can
// exhaust memory.
const maxFileSize = 16 << 20

var poolName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Parse decodes and validates a configuration; name (usually the file path)
// prefixes every error. Errors are joined, so one run reports every problem.
func Parse(name string, data []byte) (*File, error) {
	if err := validate.Empty(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := validate.YAMLNumbers(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch t := bytes.TrimSpace(js); {
	case string(t) == "null":
		return nil, fmt.Errorf("%s: %w (no YAML content, only comments or blank lines)", name, validate.ErrEmpty)
	case len(t) > 0 && t[0] != '{':
		return nil, fmt.Errorf("%s: want a mapping with a pools: list at the top level", name)
	}
	var raw struct {
		Pools    []json.RawMessage `json:"pools"`
		Strategy Strategy          `json:"strategy"`
	}
	if err := strictjson.Decode(js, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(raw.Pools) == 0 {
		return nil, fmt.Errorf("%s: pools: at least one pool is needed", name)
	}
	f := &File{}
	var errs []error
	seen := map[string]bool{}
	for i, rp := range raw.Pools {
		where := fmt.Sprintf("%s: pools[%d]", name, i)
		p, err := decodePool(rp)
		if p.Name != "" {
			where = fmt.Sprintf("%s: pool %q", name, p.Name)
		}
		if err != nil {
			errs = append(errs, prefixEach(where, err))
			continue
		}
		if err := p.validate(); err != nil {
			errs = append(errs, prefixEach(where, err))
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s: name: duplicate pool name", where))
		}
		seen[p.Name] = true
		f.Pools = append(f.Pools, p)
	}
	if len(raw.Strategy) > 0 {
		f.Strategy = raw.Strategy
		for _, e := range validateStrategy(raw.Strategy, seen) {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

// decodePool decodes one pool; on error it still returns the pool's name
// when it can be read, so the error can name the pool.
func decodePool(data []byte) (Pool, error) {
	var p Pool
	if err := strictjson.Decode(data, &p); err != nil {
		var named struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(data, &named)
		return Pool{Name: named.Name}, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err == nil && keys["nodes"] == nil {
		return p, errors.New("nodes: must be set (a count, [min, max] or {min, desired, max})")
	}
	return p, nil
}

func (p *Pool) validate() error {
	var errs []error
	if !poolName.MatchString(p.Name) {
		errs = append(errs, fmt.Errorf("name: %q is not a DNS label (lowercase letters, digits and '-')", p.Name))
	}
	known := false
	for _, t := range ProviderTypes {
		known = known || t == p.Provider.Type
	}
	if !known {
		errs = append(errs, fmt.Errorf("provider.type: unknown provider %q (want one of %s)", p.Provider.Type, strings.Join(ProviderTypes, ", ")))
	}
	if p.Weight < 0 || p.Weight > 100 {
		errs = append(errs, fmt.Errorf("weight: must be within 0..100, got %d", p.Weight))
	}
	if p.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("max_queued: must not be negative, got %d", p.MaxQueued))
	}
	if p.MaxWait != 0 && time.Duration(p.MaxWait) < time.Second {
		errs = append(errs, fmt.Errorf("max_wait: must be 1s or more (or 0 for none), got %s", time.Duration(p.MaxWait)))
	}
	if _, _, _, err := p.LifecycleConfig(); err != nil {
		errs = append(errs, splitJoined(err)...)
	}
	pc := p.PolicyConfig()
	if err := pc.Validate(); err != nil {
		// policy.Config names its fields as the YAML does; nest them under scaling.
		for _, e := range splitJoined(err) {
			msg := e.Error()
			switch {
			case strings.HasPrefix(msg, "nodes:"), strings.HasPrefix(msg, "offerings["):
				// Already checked while decoding, with the field path.
			case strings.HasPrefix(msg, "offerings:"), strings.HasPrefix(msg, "limits."):
				errs = append(errs, e)
			default:
				errs = append(errs, fmt.Errorf("scaling.%w", e))
			}
		}
	}
	return errors.Join(errs...)
}

func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func prefixEach(where string, err error) error {
	parts := splitJoined(err)
	out := make([]error, len(parts))
	for i, e := range parts {
		out[i] = fmt.Errorf("%s: %w", where, e)
	}
	return errors.Join(out...)
}
