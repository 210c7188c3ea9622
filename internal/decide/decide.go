// Package decide evaluates one pool's policy on a snapshot, without side
// effects: the engine behind `tide decide`.
//
// A snapshot is JSON:
//
//	{
//	  "time": "2026-01-01T00:00:00Z",
//	  "desired": 4,
//	  "nodes": [{"id": "n0", "ordinal": 0, "resources": {"cpu": "4", "memory": "16Gi"},
//	             "running": [{"requests": {"cpu": "1"}, "daemon": false}],
//	             "marked_at": "...", "idle_since": "..."}],
//	  "pending": [{"requests": {"cpu": "1", "memory": "1Gi"}, "count": 12}],
//	  "state": { ...the "state" of a previous result... }
//	}
//
// The result carries the new desired count, the reason, the policy's own
// figures and the new state, so that calls can be chained by copying the
// result's state into the next snapshot.
package decide

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/lifecycle"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/routing"
	"github.com/tide-project/tide/internal/validate"
)

// Snapshot is the input of one decision.
type Snapshot struct {
	// Time is the time of the decision.
	Time time.Time `json:"time"`
	// Desired is the pool's current desired node count.
	Desired int `json:"desired"`
	// Nodes are the pool's nodes with what runs on them.
	Nodes []capacity.Node `json:"nodes"`
	// Pending are the instances waiting for capacity.
	Pending []capacity.Pending `json:"pending"`
	// Finished and FinishedRequests are the report's counters of finished
	// instances (capacity.Pressure.Finished; optional).
	Finished         int                `json:"finished,omitempty"`
	FinishedRequests capacity.Resources `json:"finished_requests,omitzero"`
	// State is the state returned by a previous decision (optional).
	State policy.State `json:"state"`
	// Controller is the reconciler's view (optional): with it, the result
	// also holds the actions one controller step takes after the policy.
	// When it is set and Nodes is not, the nodes are its joined machines.
	Controller *Controller `json:"controller,omitempty"`
	// Comment says what the snapshot shows (for walkthroughs).
	Comment string `json:"comment,omitempty"`
	// Expect is what the decision must be (checked by tide decide).
	Expect *Expect `json:"expect,omitempty"`
}

// Input is what one decision runs on: the pool's policy and reconciler
// configuration, its reconcile interval, and the snapshot.
type Input struct {
	// Pool is the pool's name (derived node ids are "<pool>-<ordinal>").
	Pool string
	// Policy is the pool's policy configuration (validated by Decide).
	Policy policy.Config
	// Reconcile is the pool's reconciler configuration, the one the live
	// pool runs (config.Pool.ReconcileConfig).
	Reconcile reconcile.Config
	// Interval is the pool's reconcile tick interval.
	Interval time.Duration
	// Lifecycle is the pool's repair, expiry and disruption budget
	// settings (config.Pool.LifecycleConfig): with it, a tick of the
	// controller view also decides which machines are replaced (repair,
	// drift, expiry) and says which wait.
	Lifecycle lifecycle.Config
	// Routes are every pool of the configuration, in file order, and
	// Strategy its capacity-provider strategy: with two pools or more, the
	// result says where the head would route each pending group
	// (internal/routing). Empty: no routing is shown.
	Routes   []routing.Pool
	Strategy routing.Strategy
}

// Route is where the head routes one pending group of the snapshot (as if
// it named no pool): which pools could serve it and at what cost, which
// one is chosen and why, and with a strategy how its instances split (no
// instance live before them).
type Route struct {
	Requests capacity.Resources `json:"requests"`
	Count    int                `json:"count"`
	// Pool is the chosen pool ("" when none fits), Why says why in words.
	Pool string `json:"pool"`
	Why  string `json:"why"`
	// Candidates are the pools that could serve, in preference order.
	Candidates []routing.Candidate `json:"candidates"`
	// Split is the strategy's split of the group by pool (nil without one).
	Split map[string]int `json:"split,omitempty"`
}

// Result is the output of one decision.
type Result struct {
	Pool     string    `json:"pool"`
	Policy   string    `json:"policy"`
	Time     time.Time `json:"time"`
	Previous int       `json:"previous"`
	Desired  int       `json:"desired"`
	Changed  bool      `json:"changed"`
	Code     string    `json:"reason_code"`
	Reason   string    `json:"reason"`
	// Figures and State are the policy's decision as it returned them.
	TargetTracking *policy.TargetTrackingFigures `json:"target_tracking,omitempty"`
	Utilization    *policy.UtilizationFigures    `json:"utilization,omitempty"`
	Tide           *policy.TideFigures           `json:"tide,omitempty"`
	// Launch is the purchase behind a raised count: the offerings the new
	// nodes would be launched from, with fallbacks.
	Launch []capacity.Launch `json:"launch,omitempty"`
	// Gangs says, for each gang waiting in the snapshot, whether this
	// decision buys for all of it at once or why it waits (gang.go).
	Gangs []GangPlan   `json:"gangs,omitempty"`
	State policy.State `json:"state"`
	// Controller is the controller step after the policy (with a
	// snapshot's controller view only).
	Controller *Plan `json:"controller,omitempty"`
	// Routing is where the head routes each pending group, with two pools
	// or more in the configuration (Input.Routes).
	Routing []Route `json:"routing,omitempty"`
}

// Parse decodes and validates a snapshot. Unknown fields, negative counts and
// malformed quantities are errors naming the field.
func Parse(data []byte) (Snapshot, error) {
	var s Snapshot
	if err := checkEmpty(data); err != nil {
		return s, err
	}
	if err := decodeSnapshot(data, &s); err != nil {
		return s, err
	}
	return s, s.Validate()
}

// Validate checks the snapshot's values; errors name the field. Counts may
// be as large as an int holds (the policies' arithmetic saturates), but no
// count is negative and no node or request is larger than any machine
// (validate.MaxCores, MaxMemoryMB, MaxGPUs).
func (s *Snapshot) Validate() error {
	var errs []error
	if s.Time.IsZero() {
		errs = append(errs, errors.New("snapshot: time: must be set (RFC 3339, e.g. 2026-01-01T00:00:00Z)"))
	}
	errs = append(errs, validate.NonNegative("snapshot: desired", s.Desired))
	ids := map[string]bool{}
	ordinals := map[int]bool{}
	for i, n := range s.Nodes {
		where := fmt.Sprintf("snapshot: nodes[%d]", i)
		if n.ID == "" {
			errs = append(errs, fmt.Errorf("%s.id: must be set", where))
		} else if ids[n.ID] {
			errs = append(errs, fmt.Errorf("%s.id: duplicate node id %q", where, n.ID))
		}
		ids[n.ID] = true
		if err := validate.NonNegative(where+".ordinal", n.Ordinal); err != nil {
			errs = append(errs, err)
		} else if n.Ordinal > validate.MaxNodes {
			errs = append(errs, fmt.Errorf("%s.ordinal: must be at most %d, got %d", where, validate.MaxNodes, n.Ordinal))
		} else if ordinals[n.Ordinal] {
			errs = append(errs, fmt.Errorf("%s.ordinal: duplicate ordinal %d", where, n.Ordinal))
		}
		ordinals[n.Ordinal] = true
		errs = append(errs, resources(where+".resources", n.Resources))
		for j, in := range n.Running {
			errs = append(errs, resources(fmt.Sprintf("%s.running[%d].requests", where, j), in.Requests))
		}
		if !fits(n) {
			errs = append(errs, fmt.Errorf("%s.running: requests %v exceed the node's resources %v", where, n.Allocated(), n.Resources))
		}
	}
	for i, p := range s.Pending {
		errs = append(errs, validate.NonNegative(fmt.Sprintf("snapshot: pending[%d].count", i), p.Count),
			resources(fmt.Sprintf("snapshot: pending[%d].requests", i), p.Requests))
		if p.Requests.IsZero() {
			errs = append(errs, fmt.Errorf("snapshot: pending[%d].requests: must request some resource", i))
		}
	}
	errs = append(errs, validate.NonNegative("snapshot: finished", s.Finished))
	if s.FinishedRequests.Negative() { // a sum over time: no bound per machine
		errs = append(errs, errors.New("snapshot: finished_requests: must not be negative"))
	}
	errs = append(errs, validate.NonNegative("snapshot: state.low_datapoints", s.State.LowDatapoints))
	if s.Controller != nil {
		errs = append(errs, s.Controller.validate("snapshot: controller")...)
	}
	return errors.Join(errs...)
}

// resources refuses negative amounts and amounts no machine has.
func resources(field string, r capacity.Resources) error {
	if r.Negative() {
		return fmt.Errorf("%s: must not be negative", field)
	}
	var errs []error
	if r.MilliCPU > validate.MaxCores*1000 {
		errs = append(errs, fmt.Errorf("%s.cpu: must be at most %d cores, got %s", field, validate.MaxCores, capacity.FormatCPU(r.MilliCPU)))
	}
	if r.Memory > validate.MaxMemoryMB<<20 {
		errs = append(errs, fmt.Errorf("%s.memory: must be at most %d MB, got %s", field, int64(validate.MaxMemoryMB), capacity.FormatBytes(r.Memory)))
	}
	errs = append(errs, validate.Between(field+".gpus", r.GPUs, 0, validate.MaxGPUs))
	for _, k := range r.ExtendedNames() {
		errs = append(errs, validate.Between(field+".extended."+k, r.Extended[k], 0, validate.MaxGPUs))
	}
	return errors.Join(errs...)
}

// fits reports whether the node's instances fit its resources, summing with
// saturation so that many large requests cannot wrap into a small one.
func fits(n capacity.Node) bool {
	var cpu, mem, gpus int64
	ext := map[string]int64{}
	for _, in := range n.Running {
		r := in.Requests
		cpu, mem, gpus = validate.Add64(cpu, r.MilliCPU), validate.Add64(mem, r.Memory), validate.Add64(gpus, r.GPUs)
		for k, v := range r.Extended {
			ext[k] = validate.Add64(ext[k], v)
		}
	}
	if cpu > n.Resources.MilliCPU || mem > n.Resources.Memory || gpus > n.Resources.GPUs {
		return false
	}
	for k, v := range ext {
		if v > n.Resources.Extended[k] {
			return false
		}
	}
	return true
}

// nodes returns the scheduler's nodes: the snapshot's, or else the joined
// machines of its controller view (resources default to the first offering's).
func (s *Snapshot) nodes(pool string, offs []capacity.Offering) []capacity.Node {
	if s.Nodes != nil || s.Controller == nil {
		return s.Nodes
	}
	var res capacity.Resources
	if len(offs) > 0 {
		res = offs[0].Resources
	}
	nodes := []capacity.Node{}
	for _, m := range s.Controller.Machines {
		switch m.State {
		case MachineProvisioning, MachineLost:
			continue
		}
		n := capacity.Node{ID: pool + "-" + strconv.Itoa(m.Ordinal), Ordinal: m.Ordinal, Resources: m.Resources,
			Running: m.Running, MarkedAt: m.MarkedAt}
		if n.Resources.IsZero() {
			n.Resources = res
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// Run evaluates the policy of cfg (validating cfg) on the snapshot, with the
// reconciler configuration the policy config implies (no first-node
// protection, immediate drains) and a 15 s tick.
func Run(pool string, cfg policy.Config, s Snapshot) (Result, error) {
	return Decide(Input{Pool: pool, Policy: cfg, Reconcile: reconcile.Config{Nodes: cfg.Nodes}, Interval: 15 * time.Second}, s)
}

// Decide evaluates the pool's policy on the snapshot and, when the snapshot
// carries a controller view, one step of the live reconciler after it.
func Decide(in Input, s Snapshot) (Result, error) {
	p, err := policy.New(in.Policy)
	if err != nil {
		return Result{}, err
	}
	if in.Interval <= 0 {
		return Result{}, fmt.Errorf("reconcile_interval: must be positive, got %s", in.Interval)
	}
	d := p.Decide(policy.Input{
		Now:     s.Time,
		Desired: s.Desired,
		Pressure: capacity.Pressure{Nodes: s.nodes(in.Pool, in.Policy.Offerings), Pending: s.Pending,
			Finished: s.Finished, FinishedRequests: s.FinishedRequests},
		State: s.State,
	})
	res := Result{
		Pool: in.Pool, Policy: p.Name(), Time: s.Time,
		Previous: s.Desired, Desired: d.Desired, Changed: d.Desired != s.Desired,
		Code: d.Reason.Code, Reason: d.Reason.String(),
		TargetTracking: d.TargetTracking, Utilization: d.Utilization, Tide: d.Tide, Launch: d.Launch,
		State: d.State,
	}
	res.Gangs = gangPlans(in.Policy, policy.Input{Now: s.Time, Desired: s.Desired,
		Pressure: capacity.Pressure{Nodes: s.nodes(in.Pool, in.Policy.Offerings), Pending: s.Pending}}, d, s.Desired)
	if s.Controller != nil {
		pl, err := plan(in, &s, d)
		if err != nil {
			return Result{}, err
		}
		res.Controller = pl
	}
	if len(in.Routes) > 1 {
		res.Routing = routes(in, s.Pending)
	}
	return res, nil
}

// routes is where the head routes each pending group (Result.Routing).
func routes(in Input, pending []capacity.Pending) []Route {
	var out []Route
	for _, g := range pending {
		if g.Count <= 0 {
			continue
		}
		d := routing.Route(in.Routes, nil, nil, g.Requests)
		r := Route{Requests: g.Requests, Count: g.Count, Pool: d.Pool, Why: d.String(), Candidates: d.Cands}
		if len(in.Strategy) > 0 && d.Pool != "" {
			n := min(g.Count, maxSplit)
			ds := routing.Split(in.Strategy, d, nil, n)
			if ds[0].Strategy != "" {
				r.Split = map[string]int{}
				for _, x := range ds {
					r.Split[x.Pool]++
				}
				r.Pool, r.Why = ds[0].Pool, ds[0].String()
			}
		}
		if r.Candidates == nil {
			r.Candidates = []routing.Candidate{}
		}
		out = append(out, r)
	}
	return out
}

// maxSplit bounds the instances of one group split by a strategy in a
// decide (a snapshot may claim a huge count).
const maxSplit = 100000
