// Package policy turns a pool's pressure into a desired node count.
//
// A policy is pure: Decide reads its Input (the pressure report, the current
// desired count, the state the previous call returned, and the time as an
// argument) and returns a Decision with a human-readable Reason and the new
// State. It performs no I/O, reads no clock and keeps no hidden state, so the
// same code runs in `tide up`, in `tide decide` and in the simulator.
//
// Six policies are built in (see New): skyward (seed 000's decision tree),
// target-tracking (seed 002, ECS cluster auto scaling), utilization (seed 001,
// the GPU NodeProvisioner), tide (the default), and two peers modelled on
// the documented defaults of the autoscalers users pick instead: karpenter
// and cluster-autoscaler.
package policy

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Policy names accepted by New.
const (
	Skyward        = "skyward"
	TargetTracking = "target-tracking"
	Utilization    = "utilization"
	Tide           = "tide"
	// Karpenter and ClusterAutoscaler are the peers (karpenter.go,
	// clusterautoscaler.go).
	Karpenter         = "karpenter"
	ClusterAutoscaler = "cluster-autoscaler"
)

// Names lists the built-in policies in the order tools show them.
var Names = []string{Tide, Skyward, TargetTracking, Utilization, Karpenter, ClusterAutoscaler}

// Policy decides a pool's desired node count. Implementations are pure and
// safe for concurrent use: all state travels in Input.State and Decision.State.
type Policy interface {
	// Name returns the policy's name as accepted by New.
	Name() string
	// Decide evaluates the policy once. It never returns a desired count
	// outside [Config.Nodes.Min, Config.Nodes.Max].
	Decide(in Input) Decision
}

// Input is everything a policy may look at.
type Input struct {
	// Now is the time of the evaluation.
	Now time.Time
	// Desired is the pool's current desired node count.
	Desired int
	// Pressure is the scheduler's latest report for the pool.
	Pressure capacity.Pressure
	// State is the State returned by the previous Decide (zero on the first call).
	State State
	// Unavailable names the offerings that are out of capacity now (the
	// controller's ICE cache): a purchase does not count on them.
	Unavailable []string
	// Held is what the pool's machines add up to (the controller's, for
	// Config.Limits); nil: estimated from the report's nodes.
	Held *Held
	// Booting names the offering (capacity.Offering.Name) of each machine
	// launched for the pool that has not joined yet (the controller's: the
	// nodes a policy bought that are still booting, and replacements); the
	// policy reads what each provides from its own Config.Offerings, so
	// that what a driver adds to them (Kubernetes mode's placement slots)
	// counts. Nil: not known; the tide policy then assumes that the nodes
	// asked for and not joined can host what they were asked for.
	Booting []string
}

// Decision is a policy's answer.
type Decision struct {
	// Desired is the new desired node count.
	Desired int `json:"desired"`
	// Reason says in words why Desired is what it is (also when unchanged).
	Reason Reason `json:"reason"`
	// TargetTracking holds the target-tracking policy's figures (nil for others).
	TargetTracking *TargetTrackingFigures `json:"target_tracking,omitempty"`
	// Utilization holds the utilization policy's figures (nil for others).
	Utilization *UtilizationFigures `json:"utilization,omitempty"`
	// Tide holds the tide policy's figures (nil for others).
	Tide *TideFigures `json:"tide,omitempty"`
	// Launch is the purchase behind a raised Desired: which offerings the
	// new nodes should be, with fallbacks (nil: the controller's default,
	// the cheapest offering).
	Launch []capacity.Launch `json:"launch,omitempty"`
	// Backlog, when set, is the part of the pending work the decision
	// bought for (Backlog): work of a priority below expendable_below and
	// gangs that do not fit the pool's max are left out. Nil: all of it.
	Backlog []capacity.Pending `json:"-"`
	// State is to be passed as Input.State on the next call.
	State State `json:"state"`
	// Recheck, when set, is the time at which the same input may decide
	// differently (the end of tide's batching window): a driver should
	// evaluate again then rather than wait for its next tick.
	Recheck time.Time `json:"recheck,omitzero"`
}

// State is what a policy carries from one call to the next. Each policy uses
// only its own fields; the zero value is a fresh start.
type State struct {
	// LastScale is when the policy last changed the desired count (cooldown).
	LastScale time.Time `json:"last_scale,omitzero"`
	// LastBusy is when the pool last had queued or running work (idle timeout).
	LastBusy time.Time `json:"last_busy,omitzero"`
	// LastDatapoint is when target-tracking last recorded a metric datapoint.
	LastDatapoint time.Time `json:"last_datapoint,omitzero"`
	// LowDatapoints counts consecutive datapoints below the target.
	LowDatapoints int `json:"low_datapoints,omitempty"`
	// PendingSince is when the tide policy first saw the current backlog.
	PendingSince time.Time `json:"pending_since,omitzero"`
	// BatchGrewAt is when the karpenter policy last saw its backlog grow
	// (the batch's idle window runs from it), and BatchQueued the backlog
	// it saw last.
	BatchGrewAt time.Time `json:"batch_grew_at,omitzero"`
	BatchQueued int       `json:"batch_queued,omitempty"`
	// LastLoop is when a peer policy last ran its periodic loop
	// (cluster-autoscaler's scan, karpenter's provisioning requeue and
	// disruption poll).
	LastLoop time.Time `json:"last_loop,omitzero"`
	// LastScaleUp is when the cluster-autoscaler policy last scaled up.
	LastScaleUp time.Time `json:"last_scale_up,omitzero"`
	// Turnover is what the tide policy learned of the pool's completions
	// and boots.
	Turnover Turnover `json:"turnover,omitzero"`
}

// Reason explains a decision without allocating: a stable Code for metrics
// and tests, and a constant Format with up to four integer arguments that
// String renders.
type Reason struct {
	Code   string
	Format string
	Args   [4]int64
	NArgs  int
}

// Reason codes shared by the policies. Policies may add their own.
const (
	CodeScaleUp   = "scale-up"
	CodeScaleDown = "scale-down"
	CodeSteady    = "steady"
	CodeCooldown  = "cooldown"
	CodeAtMax     = "at-max"
	CodeAtMin     = "at-min"
	CodeIdle      = "idle"
)

// NewReason builds a Reason; it panics on more than four arguments.
func NewReason(code, format string, args ...int64) Reason {
	r := Reason{Code: code, Format: format, NArgs: len(args)}
	copy(r.Args[:], args)
	if len(args) > len(r.Args) {
		panic("policy.NewReason: more than four arguments")
	}
	return r
}

// String renders the reason in words.
func (r Reason) String() string {
	if r.Format == "" {
		return r.Code
	}
	args := make([]any, r.NArgs)
	for i := range args {
		args[i] = r.Args[i]
	}
	return singular(fmt.Sprintf(r.Format, args...))
}

// oneOfMany matches a count of one with a plural noun ("1 nodes", "1
// queued instances need"); formats are written for the plural.
var oneOfMany = regexp.MustCompile(`(^|[^0-9.])1 ((?:queued |pending |new )?(?:node|instance|worker|datapoint|GPU))s\b( need\b)?`)

// singular fixes the number of the nouns (and of "need") that follow a
// count of one: "1 queued instance needs 1 node", not "1 queued instances
// need 1 nodes".
func singular(s string) string {
	if !strings.Contains(s, "1 ") {
		return s
	}
	return oneOfMany.ReplaceAllStringFunc(s, func(m string) string {
		sm := oneOfMany.FindStringSubmatch(m)
		out := sm[1] + "1 " + sm[2]
		if sm[3] != "" {
			out += " needs"
		}
		return out
	})
}

// MarshalText renders the reason as its code and words, e.g. "scale-up: 12 queued ...".
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.Code + ": " + r.String()), nil }

// TargetTrackingFigures are the ECS figures behind a target-tracking decision.
type TargetTrackingFigures struct {
	// M is the number of nodes the pool needs (seed 002).
	M int `json:"m"`
	// N is the number of nodes the pool has.
	N int `json:"n"`
	// Reservation is CapacityProviderReservation = M/N×100 (100 for 0/0, 200 for M>0, N=0).
	Reservation float64 `json:"capacity_provider_reservation"`
	// Target is the target capacity the metric is tracked to.
	Target int `json:"target_capacity"`
	// LowDatapoints is the number of consecutive datapoints below target.
	LowDatapoints int `json:"low_datapoints"`
	// Method says how M was computed: "no-provisioning", "single-type",
	// "multi-type" or "min-step-fallback".
	Method string `json:"method"`
	// Warming counts the nodes held out of M and N by the instance
	// warm-up (Config.InstanceWarmup).
	Warming int `json:"warming,omitempty"`
}

// UtilizationFigures are the NodeProvisioner figures behind a utilization decision.
type UtilizationFigures struct {
	// Utilization is the pool's GPU utilization in percent.
	Utilization float64 `json:"utilization_percent"`
	// Target is the target size computed by the evaluate stage.
	Target int `json:"target"`
	// Mark, Unmark and Delete are the node ids the reconcile stage acts on
	// (at most one of them is non-empty: one action per loop).
	Mark   []string `json:"mark"`
	Unmark []string `json:"unmark"`
	Delete []string `json:"delete"`
}

// TideFigures are the tide policy's figures: the cheapest mix of offerings
// that packs the backlog.
type TideFigures struct {
	// Mix is the number of new nodes per offering name.
	Mix []OfferingCount `json:"mix,omitempty"`
	// Cost is the effective cost per hour of Mix.
	Cost float64 `json:"cost_per_hour"`
	// Nodes is the number of new nodes in Mix.
	Nodes int `json:"nodes,omitempty"`
	// Bound is a proven lower bound on the effective cost per hour of any
	// purchase for the same backlog, and Gap = (Cost − Bound) / Bound, the
	// most Mix can cost above the cheapest purchase (valid when HasBound).
	Bound    float64 `json:"bound_per_hour,omitempty"`
	Gap      float64 `json:"gap,omitempty"`
	HasBound bool    `json:"has_bound,omitempty"`
	// Method is how Mix was found: "optimized" (column generation) or
	// "packed" (first fit decreasing was as cheap).
	Method string `json:"method,omitempty"`
	// Idle lists the nodes empty for longer than the idle timeout.
	Idle []string `json:"idle,omitempty"`
	// Finishing is how many running instances the purchase counted on to
	// finish before a new node could join (Turnover, Config.Prefer); their
	// room held that much of the backlog.
	Finishing int `json:"finishing,omitempty"`
	// FleetShaped is set when Mix keeps to the offerings of the cheapest
	// fleet for all the pool's work, running and waiting (a pool of several
	// offerings), at most 25 % dearer than the cheapest purchase for the
	// backlog alone.
	FleetShaped bool `json:"fleet_shaped,omitempty"`
}

// OfferingCount is a number of nodes of one offering.
type OfferingCount struct {
	Offering string `json:"offering"`
	Count    int    `json:"count"`
}

// Purchase says what the tide policy buys and how far from the cheapest
// purchase it may be, e.g. "buys 12 x g4/on-demand for $57.40/h, within
// 0.0 % of the bound"; "" when it buys nothing.
func (f *TideFigures) Purchase() string {
	if f == nil || len(f.Mix) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("buys ")
	for i, m := range f.Mix {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%d x %s", m.Count, m.Offering)
	}
	fmt.Fprintf(&b, " for $%.2f/h", f.Cost)
	if f.HasBound {
		fmt.Fprintf(&b, ", within %.1f %% of the bound ($%.2f/h)", 100*f.Gap, f.Bound)
	}
	return b.String()
}
