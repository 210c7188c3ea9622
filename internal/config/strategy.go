package config

import (
	"fmt"

	"github.com/tide-project/tide/internal/routing"
)

// Strategy is the file's capacity-provider strategy (routing.Strategy),
// at the top of the configuration file, beside pools:
//
//	strategy:
//	  - {pool: od, base: 2, weight: 1}
//	  - {pool: spot, weight: 3}
type Strategy = routing.Strategy

// StrategyEntry is one pool of a strategy.
type StrategyEntry = routing.StrategyEntry

// validateStrategy checks s against the file's pools, naming the field.
func validateStrategy(s Strategy, pools map[string]bool) []error {
	var errs []error
	bases, weights := 0, 0
	seen := map[string]bool{}
	for i, e := range s {
		where := fmt.Sprintf("strategy[%d]", i)
		switch {
		case !pools[e.Pool]:
			errs = append(errs, fmt.Errorf("%s.pool: no pool %q in the file", where, e.Pool))
		case seen[e.Pool]:
			errs = append(errs, fmt.Errorf("%s.pool: %q is already in the strategy", where, e.Pool))
		}
		seen[e.Pool] = true
		if e.Base < 0 || e.Base > 100000 {
			errs = append(errs, fmt.Errorf("%s.base: must be within 0..100000, got %d", where, e.Base))
		}
		if e.Weight < 0 || e.Weight > 1000 {
			errs = append(errs, fmt.Errorf("%s.weight: must be within 0..1000, got %d", where, e.Weight))
		}
		if e.Base > 0 {
			bases++
		}
		weights += max(e.Weight, 0)
	}
	if bases > 1 {
		errs = append(errs, fmt.Errorf("strategy: only one pool may have a base (as in ECS), %d have one", bases))
	}
	if weights == 0 {
		errs = append(errs, fmt.Errorf("strategy: at least one pool needs a weight above 0"))
	}
	return errs
}

// Route is what routing needs of the pool.
func (p *Pool) Route() routing.Pool {
	return routing.Pool{Name: p.Name, Weight: p.Weight, Selector: p.Selector.Labels, Offerings: p.Offerings}
}

// Routes are the pools of pools as routing needs them, in order.
func Routes(pools []Pool) []routing.Pool {
	out := make([]routing.Pool, len(pools))
	for i := range pools {
		out[i] = pools[i].Route()
	}
	return out
}
