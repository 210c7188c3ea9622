package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/lifecycle"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// The Config defaults.
const (
	// DefaultReconcileInterval is seed 000's reconcile_tick_interval.
	DefaultReconcileInterval = 15 * time.Second
	// DefaultLaunchTimeout bounds Create → Configured (and a rejoin, and an
	// unbinding drain).
	DefaultLaunchTimeout = 10 * time.Minute
	// DefaultCapacityBackoff is how long an offering that ran out of
	// capacity is skipped (the ICE cache's TTL, 3 minutes as in Karpenter).
	DefaultCapacityBackoff = 3 * time.Minute
	// DefaultMaxRetries bounds the consecutive failed attempts of one
	// machine's Create or Configure before the machine is given up.
	DefaultMaxRetries = 5
	// DefaultCallTimeout bounds one provider call.
	DefaultCallTimeout = time.Minute
	// DefaultCluster is the cluster name Configure binds machines to.
	DefaultCluster = "tide"
	// DefaultOrphanGrace is how long a machine of the pool that no journal
	// knows is left alone before it is deleted: longer than a few reconcile
	// ticks, a leader handover and the lag of a cloud's eventually
	// consistent reads (EC2 tags), short enough that a stray instance is
	// not paid for long.
	DefaultOrphanGrace = 2 * time.Minute
	// DefaultRegistrationTimeout bounds Configured → registered (the
	// machine's agent registered with its cluster) when the Workload is an
	// Inspector that requires registration.
	DefaultRegistrationTimeout = 10 * time.Minute
	// DefaultTimeoutsBeforeBackoff is how many launch or registration
	// timeouts in a row of one offering make it skipped for
	// CapacityBackoff, as an insufficient-capacity answer does.
	DefaultTimeoutsBeforeBackoff = 2
)

// MaxPoolNameLen bounds Config.Pool so that every machine id
// "<pool>-<ordinal>-<serial>" fits the providers' 63-character limit.
const MaxPoolNameLen = 32

// maxOrdinal bounds the node ordinals (reconcile.Config's Nodes.Max) for the
// same reason: 7 digits.
const maxOrdinal = 9_999_999

// Config configures the controller of one pool. Zero durations and
// MaxRetries take their defaults.
type Config struct {
	// Pool names the pool: 1 to 32 characters from [A-Za-z0-9._-],
	// starting with a letter or digit. Machine ids start with it.
	Pool string
	// Reconcile configures the pool's reconciler (bounds, protected first
	// node, scale-down delay).
	Reconcile reconcile.Config
	// Offerings are what the pool may launch. Each machine is created from
	// the offering its Provision's launch names (the policy's purchase), or
	// from a fallback of that launch (offerings that host the same load,
	// cheapest first) while the offering is being skipped after an
	// insufficient-capacity, quota or invalid answer; a provision without a
	// launch takes the one of lowest EffectiveCost not being skipped.
	Offerings []capacity.Offering
	// Cluster is the cluster name Configure binds machines to (default
	// "tide").
	Cluster string
	// Bootstrap is the opaque blob Configure hands to every machine (for a
	// tide worker, an encoded provider.Bootstrap). Required.
	Bootstrap []byte
	// ControllerID identifies this controller in provider fences. Required.
	ControllerID string
	// ReconcileInterval is the period of Run's reconcile tick.
	ReconcileInterval time.Duration
	// LaunchTimeout is how long a machine may take from Create to
	// Configured (and an Idle joined machine to rejoin, and a drained one to
	// leave its cluster) before it is deleted and replaced.
	LaunchTimeout time.Duration
	// RegistrationTimeout is how long a machine the provider reports
	// Configured may take for its agent to register (a worker with the
	// head, a Ready Node) before it is deleted and replaced; applies only
	// when RequireRegistration is set and the Workload is an Inspector.
	RegistrationTimeout time.Duration
	// RequireRegistration makes a node join only once the Workload (an
	// Inspector) reports its agent registered, not as soon as the provider
	// reports its machine Configured: a process that runs, or a cloud
	// instance that is tagged, has not joined until its worker did.
	// Providers whose machines run no agent (sim) leave it off.
	RequireRegistration bool
	// TimeoutsBeforeBackoff is how many launch or registration timeouts in
	// a row of one offering skip it for CapacityBackoff (0: the default, 2).
	TimeoutsBeforeBackoff int
	// Lifecycle is the pool's repair, expiry and disruption budget
	// settings (internal/lifecycle); repair and health need an Inspector.
	Lifecycle lifecycle.Config
	// NodeHash is, per offering name, the hash of the pool settings that
	// shape a node of that offering (config.Pool.NodeHashes). Each machine
	// is created with its hash as the label HashLabel; a node whose label
	// differs from its offering's hash, or whose offering is no longer
	// offered, has drifted and is replaced under the disruption budget.
	// Empty: no drift detection. A machine without the label (made before
	// hashes were recorded) never counts as drifted.
	NodeHash map[string]string
	// CapacityBackoff is how long an offering is skipped after it answered
	// InsufficientCapacity, an offering quota or Invalid.
	CapacityBackoff time.Duration
	// MaxRetries is how many consecutive failed attempts of one machine's
	// Create or Configure are retried (one per tick) before the machine is
	// reported lost and replaced. Deletes are retried forever.
	MaxRetries int
	// OrphanGrace is how long a machine of the pool that no journal knows
	// (an orphan: launched by a controller that lost its journal, or not
	// yet journaled where this controller can read) is left alone, from the
	// first List that shows it, before it is deleted; an event says when
	// it is seen and when it is deleted. Zero means DefaultOrphanGrace; a
	// negative value deletes at first sight.
	OrphanGrace time.Duration
	// CallTimeout bounds each provider call (DefaultCallTimeout when zero):
	// a call without an answer by then is abandoned and counts as a
	// transient error that may have taken effect, so a hung provider API
	// cannot stall the pool's reconciling.
	CallTimeout time.Duration
	// CreateConcurrency is how many provider Creates one Provision keeps
	// in flight at once (0 or 1: one after another). Every record is
	// journaled before its Create either way (in one write when the
	// journal is a BatchJournal), so a crash or failover mid-burst still
	// never creates a machine twice.
	CreateConcurrency int
}

// withDefaults returns c with zero fields set to their defaults and its
// slices copied.
func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.LaunchTimeout == 0 {
		c.LaunchTimeout = DefaultLaunchTimeout
	}
	if c.CapacityBackoff == 0 {
		c.CapacityBackoff = DefaultCapacityBackoff
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.RegistrationTimeout == 0 {
		c.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if c.TimeoutsBeforeBackoff == 0 {
		c.TimeoutsBeforeBackoff = DefaultTimeoutsBeforeBackoff
	}
	c.NodeHash = maps.Clone(c.NodeHash)
	if c.Lifecycle.Offerings == nil {
		c.Lifecycle.Offerings = c.Offerings
	}
	c.Offerings = slices.Clone(c.Offerings)
	c.Bootstrap = slices.Clone(c.Bootstrap)
	return c
}

// Validate checks the config; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if err := validPool(c.Pool); err != nil {
		errs = append(errs, err)
	}
	if err := c.Reconcile.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("reconcile: %w", err))
	}
	if c.Reconcile.Nodes.Max > maxOrdinal {
		errs = append(errs, fmt.Errorf("reconcile: nodes: max: at most %d nodes per pool, got %d", maxOrdinal, c.Reconcile.Nodes.Max))
	}
	if len(c.Offerings) == 0 {
		errs = append(errs, errors.New("offerings: at least one is needed"))
	}
	seen := map[string]bool{}
	for i, o := range c.Offerings {
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("offerings[%d]: %w", i, err))
		}
		if seen[o.Name()] {
			errs = append(errs, fmt.Errorf("offerings[%d]: offering %q listed twice", i, o.Name()))
		}
		seen[o.Name()] = true
	}
	if len(c.Bootstrap) == 0 {
		errs = append(errs, errors.New("bootstrap: must not be empty"))
	} else if len(c.Bootstrap) > provider.MaxBootstrapSize {
		errs = append(errs, fmt.Errorf("bootstrap: %d bytes, at most %d allowed", len(c.Bootstrap), provider.MaxBootstrapSize))
	}
	if c.ControllerID == "" {
		errs = append(errs, errors.New("controller_id: must be set"))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"reconcile_interval", c.ReconcileInterval}, {"launch_timeout", c.LaunchTimeout},
		{"capacity_backoff", c.CapacityBackoff}, {"call_timeout", c.CallTimeout},
		{"registration_timeout", c.RegistrationTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", d.field, d.v))
		}
	}
	if err := c.Lifecycle.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.TimeoutsBeforeBackoff < 0 {
		errs = append(errs, fmt.Errorf("timeouts_before_backoff: must not be negative, got %d", c.TimeoutsBeforeBackoff))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("max_retries: must not be negative, got %d", c.MaxRetries))
	}
	return errors.Join(errs...)
}

// validPool checks a pool name: see Config.Pool.
func validPool(s string) error {
	if s == "" {
		return errors.New("pool: must be set")
	}
	if len(s) > MaxPoolNameLen {
		return fmt.Errorf("pool: %q has %d characters, at most %d allowed", s, len(s), MaxPoolNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("-_.", rune(c))) {
			return fmt.Errorf("pool: %q: use letters, digits, '-', '_' and '.', starting with a letter or digit", s)
		}
	}
	return nil
}

// Deps are the controller's collaborators. Provider, Journal and Workload
// are required; the others have defaults.
type Deps struct {
	// Provider is where the pool's machines come from. When Metrics is set
	// the controller wraps it with provider.Instrument.
	Provider provider.Provider
	// Journal persists what the controller must remember across a crash.
	Journal Journal
	// Workload is the scheduler side: dispatch on/off and "is this node
	// running work". Use IdleWorkload for a pool that runs nothing.
	Workload Workload
	// Clock is the time source (default the wall clock).
	Clock clock.Clock
	// Logger receives every Event as a log line (default: discarded).
	Logger *slog.Logger
	// Metrics is the registry for the pool gauges, the event counter and
	// the provider call metrics (nil: no metrics).
	Metrics prometheus.Registerer
	// Events receives every Event (nil: events are only logged and counted).
	Events EventSink
}

func (d *Deps) validate() error {
	var errs []error
	if d.Provider == nil {
		errs = append(errs, errors.New("deps: provider: must be set"))
	}
	if d.Journal == nil {
		errs = append(errs, errors.New("deps: journal: must be set"))
	}
	if d.Workload == nil {
		errs = append(errs, errors.New("deps: workload: must be set (use IdleWorkload for a pool that runs nothing)"))
	}
	return errors.Join(errs...)
}
