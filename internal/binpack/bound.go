package binpack

import (
	"math"
	"math/bits"

	"github.com/tide-project/tide/internal/capacity"
)

// PerNode returns how many items requesting req fit on one empty node with
// resources node: the minimum over dimensions of floor(node/req), counting
// only the dimensions req asks for. ok is false when req does not fit an
// empty node (or asks for a negative amount). A request for nothing fits any
// node without limit: PerNode returns math.MaxInt64, true.
func PerNode(req, node capacity.Resources) (n int64, ok bool) {
	n = math.MaxInt64
	dim := func(r, c int64) bool {
		if r < 0 {
			return false
		}
		if r == 0 {
			return true
		}
		n = min(n, max(c, 0)/r)
		return n > 0
	}
	if !dim(req.MilliCPU, node.MilliCPU) || !dim(req.Memory, node.Memory) || !dim(req.GPUs, node.GPUs) {
		return 0, false
	}
	for k, v := range req.Extended {
		if !dim(v, node.Extended[k]) {
			return 0, false
		}
	}
	return n, true
}

// NodesFor returns the exact number of nodes of size node that count items
// requesting req need: ceil(count / PerNode(req, node)). Identical items
// make this optimal, so it is both a lower and an upper bound. ok is false
// when one item does not fit an empty node; the count is then 0. A count of
// zero or less needs no node.
func NodesFor(req capacity.Resources, count int, node capacity.Resources) (n int, ok bool) {
	per, ok := PerNode(req, node)
	if !ok {
		return 0, false
	}
	if count <= 0 {
		return 0, true
	}
	return int(ceilCount(int64(count), per)), true
}

// LowerBound returns a lower bound on the number of nodes of size node that
// the pending groups need; it is never above the optimum. It is the largest
// of three bounds, each valid on its own:
//
//   - per dimension, ceil(total requested / node capacity);
//   - per dimension, the number of items asking for more than half of it (no
//     two of them can share a node);
//   - per group, the exact NodesFor of that group alone;
//
// and at least 1 when any item is pending. ok is false when some item does
// not fit an empty node at all; n is then the bound over the other groups.
// Groups with a count of zero or less are ignored.
func LowerBound(groups []capacity.Pending, node capacity.Resources) (n int, ok bool) {
	ok = true
	var d dims
	d.add(node)
	for i := range groups {
		if groups[i].Count > 0 {
			d.add(groups[i].Requests)
		}
	}
	nd := d.n()
	buf := make([]int64, 2*nd)
	capv, req := buf[:nd], buf[nd:]
	d.vec(node, capv)
	totals := make([]u128, nd)
	big := make([]int, nd)
	items := 0
	for i := range groups {
		g := &groups[i]
		if g.Count <= 0 {
			continue
		}
		d.vec(g.Requests, req)
		per := int64(math.MaxInt64)
		fits := true
		for k := range nd {
			r, c := req[k], max(capv[k], 0)
			if r < 0 || r > c {
				fits = false
				break
			}
			if r > 0 {
				per = min(per, c/r)
			}
		}
		if !fits {
			ok = false
			continue
		}
		cnt := int64(g.Count)
		items++
		n = max(n, int(ceilCount(cnt, per)))
		for k := range nd {
			r := req[k]
			if r == 0 {
				continue
			}
			totals[k].addMul(uint64(r), uint64(cnt))
			if r > capv[k]/2 { // 2r > cap: no two such items share a node
				big[k] += g.Count
			}
		}
	}
	if items == 0 {
		return 0, ok
	}
	n = max(n, 1)
	for k := range nd {
		if capv[k] > 0 {
			n = max(n, totals[k].ceilDiv(uint64(capv[k])), big[k])
		}
	}
	return n, ok
}

// ceilCount returns ceil(count / per) for count ≥ 1 and per ≥ 1 without overflow.
func ceilCount(count, per int64) int64 { return (count-1)/per + 1 }

// u128 is an unsigned 128-bit accumulator, so that count × request sums
// cannot overflow.
type u128 struct{ hi, lo uint64 }

func (a *u128) addMul(x, y uint64) {
	hi, lo := bits.Mul64(x, y)
	var c uint64
	a.lo, c = bits.Add64(a.lo, lo, 0)
	a.hi += hi + c
}

// ceilDiv returns ceil(a / d) saturated to math.MaxInt (a smaller value is
// still a valid lower bound).
func (a u128) ceilDiv(d uint64) int {
	if a.hi >= d {
		return math.MaxInt
	}
	q, r := bits.Div64(a.hi, a.lo, d)
	if r > 0 {
		q++
	}
	if q > math.MaxInt || q == 0 && r > 0 {
		return math.MaxInt
	}
	return int(q)
}
