package fleet

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// Never, as a release delay, keeps Idle machines of that kind forever.
const Never time.Duration = -1

// Weights weigh the four terms of the victim score of BigFleet §8:
//
//	score = priorityGap*Priority + (1/drainTime)*Drain
//	      + (1/interruptionPenalty)*Interruption + (1/reclamationPenalty)*Reclamation
//
// drainTime is in seconds and the penalties in dollars. The highest score is
// preempted first.
type Weights struct {
	Priority, Drain, Interruption, Reclamation float64
}

// GraceStep is one row of the drain-grace table: a preemption whose priority
// gap is greater than MinGap drains with Grace.
type GraceStep struct {
	MinGap int64
	Grace  time.Duration
}

// Config tunes a shard's decision engine. The zero value takes every default
// (see DefaultConfig); Validate fills them in.
type Config struct {
	// Weights of the victim score. Zero: DefaultWeights.
	Weights Weights
	// Grace is the drain-grace table, by priority gap; the first step whose
	// MinGap the gap exceeds applies, DefaultGrace otherwise. Nil: the seed's
	// table (> 900K → 10s, > 500K → 30s, > 100K → 2m).
	Grace []GraceStep
	// DefaultGrace applies to gaps no step matches. Zero: 10m.
	DefaultGrace time.Duration
	// ReclaimGrace is the drain grace of Phase 3 (excess machines a cluster
	// no longer needs). Zero: 10m.
	ReclaimGrace time.Duration
	// ReleaseAfter is how long an Idle machine of each capacity kind waits
	// before it is released to Speculative; Never keeps it. Kinds missing
	// from the map take the defaults: bare-metal and reserved Never,
	// on-demand 10m, spot 1m.
	ReleaseAfter map[capacity.Kind]time.Duration
	// EscalateAfter is the age, in cycles, a shortfall must exceed to be
	// escalated to the coordinator. Zero: 5.
	EscalateAfter int
	// MaxShortfalls bounds the shortfalls a shard reports. Zero: 100.
	MaxShortfalls int
	// DefaultDrainTime stands in for a need without a drain time in victim
	// scoring. Zero: 5m.
	DefaultDrainTime time.Duration
	// MinPenalty is the floor of both penalties in victim scoring, so a
	// zero penalty does not divide by zero. Zero: 1 (dollar).
	MinPenalty float64
	// CreateBackoff is how long an offering is skipped after a Create came
	// back refused (the machine returned to Speculative). Zero: 30s.
	CreateBackoff time.Duration
}

// DefaultWeights rank victims mainly by priority gap; the other three terms
// weigh 1,000 priority points per unit (one over a second, one over a dollar).
var DefaultWeights = Weights{Priority: 1, Drain: 1000, Interruption: 1000, Reclamation: 1000}

// DefaultGrace is the seed's drain-grace table.
var DefaultGrace = []GraceStep{{900_000, 10 * time.Second}, {500_000, 30 * time.Second}, {100_000, 2 * time.Minute}}

// DefaultReleaseAfter holds the default release delays per capacity kind.
var DefaultReleaseAfter = map[capacity.Kind]time.Duration{
	capacity.BareMetal: Never,
	capacity.Reserved:  Never,
	capacity.OnDemand:  10 * time.Minute,
	capacity.Spot:      time.Minute,
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	c, _ := Config{}.Validate()
	return c
}

// Validate fills in defaults and checks the fields; errors name the field.
// It returns the completed configuration; c itself is not modified.
func (c Config) Validate() (Config, error) {
	var errs []error
	if c.Weights == (Weights{}) {
		c.Weights = DefaultWeights
	}
	weights := []struct {
		name string
		w    float64
	}{{"priority", c.Weights.Priority}, {"drain", c.Weights.Drain},
		{"interruption", c.Weights.Interruption}, {"reclamation", c.Weights.Reclamation}}
	for _, x := range weights {
		name, w := x.name, x.w
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			errs = append(errs, fmt.Errorf("weights.%s: must be a finite non-negative number, got %v", name, w))
		}
	}
	if c.Grace == nil {
		c.Grace = DefaultGrace
	}
	c.Grace = slices.Clone(c.Grace)
	for i, g := range c.Grace {
		if g.Grace <= 0 {
			errs = append(errs, fmt.Errorf("grace[%d].grace: must be positive, got %s", i, g.Grace))
		}
		if i > 0 && g.MinGap >= c.Grace[i-1].MinGap {
			errs = append(errs, fmt.Errorf("grace[%d].min_gap: steps must be in decreasing gap order", i))
		}
	}
	dur := func(name string, d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
		if *d < 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", name, *d))
		}
	}
	dur("default_grace", &c.DefaultGrace, 10*time.Minute)
	dur("reclaim_grace", &c.ReclaimGrace, 10*time.Minute)
	dur("default_drain_time", &c.DefaultDrainTime, 5*time.Minute)
	dur("create_backoff", &c.CreateBackoff, 30*time.Second)
	release := maps.Clone(DefaultReleaseAfter)
	for _, k := range slices.Sorted(maps.Keys(c.ReleaseAfter)) {
		d := c.ReleaseAfter[k]
		if !k.Valid() {
			errs = append(errs, fmt.Errorf("release_after: unknown capacity kind %q", k))
		}
		if d < 0 && d != Never {
			errs = append(errs, fmt.Errorf("release_after[%s]: must be non-negative or Never, got %s", k, d))
		}
		release[k] = d
	}
	c.ReleaseAfter = release
	if c.EscalateAfter == 0 {
		c.EscalateAfter = 5
	}
	if c.EscalateAfter < 0 {
		errs = append(errs, fmt.Errorf("escalate_after: must be positive, got %d", c.EscalateAfter))
	}
	if c.MaxShortfalls == 0 {
		c.MaxShortfalls = 100
	}
	if c.MaxShortfalls < 0 {
		errs = append(errs, fmt.Errorf("max_shortfalls: must be positive, got %d", c.MaxShortfalls))
	}
	if c.MinPenalty == 0 {
		c.MinPenalty = 1
	}
	if c.MinPenalty < 0 || math.IsNaN(c.MinPenalty) || math.IsInf(c.MinPenalty, 0) {
		errs = append(errs, fmt.Errorf("min_penalty: must be a finite positive number, got %v", c.MinPenalty))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// GraceFor returns the drain grace for a preemption with the given priority
// gap (requester's priority minus the victim's).
func (c *Config) GraceFor(gap int64) time.Duration {
	for _, g := range c.Grace {
		if gap > g.MinGap {
			return g.Grace
		}
	}
	return c.DefaultGrace
}
