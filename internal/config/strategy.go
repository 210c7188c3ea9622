package config

import "fmt"

// Strategy is a capacity-provider strategy in ECS's sense, over tide's
// pools: the instances that name no pool, and that some of its pools fit,
// are split across those pools. The first Base instances live at a time
// go to the pool that has a base; the rest are divided in proportion to
// the weights. With base 2 on pool od (weight 1) and weight 3 on spot, a
// burst of 10 lands 2 + 2 on od and 6 on spot. A pool of the strategy
// that cannot take more (at its max, over a limit, out of capacity)
// overflows to the strategy's others. It lives at the top of the
// configuration file, beside pools:
//
//	strategy:
//	  - {pool: od, base: 2, weight: 1}
//	  - {pool: spot, weight: 3}
type Strategy []StrategyEntry

// StrategyEntry is one pool of a strategy.
type StrategyEntry struct {
	// Pool names a pool of the file.
	Pool string `json:"pool"`
	// Base is how many live instances, at least, the pool holds before
	// weights count; at most one entry may have one (as in ECS).
	Base int `json:"base,omitempty"`
	// Weight is the pool's share of the instances beyond the bases
	// (0..1000); 0 takes only its base.
	Weight int `json:"weight,omitempty"`
}

// validate checks s against the file's pools, naming the field.
func (s Strategy) validate(pools map[string]bool) []error {
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
