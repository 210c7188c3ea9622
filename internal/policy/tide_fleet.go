package policy

import (
	"slices"
	"strconv"

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
// idx as groups of identical requests, in the order first seen. Shapes are
// found by key (a map lookup per instance), so a pool of many pods with
// extended resources (Kubernetes mode's slots and devices) costs no more
// than one without.
func runningGroups(nodes []capacity.Node, idx []int) []capacity.Pending {
	var out []capacity.Pending
	plain := map[[3]int64]int{}  // index into out of a shape without extended resources
	extended := map[string]int{} // and of one with, by extendedKey
	for _, i := range idx {
		for j := range nodes[i].Running {
			in := &nodes[i].Running[j]
			if in.Daemon {
				continue
			}
			r := in.Each()
			var g int
			var ok bool
			if k := extendedKey(r); k == "" {
				k := [3]int64{r.MilliCPU, r.Memory, r.GPUs}
				if g, ok = plain[k]; !ok {
					plain[k] = len(out)
				}
			} else if g, ok = extended[k]; !ok {
				extended[k] = len(out)
			}
			if ok {
				out[g].Count += in.Instances()
				continue
			}
			out = append(out, capacity.Pending{Requests: r, Count: in.Instances()})
		}
	}
	return out
}

// extendedKey names r's amounts, extended resources included, in one
// string (names sorted; a zero amount left out, as Resources.Equal ignores
// it); "" when r has no extended resource.
func extendedKey(r capacity.Resources) string {
	var names []string
	for k, v := range r.Extended {
		if v != 0 {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	b := strconv.AppendInt(nil, r.MilliCPU, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.Memory, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.GPUs, 10)
	for _, k := range names {
		b = append(b, '/')
		b = append(b, k...)
		b = append(b, '=')
		b = strconv.AppendInt(b, r.Extended[k], 10)
	}
	return string(b)
}
