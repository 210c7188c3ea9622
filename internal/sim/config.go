package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
	cloudsim "github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/strictjson"
)

// Config is one simulation: the pool under test (a pool of tide's own
// configuration, whose provider options describe the simulated cloud), how
// the trace becomes instances, and the scheduler's knobs.
//
// The YAML form is tide's configuration file with exactly one pool, of
// provider type sim, plus two optional top-level sections:
//
//	pools:
//	  - name: gpu
//	    provider:
//	      type: sim
//	      options:                        # CloudOptions; every field optional
//	        boot: {min: 80s, median: 90s, max: 120s}   # or one duration: 90s
//	        configure: 5s
//	        drain: 5s
//	        delete: 30s
//	    nodes: [0, 400]
//	    offerings: [{type: g8, cpu: 96, memory: 768Gi, gpus: 8, price: 24.5}]
//	    scaling: {policy: tide, ...}
//	workload:                             # WorkloadOptions
//	  split_to_node: true
//	scheduler:                            # SchedulerOptions
//	  reserve_after: 60s
type Config struct {
	// Name is where the configuration came from (a path, or "default").
	Name string
	// Pool is the pool under test.
	Pool config.Pool
	// Cloud is the simulated cloud (the pool's provider options).
	Cloud CloudOptions
	// Workload says how the trace becomes instances.
	Workload WorkloadOptions
	// Scheduler tunes placement.
	Scheduler SchedulerOptions
}

// CloudOptions are the simulated cloud's behaviour, read from the pool's
// provider options. Every offering of the pool gets the same latencies.
type CloudOptions struct {
	// Boot is how long a machine takes from Create to Idle (billed).
	Boot Latency `json:"boot,omitzero"`
	// Configure is how long joining the cluster takes, from Configure to
	// Configured: the agent starting and registering.
	Configure Latency `json:"configure,omitzero"`
	// Drain is how long leaving the cluster takes.
	Drain Latency `json:"drain,omitzero"`
	// Delete is how long a machine is still billed after Delete.
	Delete Latency `json:"delete,omitzero"`
	// APIErrorRate is the probability that a provider call fails with a
	// transient error (the controller retries it).
	APIErrorRate float64 `json:"api_error_rate,omitempty"`
	// InterruptionNotice is how long before a spot reclaim the notice
	// comes (default 2m).
	InterruptionNotice config.Duration `json:"interruption_notice,omitempty"`
	// LaunchTimeout is how long the controller lets a machine take from
	// Create to joined before it replaces it (default 10m).
	LaunchTimeout config.Duration `json:"launch_timeout,omitempty"`
}

// DefaultBoot is the boot latency when the configuration gives none: a
// median of 90 s, never under 80 s, at most 120 s.
var DefaultBoot = Latency{Min: 80 * time.Second, Median: 90 * time.Second, Max: 120 * time.Second}

// Latency is a duration distribution of the simulated cloud (see
// provider/sim.Latency). In YAML it is one duration ("90s", always that) or
// {min, median, max}.
type Latency struct {
	Min, Median, Max time.Duration
}

// IsZero reports whether l is instant.
func (l Latency) IsZero() bool { return l == Latency{} }

// UnmarshalJSON reads "90s", a number of seconds, or {min, median, max}.
func (l *Latency) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var w struct {
			Min    config.Duration `json:"min"`
			Median config.Duration `json:"median"`
			Max    config.Duration `json:"max"`
		}
		if err := strictjson.Decode(b, &w); err != nil {
			return err
		}
		out := Latency{Min: time.Duration(w.Min), Median: time.Duration(w.Median), Max: time.Duration(w.Max)}
		if out.Median < out.Min || out.Max < out.Median {
			return fmt.Errorf("want min <= median <= max, got min %s, median %s, max %s", out.Min, out.Median, out.Max)
		}
		*l = out
		return nil
	}
	var d config.Duration
	if err := d.UnmarshalJSON(b); err != nil {
		return err
	}
	*l = Latency{Min: time.Duration(d), Median: time.Duration(d), Max: time.Duration(d)}
	return nil
}

// MarshalJSON writes a fixed latency as "90s" and others as {min, median, max}.
func (l Latency) MarshalJSON() ([]byte, error) {
	if l.Min == l.Median && l.Median == l.Max {
		return json.Marshal(l.Min.String())
	}
	return json.Marshal(map[string]string{"min": l.Min.String(), "median": l.Median.String(), "max": l.Max.String()})
}

// String formats l as "90s" or "80s..90s..120s".
func (l Latency) String() string {
	if l.Min == l.Median && l.Median == l.Max {
		return l.Min.String()
	}
	return l.Min.String() + ".." + l.Median.String() + ".." + l.Max.String()
}

func (l Latency) sim() cloudsim.Latency {
	return cloudsim.Latency{Min: l.Min, Median: l.Median, Max: l.Max}
}

// WorkloadOptions say how a trace becomes the instances of the replay.
type WorkloadOptions struct {
	// SplitToNode splits every job larger than the pool's largest node into
	// node-sized replicas (trace.Job.SplitTo): Philly's 16- to 128-GPU jobs
	// on 8-GPU nodes. The parts start independently (optimistic for a gang)
	// unless Gangs is set.
	SplitToNode bool `json:"split_to_node,omitempty"`
	// Gangs replays every job SplitToNode split as a gang: its parts are
	// placed all at once or not at all, as tide places a gang (issue 36).
	// Either way the report gives the split jobs' waits (to their last
	// part's start) and the GPU-hours parts held while others of their job
	// waited (Result.PartialGangGPUHours: 0 with gangs).
	Gangs bool `json:"gangs,omitempty"`
	// NormalizedMachine is what a normalized request of 1.0 stands for
	// (Google 2011 and Alibaba 2017 publish cpu_norm and mem_norm only).
	NormalizedMachine capacity.Resources `json:"normalized_machine,omitzero"`
	// Sample keeps this fraction of the jobs, chosen by a hash of the job
	// id (the same jobs for every seed and policy); 0 or 1 keeps all.
	Sample float64 `json:"sample,omitempty"`
	// Restartable is the fraction of the jobs whose instances may be
	// moved by consolidation (submitted with restartable set), chosen by a
	// hash of the job id independent of Sample's: the same jobs for every
	// seed and policy. 0, the default, moves nothing; 1 marks every job.
	Restartable float64 `json:"restartable,omitempty"`
	// Horizon is when jobs the trace saw running at its end (censored)
	// stop; zero means the latest end of any job.
	Horizon config.Duration `json:"horizon,omitempty"`
	// Replicas turns a rate or level series into instances.
	Replicas *ReplicaOptions `json:"replicas,omitempty"`
	// From and To replay a window of the trace (trace time, `tide simulate
	// --from/--to`): the jobs submitted in [From, To), plus those running
	// at From as the initial load, cut at To; times count from From. Zero
	// To means the trace's end.
	From config.Duration `json:"from,omitempty"`
	To   config.Duration `json:"to,omitempty"`
}

// ReplicaOptions turn a rate or level series into replicas (see
// trace.Replicas): each replica requests Shape and carries PerReplica
// (requests per second for a rate, units of the level for a level).
type ReplicaOptions struct {
	// PerReplica is what one replica serves: requests/s (rate series) or
	// units of the level (level series). Required.
	PerReplica float64 `json:"per_replica"`
	// Shape is what one replica requests. Required.
	Shape capacity.Resources `json:"shape"`
	// Min is the serving floor: never fewer replicas.
	Min int `json:"min,omitempty"`
	// Window sums a rate (or takes the maximum of a level) over windows of
	// this length before the replica count is computed, as a serving
	// autoscaler averaging its metric would; it must be a multiple of the
	// trace's bin width. Zero uses the trace's own bins.
	Window config.Duration `json:"window,omitempty"`
}

// SchedulerOptions tune the scheduler (scheduler.Config).
type SchedulerOptions struct {
	// ReserveAfter is how long the oldest waiting instance may wait before
	// a worker is reserved for it (the head's default, 60s); "0s" turns
	// reservations off.
	ReserveAfter *config.Duration `json:"reserve_after,omitempty"`
}

// reserveAfter returns the effective reservation delay.
func (s SchedulerOptions) reserveAfter() time.Duration {
	if s.ReserveAfter == nil {
		return 60 * time.Second
	}
	return time.Duration(*s.ReserveAfter)
}

// LoadConfig reads and validates a simulation configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

func readConfigFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading pool config: %w", err)
	}
	return data, nil
}

// ParseConfig decodes and validates a simulation configuration; name
// prefixes every error.
func ParseConfig(name string, data []byte) (*Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var raw struct {
		Pools     json.RawMessage  `json:"pools"`
		Workload  WorkloadOptions  `json:"workload"`
		Scheduler SchedulerOptions `json:"scheduler"`
	}
	if err := strictjson.Decode(js, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	poolsJSON, err := json.Marshal(map[string]json.RawMessage{"pools": raw.Pools})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := config.Parse(name, poolsJSON)
	if err != nil {
		return nil, err
	}
	if len(f.Pools) != 1 {
		return nil, fmt.Errorf("%s: pools: a simulation replays one pool, got %d (several pools: tide simulate --routing)", name, len(f.Pools))
	}
	c := &Config{Name: name, Pool: f.Pools[0], Workload: raw.Workload, Scheduler: raw.Scheduler}
	where := fmt.Sprintf("%s: pool %q", name, c.Pool.Name)
	if c.Pool.Provider.Type != "sim" {
		return nil, fmt.Errorf("%s: provider.type: a simulation needs provider type sim, got %q", where, c.Pool.Provider.Type)
	}
	if len(c.Pool.Provider.Options) > 0 {
		opts, err := json.Marshal(c.Pool.Provider.Options)
		if err != nil {
			return nil, fmt.Errorf("%s: provider.options: %w", where, err)
		}
		if err := strictjson.Decode(opts, &c.Cloud); err != nil {
			return nil, fmt.Errorf("%s: provider.options.%w", where, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// Validate fills defaults and checks what the pool configuration does not:
// the cloud options, the workload and the scheduler. Errors name the field.
func (c *Config) Validate() error {
	var errs []error
	if c.Cloud.Boot.IsZero() {
		c.Cloud.Boot = DefaultBoot
	}
	for _, l := range []struct {
		field string
		v     Latency
	}{{"boot", c.Cloud.Boot}, {"configure", c.Cloud.Configure}, {"drain", c.Cloud.Drain}, {"delete", c.Cloud.Delete}} {
		if l.v.Min < 0 || l.v.Median < l.v.Min || l.v.Max < l.v.Median {
			errs = append(errs, fmt.Errorf("provider.options.%s: want 0 <= min <= median <= max, got %s", l.field, l.v))
		}
	}
	if r := c.Cloud.APIErrorRate; !(r >= 0 && r < 1) {
		errs = append(errs, fmt.Errorf("provider.options.api_error_rate: must be within [0, 1), got %v", r))
	}
	if len(c.Pool.Offerings) == 0 {
		errs = append(errs, errors.New("offerings: a simulation needs at least one"))
	}
	seen := map[string]bool{}
	for i, o := range c.Pool.Offerings {
		if seen[o.Name()] {
			errs = append(errs, fmt.Errorf("offerings[%d]: offering %q listed twice", i, o.Name()))
		}
		seen[o.Name()] = true
	}
	w := &c.Workload
	if !(w.Sample >= 0 && w.Sample <= 1) {
		errs = append(errs, fmt.Errorf("workload.sample: must be within [0, 1], got %v", w.Sample))
	}
	if !(w.Restartable >= 0 && w.Restartable <= 1) {
		errs = append(errs, fmt.Errorf("workload.restartable: must be within [0, 1], got %v", w.Restartable))
	}
	if w.NormalizedMachine.Negative() {
		errs = append(errs, errors.New("workload.normalized_machine: must not be negative"))
	}
	if w.From < 0 {
		errs = append(errs, fmt.Errorf("workload.from: must not be negative, got %s", time.Duration(w.From)))
	}
	if w.To != 0 && w.To <= w.From {
		errs = append(errs, fmt.Errorf("workload.to: must be after from (%s), got %s", time.Duration(w.From), time.Duration(w.To)))
	}
	if r := w.Replicas; r != nil {
		if !(r.PerReplica > 0) {
			errs = append(errs, fmt.Errorf("workload.replicas.per_replica: must be positive, got %v", r.PerReplica))
		}
		if r.Shape.IsZero() || r.Shape.Negative() {
			errs = append(errs, errors.New("workload.replicas.shape: must request some cpu, memory or gpus"))
		}
		if r.Min < 0 {
			errs = append(errs, fmt.Errorf("workload.replicas.min: must not be negative, got %d", r.Min))
		}
	}
	return errors.Join(errs...)
}

// PolicyConfig returns the validated policy configuration of the pool with
// the named policy ("" keeps the pool's own).
func (c *Config) PolicyConfig(name string) (policy.Config, error) {
	pc := c.Pool.PolicyConfig()
	if name != "" {
		pc.Policy = name
	}
	if err := pc.Validate(); err != nil {
		return policy.Config{}, fmt.Errorf("pool %q: scaling: %w", c.Pool.Name, err)
	}
	return pc, nil
}

// largestNode returns the component-wise maximum of the offerings' node
// shapes: what SplitToNode splits to.
func (c *Config) largestNode() capacity.Resources {
	var out capacity.Resources
	for _, o := range c.Pool.Offerings {
		r := o.Resources
		out.MilliCPU = max(out.MilliCPU, r.MilliCPU)
		out.Memory = max(out.Memory, r.Memory)
		out.GPUs = max(out.GPUs, r.GPUs)
	}
	return out
}

// cloudConfig returns the simulated cloud's configuration.
func (c *Config) cloudConfig() cloudsim.Config {
	offs := make([]cloudsim.Offering, len(c.Pool.Offerings))
	for i, o := range c.Pool.Offerings {
		offs[i] = cloudsim.Offering{Offering: o, Boot: c.Cloud.Boot.sim(), Configure: c.Cloud.Configure.sim(),
			Drain: c.Cloud.Drain.sim(), Delete: c.Cloud.Delete.sim()}
	}
	return cloudsim.Config{Offerings: offs, APIErrorRate: c.Cloud.APIErrorRate,
		InterruptionNotice: time.Duration(c.Cloud.InterruptionNotice)}
}

// Describe returns the configuration as "key: value" lines for reports.
func (c *Config) Describe() []string {
	var out []string
	add := func(k, v string) { out = append(out, k+": "+v) }
	add("config", c.Name)
	add("pool", c.Pool.Name+" "+c.Pool.Nodes.String())
	for _, o := range c.Pool.Offerings {
		s := fmt.Sprintf("%s %s $%.4g/h", o.Name(), o.Resources, o.PricePerHour)
		if o.InterruptionProbability > 0 {
			s += fmt.Sprintf(" (interruptions %.3g/h, penalty $%.4g)", o.InterruptionProbability, o.InterruptionPenalty)
		}
		add("offering", s)
	}
	add("boot", c.Cloud.Boot.String())
	add("configure", c.Cloud.Configure.String())
	add("drain", c.Cloud.Drain.String())
	add("delete", c.Cloud.Delete.String())
	add("reconcile interval", c.Pool.ReconcileEvery().String())
	if pc, err := c.PolicyConfig(""); err == nil {
		add("scaling", fmt.Sprintf("cooldown %s, idle_timeout %s, batch_window %s, headroom %d, slots_per_node %d, target_capacity %d, scale_in_datapoints %d, min_utilization %d, scale_down_delay %s",
			pc.Cooldown, pc.IdleTimeout, pc.BatchWindow, pc.Headroom, pc.SlotsPerNode, pc.TargetCapacity, pc.ScaleInDatapoints, pc.MinUtilization, pc.ScaleDownDelay))
	}
	w := c.Workload
	var wl []string
	if w.SplitToNode {
		wl = append(wl, "split to node "+c.largestNode().String())
	}
	if !w.NormalizedMachine.IsZero() {
		wl = append(wl, "normalized machine "+w.NormalizedMachine.String())
	}
	if w.Sample > 0 && w.Sample < 1 {
		wl = append(wl, fmt.Sprintf("sample %.4g of the jobs", w.Sample))
	}
	if w.Restartable > 0 {
		wl = append(wl, fmt.Sprintf("restartable %.4g of the jobs", w.Restartable))
	}
	if w.Horizon > 0 {
		wl = append(wl, "horizon "+time.Duration(w.Horizon).String())
	}
	if w.From > 0 || w.To > 0 {
		wl = append(wl, "window "+windowString(time.Duration(w.From), time.Duration(w.To)))
	}
	if r := w.Replicas; r != nil {
		s := fmt.Sprintf("replicas of %s carrying %.4g each, min %d", r.Shape, r.PerReplica, r.Min)
		if r.Window > 0 {
			s += ", window " + time.Duration(r.Window).String()
		}
		wl = append(wl, s)
	}
	if len(wl) == 0 {
		wl = []string{"jobs as given"}
	}
	add("workload", strings.Join(wl, "; "))
	add("scheduler", "reserve_after "+c.Scheduler.reserveAfter().String())
	return slices.Clip(out)
}
