package binpack

import (
	"math"
	"slices"
)

// knap solves the pricing problem of the purchase's column generation for
// one node size: choose how many items of each shape to put on one node,
// a[i] ≤ upper[i], so that they fit in every dimension and Σ value[i]·a[i]
// is as large as possible (a bounded multi-dimensional knapsack).
//
// It is solved by depth-first branch and bound with a node budget. The
// bound at each node is the fractional knapsack over the surrogate
// constraint Σ_d r_d / C_d ≤ Σ_d free_d / C_d (every feasible fill meets it),
// so the search is exact when it finishes within the budget, and the
// surrogate bound at the root is a valid upper bound when it does not.
type knap struct {
	nd    int
	cap   []int64   // node capacity
	req   []int64   // shapes × nd
	value []float64 // per shape
	upper []int64   // per shape

	order []int     // shapes with value > 0 that fit, by value density
	share []float64 // surrogate size per shape
	rank  []int     // per shape, its position in order (-1 when not in it)
	// Per dimension d (a bound of its own, on that dimension alone): the
	// shapes of order by value per unit of d, and the unit sizes.
	dimOrder [][]int
	free     []int64
	cur      []int64
	best     []int64
	bestV    float64
	open     float64 // the largest bound of a subtree the search left unexplored
	nodes    int
	limit    int
	work     int // rough flops spent since reset
	exact    bool
}

func (k *knap) reset(nd int, capv, req []int64, value []float64, upper []int64, limit int) {
	m := len(value)
	k.nd, k.cap, k.req, k.value, k.upper, k.limit = nd, capv, req, value, upper, limit
	k.order = k.order[:0]
	k.share = slices.Grow(k.share[:0], m)[:m]
	for i := range m {
		r := req[i*nd : (i+1)*nd]
		s := 0.0
		for d, c := range capv {
			if r[d] > 0 {
				s += float64(r[d]) / float64(c) // c > 0: r fits, so r ≤ c
			}
		}
		k.share[i] = s
		if value[i] > 0 && upper[i] > 0 && fits(r, capv) {
			k.order = append(k.order, i)
		}
	}
	slices.SortStableFunc(k.order, func(a, b int) int {
		// Density value/share, items asking for nothing first.
		da, db := density(value[a], k.share[a]), density(value[b], k.share[b])
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return a - b
	})
	k.rank = slices.Grow(k.rank[:0], m)[:m]
	for i := range k.rank {
		k.rank[i] = -1
	}
	for p, i := range k.order {
		k.rank[i] = p
	}
	for len(k.dimOrder) < nd {
		k.dimOrder = append(k.dimOrder, nil)
	}
	for d := range nd {
		o := append(k.dimOrder[d][:0], k.order...)
		if capv[d] > 0 {
			slices.SortStableFunc(o, func(a, b int) int {
				ra, rb := req[a*nd+d], req[b*nd+d]
				// value/ra > value/rb  ⇔  value_a·rb > value_b·ra (zero sizes first)
				x, y := value[a]*float64(rb), value[b]*float64(ra)
				switch {
				case x > y:
					return -1
				case x < y:
					return 1
				}
				return 0
			})
		}
		k.dimOrder[d] = o
	}
	k.free = append(k.free[:0], capv...)
	k.cur = slices.Grow(k.cur[:0], m)[:m]
	clear(k.cur)
	k.best = slices.Grow(k.best[:0], m)[:m]
	clear(k.best)
	k.bestV, k.open, k.nodes, k.exact, k.work = 0, 0, 0, true, 0
}

func density(v, s float64) float64 {
	if s <= 0 {
		return math.Inf(1)
	}
	return v / s
}

// surrogate returns the surrogate capacity of free: Σ_d free_d / C_d.
func (k *knap) surrogate(free []int64) float64 {
	s := 0.0
	for d, c := range k.cap {
		if c > 0 {
			s += float64(free[d]) / float64(c)
		}
	}
	return s
}

// bound returns an upper bound on the value that the shapes order[from:]
// can add to a node with free space free: the least of the fractional
// knapsacks on the surrogate constraint and on each dimension alone.
func (k *knap) bound(from int, free []int64) float64 {
	k.work += (len(k.order) - from + 1) * (k.nd + 1) * (k.nd + 2)
	b := k.surrogateBound(from, free)
	for d, c := range k.cap {
		if c <= 0 {
			continue
		}
		room := float64(free[d])
		v := 0.0
		for _, i := range k.dimOrder[d] {
			if k.rank[i] < from {
				continue
			}
			r := k.req[i*k.nd : (i+1)*k.nd]
			if !fits(r, free) {
				continue
			}
			n := float64(min(k.upper[i], perFit(free, r)))
			if r[d] <= 0 {
				v += n * k.value[i]
				continue
			}
			take := math.Min(n, room/float64(r[d]))
			v += take * k.value[i]
			room -= take * float64(r[d])
			if room <= 0 {
				break
			}
		}
		b = math.Min(b, v)
	}
	return b
}

// surrogateBound is bound's fractional knapsack on the surrogate constraint.
func (k *knap) surrogateBound(from int, free []int64) float64 {
	room := k.surrogate(free)
	v := 0.0
	for _, i := range k.order[from:] {
		r := k.req[i*k.nd : (i+1)*k.nd]
		if !fits(r, free) {
			continue
		}
		n := min(k.upper[i], perFit(free, r))
		if k.share[i] <= 0 {
			v += float64(n) * k.value[i]
			continue
		}
		take := math.Min(float64(n), room/k.share[i])
		v += take * k.value[i]
		room -= take * k.share[i]
		if room <= 0 {
			break
		}
	}
	return v
}

// perFit is fitCount without a limit, saturated at MaxInt64 for a request of nothing.
func perFit(free, req []int64) int64 {
	n := int64(math.MaxInt64)
	for d, r := range req {
		if r > 0 {
			n = min(n, free[d]/r)
		}
	}
	return max(n, 0)
}

// solve runs the search and returns the best fill and its value, and an
// upper bound on the optimum (equal to the value when the search finished).
//
// When the bound shows that no fill is worth more than skip, it returns at
// once with the empty fill, value 0 and that bound.
//
// With a node limit of 0 it only fills the node greedily and bounds it with
// the cheap fractional bounds (no Lagrangian, LP or search): the mode of a
// spent budget.
func (k *knap) solve(skip float64) (fill []int64, value, upper float64) {
	if k.limit <= 0 {
		root := k.bound(0, k.free)
		if root <= skip {
			return k.best, 0, root
		}
		k.greedy()
		k.exact = k.bestV >= root*(1-1e-12)
		return k.best, k.bestV, math.Max(root, k.bestV)
	}
	root := math.Min(k.bound(0, k.free), k.lagrange())
	if root <= skip {
		return k.best, 0, root
	}
	if lp := k.lpBound(); lp < root {
		root = lp * (1 + 1e-9) // the LP's rounding errors
		if root <= skip {
			return k.best, 0, root
		}
	}
	k.greedy()
	if k.bestV < root*(1-1e-12) {
		k.dfs(0, 0)
	}
	if k.exact || k.bestV >= root*(1-1e-12) {
		k.exact = true
		return k.best, k.bestV, k.bestV
	}
	return k.best, k.bestV, math.Min(root, math.Max(k.open, k.bestV))
}

// greedy fills the node in density order: the search's first incumbent.
func (k *knap) greedy() {
	free := k.scratchFree()
	v := 0.0
	for _, i := range k.order {
		r := k.req[i*k.nd : (i+1)*k.nd]
		n := min(k.upper[i], perFit(free, r))
		if n <= 0 {
			continue
		}
		for d := range r {
			free[d] -= n * r[d]
		}
		k.cur[i] = n
		v += float64(n) * k.value[i]
	}
	if v > k.bestV {
		k.bestV = v
		copy(k.best, k.cur)
	}
	clear(k.cur)
}

func (k *knap) scratchFree() []int64 {
	f := make([]int64, k.nd)
	copy(f, k.cap)
	return f
}

func (k *knap) dfs(pos int, v float64) {
	if pos == len(k.order) {
		if v > k.bestV {
			k.bestV = v
			copy(k.best, k.cur)
		}
		return
	}
	if k.nodes >= k.limit {
		// Out of budget: this subtree is unexplored; its bound stands in.
		k.exact = false
		k.open = math.Max(k.open, v+k.bound(pos, k.free))
		return
	}
	k.nodes++
	if v+k.bound(pos, k.free) <= k.bestV*(1+1e-12) {
		return
	}
	i := k.order[pos]
	r := k.req[i*k.nd : (i+1)*k.nd]
	n := min(k.upper[i], perFit(k.free, r))
	low := int64(0)
	if k.share[i] <= 0 {
		low = n // asks for nothing the node has: always take them all
	}
	saved := k.upper[i]
	defer func() { k.upper[i] = saved }()
	for c := n; c >= low; c-- {
		// The bound with at most c items of shape i only falls as c does:
		// once it cannot beat the incumbent, no smaller c can.
		k.upper[i] = c
		if c < n && v+k.bound(pos, k.free) <= k.bestV*(1+1e-12) {
			break
		}
		for d := range r {
			k.free[d] -= c * r[d]
		}
		k.cur[i] = c
		k.dfs(pos+1, v+float64(c)*k.value[i])
		for d := range r {
			k.free[d] += c * r[d]
		}
		if !k.exact && k.nodes >= k.limit {
			// The smaller counts of shape i are unexplored.
			if c > low {
				k.upper[i] = c - 1
				k.open = math.Max(k.open, v+k.bound(pos, k.free))
			}
			break
		}
	}
	k.cur[i] = 0
}

// lagrange returns the Lagrangian upper bound of the knapsack: for any
// prices λ ≥ 0 of the dimensions, C·λ + Σ_i upper_i · max(0, value_i − r_i·λ)
// bounds every fill (it is the LP relaxation's dual). λ is found by
// coordinate descent from zero, a few sweeps; each coordinate's minimum is
// exact (the function is convex and piecewise linear in it).
func (k *knap) lagrange() float64 {
	k.work += 6 * (len(k.order) + 1) * k.nd * k.nd * 8
	nd := k.nd
	lam := make([]float64, nd)
	u := make([]float64, len(k.value))
	for _, i := range k.order {
		u[i] = float64(min(k.upper[i], perFit(k.cap, k.req[i*nd:(i+1)*nd])))
	}
	eval := func() float64 {
		s := 0.0
		for d, c := range k.cap {
			s += float64(c) * lam[d]
		}
		for _, i := range k.order {
			r := k.req[i*nd : (i+1)*nd]
			b := k.value[i]
			for d := range nd {
				b -= float64(r[d]) * lam[d]
			}
			if b > 0 {
				s += u[i] * b
			}
		}
		return s
	}
	type bp struct{ t, w float64 }
	var pts []bp
	best := eval()
	for sweep := 0; sweep < 6; sweep++ {
		for d := range nd {
			if k.cap[d] <= 0 {
				continue
			}
			pts = pts[:0]
			total := 0.0
			for _, i := range k.order {
				r := k.req[i*nd : (i+1)*nd]
				if r[d] <= 0 {
					continue
				}
				b := k.value[i]
				for e := range nd {
					if e != d {
						b -= float64(r[e]) * lam[e]
					}
				}
				if b > 0 {
					w := u[i] * float64(r[d])
					total += w
					pts = append(pts, bp{b / float64(r[d]), w})
				}
			}
			slope := float64(k.cap[d]) - total
			lam[d] = 0
			if slope < 0 {
				slices.SortFunc(pts, func(a, b bp) int {
					switch {
					case a.t < b.t:
						return -1
					case a.t > b.t:
						return 1
					}
					return 0
				})
				for _, p := range pts {
					slope += p.w
					if slope >= 0 {
						lam[d] = p.t
						break
					}
				}
			}
		}
		v := eval()
		if v >= best*(1-1e-9) {
			best = math.Min(best, v)
			break
		}
		best = v
	}
	return best
}

// lpBound returns the knapsack's LP relaxation (an upper bound on every
// fill), solved exactly: capacities scaled to 1, one row per dimension and
// one per shape's upper bound.
func (k *knap) lpBound() float64 {
	n := len(k.order)
	if n == 0 {
		return 0
	}
	var dimsUsed []int
	for d, c := range k.cap {
		if c > 0 {
			dimsUsed = append(dimsUsed, d)
		}
	}
	rows := len(dimsUsed) + n
	k.work += rows * (2*n + rows) * (n + rows) * 2
	a := make([]float64, rows*n)
	b := make([]float64, rows)
	c := make([]float64, n)
	for j, i := range k.order {
		r := k.req[i*k.nd : (i+1)*k.nd]
		for q, d := range dimsUsed {
			a[q*n+j] = float64(r[d]) / float64(k.cap[d])
		}
		a[(len(dimsUsed)+j)*n+j] = 1
		b[len(dimsUsed)+j] = float64(min(k.upper[i], perFit(k.cap, r)))
		c[j] = k.value[i]
	}
	for q := range dimsUsed {
		b[q] = 1
	}
	return lpMax(a, b, c)
}
