package binpack

import (
	"fmt"
	"math"

	"github.com/tide-project/tide/internal/capacity"
)

// checkPack verifies a Result against its inputs, independently of Pack's
// vector code (it recomputes everything with capacity.Resources):
//   - every node's placements sum to its Used and Items, and fit its capacity
//     (the offering's resources or the existing free space, floored at zero);
//   - every group's placed + unplaced equals its count;
//   - items are unplaced only if they fit no offering or the WithMaxNew cap was reached;
//   - Cost is the sum of the new nodes' effective costs.
func checkPack(groups []capacity.Pending, offerings []capacity.Offering, free []capacity.Resources, maxNew int, r Result) error {
	if len(r.Existing) != len(free) {
		return fmt.Errorf("len(Existing) = %d, want %d", len(r.Existing), len(free))
	}
	if len(r.Unplaced) != len(groups) {
		return fmt.Errorf("len(Unplaced) = %d, want %d", len(r.Unplaced), len(groups))
	}
	if maxNew >= 0 && len(r.New) > maxNew {
		return fmt.Errorf("opened %d new nodes, cap %d", len(r.New), maxNew)
	}
	placed := make([]int, len(groups))
	check := func(n Node, limit capacity.Resources, what string) error {
		var used capacity.Resources
		items := 0
		for _, pl := range n.Placements {
			if pl.Group < 0 || pl.Group >= len(groups) || pl.Count <= 0 {
				return fmt.Errorf("%s: bad placement %+v", what, pl)
			}
			if groups[pl.Group].Requests.Negative() {
				return fmt.Errorf("%s: placed group %d with a negative request", what, pl.Group)
			}
			used = used.Add(groups[pl.Group].Requests.Scale(int64(pl.Count)))
			items += pl.Count
			placed[pl.Group] += pl.Count
		}
		if !used.Equal(n.Used) || items != n.Items {
			return fmt.Errorf("%s: Used=%v Items=%d, placements sum to %v and %d", what, n.Used, n.Items, used, items)
		}
		if !used.Fits(limit) {
			return fmt.Errorf("%s: used %v exceeds capacity %v", what, used, limit)
		}
		return nil
	}
	for i, n := range r.Existing {
		if n.Existing != i || n.Offering != -1 {
			return fmt.Errorf("Existing[%d] has Existing=%d Offering=%d", i, n.Existing, n.Offering)
		}
		if err := check(n, floorZero(free[i]), fmt.Sprintf("existing %d", i)); err != nil {
			return err
		}
	}
	cost := 0.0
	for i, n := range r.New {
		if n.Existing != -1 || n.Offering < 0 || n.Offering >= len(offerings) {
			return fmt.Errorf("New[%d] has Existing=%d Offering=%d", i, n.Existing, n.Offering)
		}
		if n.Items == 0 {
			return fmt.Errorf("New[%d] is empty", i)
		}
		if err := check(n, floorZero(offerings[n.Offering].Resources), fmt.Sprintf("new %d", i)); err != nil {
			return err
		}
		cost += offerings[n.Offering].EffectiveCost()
	}
	if math.Abs(cost-r.Cost) > 1e-9*math.Max(1, cost) {
		return fmt.Errorf("Cost = %v, offerings sum to %v", r.Cost, cost)
	}
	total := 0
	for g := range groups {
		want := max(groups[g].Count, 0)
		if placed[g]+r.Unplaced[g] != want {
			return fmt.Errorf("group %d: placed %d + unplaced %d != count %d", g, placed[g], r.Unplaced[g], want)
		}
		total += r.Unplaced[g]
		if r.Unplaced[g] > 0 && (maxNew < 0 || len(r.New) < maxNew) && fitsSome(groups[g].Requests, offerings) {
			return fmt.Errorf("group %d: %d unplaced though it fits an offering and no cap was hit", g, r.Unplaced[g])
		}
	}
	if total != r.UnplacedTotal {
		return fmt.Errorf("UnplacedTotal = %d, want %d", r.UnplacedTotal, total)
	}
	return nil
}

func fitsSome(req capacity.Resources, offerings []capacity.Offering) bool {
	if req.Negative() {
		return false
	}
	for _, o := range offerings {
		if req.Fits(floorZero(o.Resources)) {
			return true
		}
	}
	return false
}

func floorZero(r capacity.Resources) capacity.Resources {
	r = r.Clone()
	r.MilliCPU, r.Memory, r.GPUs = max(r.MilliCPU, 0), max(r.Memory, 0), max(r.GPUs, 0)
	for k, v := range r.Extended {
		r.Extended[k] = max(v, 0)
	}
	return r
}
