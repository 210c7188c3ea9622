package binpack

// tree answers "which is the first bin that fits this request?" in about
// O(d log bins) instead of a linear scan. It is a segment tree over the bins'
// free vectors: every inner node holds the component-wise maximum of its
// children. A request that does not fit a node's maximum fits no bin below
// it, so the search prunes that subtree; the converse does not hold in more
// than one dimension (one child may have the CPU and the other the memory),
// so the search backtracks when both children of a fitting node fail. Leaves
// are exact, which makes the answer exactly first fit.
//
// Leaves of bins not yet opened hold -1 in every dimension and so never fit
// a (non-negative) request.
type tree struct {
	d int     // dimensions
	p int     // leaf count, a power of two
	v []int64 // 2p nodes × d; node i at v[i*d:], root 1, leaves p..2p-1
}

func newTree(d, bins int) tree {
	p := 16
	for p < bins {
		p *= 2
	}
	t := tree{d: d, p: p, v: make([]int64, 2*p*d)}
	for i := range t.v {
		t.v[i] = -1
	}
	return t
}

// node returns the vector of tree node i.
func (t *tree) node(i int) []int64 { return t.v[i*t.d : (i+1)*t.d : (i+1)*t.d] }

// set stores bin b's free vector and refreshes its ancestors.
func (t *tree) set(b int, free []int64) {
	for b >= t.p {
		t.grow()
	}
	i := t.p + b
	copy(t.node(i), free)
	for i >>= 1; i >= 1; i >>= 1 {
		dst, l, r := t.node(i), t.node(2*i), t.node(2*i+1)
		for k := range dst {
			dst[k] = max(l[k], r[k])
		}
	}
}

// build stores the free vectors of bins 0..len(free)/d-1 (d per bin) at
// once and computes every inner node in one bottom-up pass: O(bins), where
// a set per bin would refresh the ancestors each time (O(bins log bins)).
// Bins for which skip reports true keep the "never fits" leaf (-1).
func (t *tree) build(free []int64, skip func(b int) bool) {
	nb := len(free) / t.d
	for nb > t.p {
		t.grow()
	}
	for b := range nb {
		if skip == nil || !skip(b) {
			copy(t.node(t.p+b), free[b*t.d:(b+1)*t.d])
		}
	}
	for i := t.p - 1; i >= 1; i-- {
		dst, l, r := t.node(i), t.node(2*i), t.node(2*i+1)
		for k := range dst {
			dst[k] = max(l[k], r[k])
		}
	}
}

// grow doubles the leaf count, keeping the leaves in order.
func (t *tree) grow() {
	old := *t
	*t = newTree(t.d, 2*t.p)
	copy(t.v[t.p*t.d:], old.v[old.p*old.d:])
	for i := t.p - 1; i >= 1; i-- {
		dst, l, r := t.node(i), t.node(2*i), t.node(2*i+1)
		for k := range dst {
			dst[k] = max(l[k], r[k])
		}
	}
}

// first returns the lowest-numbered bin whose free vector fits req, or -1.
func (t *tree) first(req []int64) int {
	if t.d == 3 {
		return t.first3(req[0], req[1], req[2])
	}
	if !t.fits(req, 1) {
		return -1
	}
	i := 1
	for i < t.p {
		l := 2 * i
		switch {
		case t.fits(req, l):
			i = l
		case t.fits(req, l+1):
			i = l + 1
		default:
			// Dead end: climb to the nearest left child whose right
			// sibling fits, and continue from that sibling.
			for {
				if i == 1 {
					return -1
				}
				if i&1 == 0 && t.fits(req, i+1) {
					i++
					break
				}
				i >>= 1
			}
		}
	}
	return i - t.p
}

// fits reports whether req fits tree node i's vector.
func (t *tree) fits(req []int64, i int) bool {
	v := t.v[i*t.d : i*t.d+len(req)]
	for k, r := range req {
		if r > v[k] {
			return false
		}
	}
	return true
}

// first3 is first for the common three dimensions (no extended resources),
// with the comparisons unrolled.
func (t *tree) first3(r0, r1, r2 int64) int {
	v := t.v
	fit := func(i int) bool {
		n := v[3*i : 3*i+3 : 3*i+3]
		return r0 <= n[0] && r1 <= n[1] && r2 <= n[2]
	}
	if !fit(1) {
		return -1
	}
	i := 1
	for i < t.p {
		l := 2 * i
		switch {
		case fit(l):
			i = l
		case fit(l + 1):
			i = l + 1
		default:
			for {
				if i == 1 {
					return -1
				}
				if i&1 == 0 && fit(i+1) {
					i++
					break
				}
				i >>= 1
			}
		}
	}
	return i - t.p
}
