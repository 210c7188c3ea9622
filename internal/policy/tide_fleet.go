package policy

import (
	"slices"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// tideFleetSlack is how much dearer than the cheapest purchase for the
// backlog alone a purchase on the fleet's offerings may be (fleetShaped).
const tideFleetSlack = 0.25

// tideFleetWork is the optimizer's budget for the fleet fleetShaped
// compares with (binpack.BuyOptions.Work): the least there is, so that Buy
// answers with first fit decreasing (Pack) and what the optimizer finds at
// once. The fleet only names offerings: on the generated cases the
// default budget, or a tenth of it, left tide's mean cost within 0.07
// points of this one's and no lower on the whole, at up to twice the time
// per decision (BenchmarkTideDecide).
const tideFleetWork = 1

// fleetShaped returns the purchase for the backlog on only the offerings
// of the cheapest fleet for all of the pool's work (what runs on the
// unmarked nodes and what waits, bought anew) when that purchase places as
// much as res and costs at most tideFleetSlack more per hour; otherwise
// res. The bool says which.
//
// A backlog bought on its own takes the cheapest nodes for that step:
// 12 one-core tasks go to three 4-core nodes at $0.20/h rather than one
// 16-core node at $0.70/h, even when 4 more such tasks run on another
// 4-core node and the 16-core node would hold all of them for less than
// the four small ones (TestTideBuysOnTheFleetsOfferings). Step by step a
// growing pool so ends up on the small, dearer-per-core offering while the
// next steps would have filled the big one. Keeping a purchase close
// to its cheapest, on the offerings the whole fleet would be cheapest on,
// lowered tide's mean cost against the cheapest other policy by 0.14 to
// 0.27 points on five sets of generated cases, at the same p95 waits
// (docs/benchmarks.md, "Scaling quality X"); a slack of 0.5 was as cheap
// on the mean but left tide dominated on more cases.
//
// A pool of one offering, a backlog with a gang (bought whole by its own
// rules) or a purchase of no node keeps res.
func fleetShaped(nodes []capacity.Node, unmarked []int, pending []capacity.Pending, offs []capacity.Offering, free []capacity.Resources,
	limit []int, res binpack.Purchase) (binpack.Purchase, bool) {
	if len(offs) < 2 || res.Nodes == 0 || slices.ContainsFunc(pending, func(p capacity.Pending) bool { return p.Gang != "" }) {
		return res, false
	}
	all := append(runningGroups(nodes, unmarked), pending...)
	fleet := binpack.Buy(all, offs, binpack.BuyOptions{MaxNodes: -1, Limit: limit, Work: tideFleetWork})
	lim := make([]int, len(offs))
	outside := false // res buys an offering the fleet does not use
	for i := range offs {
		if fleet.Counts[i] > 0 {
			lim[i] = -1
		} else if res.Counts[i] > 0 {
			outside = true
		}
	}
	if !outside {
		return res, false
	}
	alt := binpack.Buy(pending, offs, binpack.BuyOptions{Free: free, MaxNodes: -1, Limit: lim})
	if alt.UnplacedTotal > res.UnplacedTotal || alt.Cost > (1+tideFleetSlack)*res.Cost {
		return res, false
	}
	return alt, true
}

// runningGroups returns the non-daemon work running on nodes[i] for i in
// idx as groups of identical requests, in the order first seen.
func runningGroups(nodes []capacity.Node, idx []int) []capacity.Pending {
	var out []capacity.Pending
	plain := map[[3]int64]int{} // index into out of a shape without extended resources
	for _, i := range idx {
		for j := range nodes[i].Running {
			in := &nodes[i].Running[j]
			if in.Daemon {
				continue
			}
			r := in.Each()
			g := -1
			if len(r.Extended) == 0 {
				k := [3]int64{r.MilliCPU, r.Memory, r.GPUs}
				if x, ok := plain[k]; ok {
					g = x
				} else {
					plain[k] = len(out)
				}
			} else {
				g = slices.IndexFunc(out, func(p capacity.Pending) bool { return p.Requests.Equal(r) })
			}
			if g >= 0 {
				out[g].Count += in.Instances()
				continue
			}
			out = append(out, capacity.Pending{Requests: r, Count: in.Instances()})
		}
	}
	return out
}
