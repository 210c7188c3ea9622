package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// latencySigma is the spread of Latency's log-normal shape: with 0.5 about
// 5 % of samples exceed 2.3 × the median's excess over Min.
const latencySigma = 0.5

// Latency is a distribution of durations with a floor, a median and a cap:
// Min plus a log-normal excess whose median is Median-Min, clamped to Max.
// Cloud boot times look like this: never faster than some floor, usually near
// a typical value, with a long but bounded tail. The zero Latency is instant.
type Latency struct {
	Min    time.Duration
	Median time.Duration
	Max    time.Duration
}

// Fixed returns a Latency that is always d.
func Fixed(d time.Duration) Latency { return Latency{Min: d, Median: d, Max: d} }

// Sample draws one duration from r.
func (l Latency) Sample(r *rand.Rand) time.Duration {
	if l.Max <= l.Min || l.Median <= l.Min {
		return l.Min
	}
	excess := float64(l.Median-l.Min) * math.Exp(latencySigma*r.NormFloat64())
	if d := l.Min + time.Duration(excess); d < l.Max {
		return d
	}
	return l.Max
}

func (l Latency) validate(field string) error {
	if l.Min < 0 || l.Median < l.Min || l.Max < l.Median {
		return fmt.Errorf("%s: want 0 <= min <= median <= max, got min %s, median %s, max %s", field, l.Min, l.Median, l.Max)
	}
	return nil
}

// Offering is one thing the simulated cloud sells, with its behaviour.
type Offering struct {
	capacity.Offering
	// Boot is how long Creating lasts before the machine is Idle.
	Boot Latency
	// Configure is how long Configuring lasts before the machine is Configured.
	Configure Latency
	// Drain is how long Draining lasts before the machine is Idle again.
	Drain Latency
	// Delete is how long Deleting lasts before the machine is gone.
	Delete Latency
	// Quota is the account's limit on machines of this offering (every
	// state until gone); 0 means no limit. Reaching it makes Create fail
	// with a QuotaExceededError.
	Quota int
	// Stock is how many machines of this offering the cloud can supply at
	// once; 0 means no limit. Reaching it makes Create fail with an
	// InsufficientCapacityError: ask for 5 with a stock of 2, get 2.
	Stock int
	// OutOfCapacity makes every Create of this offering fail with an
	// InsufficientCapacityError, whatever Stock says.
	OutOfCapacity bool
	// HangRate is the probability that a boot never finishes; such a
	// machine goes Failed at Config.BootTimeout.
	HangRate float64
}

func (o *Offering) validate() error {
	name := o.Name()
	errs := []error{
		o.Offering.Validate(),
		o.Boot.validate("boot"),
		o.Configure.validate("configure"),
		o.Drain.validate("drain"),
		o.Delete.validate("delete"),
	}
	if o.Quota < 0 {
		errs = append(errs, fmt.Errorf("quota: must not be negative, got %d", o.Quota))
	}
	if o.Stock < 0 {
		errs = append(errs, fmt.Errorf("stock: must not be negative, got %d", o.Stock))
	}
	if !validRate(o.HangRate) {
		errs = append(errs, fmt.Errorf("hang_rate: must be within [0, 1], got %v", o.HangRate))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("offering %q: %w", name, err)
	}
	return nil
}

// Config describes a simulated cloud.
type Config struct {
	// Offerings is the catalog; names (capacity.Offering.Name) must be unique.
	Offerings []Offering
	// Quota is the account's limit on machines of all offerings (every
	// state until gone); 0 means no limit.
	Quota int
	// APIErrorRate is the probability that a call fails with a
	// TransientError (reads included).
	APIErrorRate float64
	// APIErrorAfterCommit is the fraction of injected errors on mutating
	// calls that strike after the call took effect: the caller sees an
	// error although the transition happened (a lost acknowledgement), and
	// only idempotent retries keep it from provisioning twice.
	APIErrorAfterCommit float64
	// BootTimeout, ConfigureTimeout and DrainTimeout bound Creating,
	// Configuring and Draining; a machine still in one when its timeout
	// passes goes Failed. Defaults: 15m, 5m and 10m.
	BootTimeout      time.Duration
	ConfigureTimeout time.Duration
	DrainTimeout     time.Duration
	// InterruptionNotice is how long before a spot reclaim the notice is
	// given (Machine.ReclaimAt set). Default 2m.
	InterruptionNotice time.Duration
}

// The Config defaults.
const (
	DefaultBootTimeout        = 15 * time.Minute
	DefaultConfigureTimeout   = 5 * time.Minute
	DefaultDrainTimeout       = 10 * time.Minute
	DefaultInterruptionNotice = 2 * time.Minute
)

// withDefaults returns c with zero durations set to their defaults and its
// offerings copied.
func (c Config) withDefaults() Config {
	if c.BootTimeout == 0 {
		c.BootTimeout = DefaultBootTimeout
	}
	if c.ConfigureTimeout == 0 {
		c.ConfigureTimeout = DefaultConfigureTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.InterruptionNotice == 0 {
		c.InterruptionNotice = DefaultInterruptionNotice
	}
	offs := make([]Offering, len(c.Offerings))
	for i, o := range c.Offerings {
		if o.Kind == "" {
			o.Kind = capacity.OnDemand
		}
		o.Resources = o.Resources.Clone()
		offs[i] = o
	}
	c.Offerings = offs
	return c
}

// Validate checks the configuration; errors name the field (and offering).
func (c Config) Validate() error {
	var errs []error
	if len(c.Offerings) == 0 {
		errs = append(errs, errors.New("offerings: at least one is needed"))
	}
	seen := map[string]bool{}
	for i := range c.Offerings {
		o := &c.Offerings[i]
		if err := o.validate(); err != nil {
			errs = append(errs, fmt.Errorf("offerings[%d]: %w", i, err))
		}
		if seen[o.Name()] {
			errs = append(errs, fmt.Errorf("offerings[%d]: offering %q listed twice", i, o.Name()))
		}
		seen[o.Name()] = true
	}
	if c.Quota < 0 {
		errs = append(errs, fmt.Errorf("quota: must not be negative, got %d", c.Quota))
	}
	if !validRate(c.APIErrorRate) {
		errs = append(errs, fmt.Errorf("api_error_rate: must be within [0, 1], got %v", c.APIErrorRate))
	}
	if !validRate(c.APIErrorAfterCommit) {
		errs = append(errs, fmt.Errorf("api_error_after_commit: must be within [0, 1], got %v", c.APIErrorAfterCommit))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"boot_timeout", c.BootTimeout}, {"configure_timeout", c.ConfigureTimeout},
		{"drain_timeout", c.DrainTimeout}, {"interruption_notice", c.InterruptionNotice},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", d.field, d.v))
		}
	}
	return errors.Join(errs...)
}

func validRate(r float64) bool { return r >= 0 && r <= 1 }
