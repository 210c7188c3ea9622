package binpack

import "math"

// master is the restricted master LP of the purchase's column generation:
//
//	minimize   Σ_p cost_p x_p
//	subject to Σ_p a_ip x_p ≥ n_i   for every shape i
//	           x ≥ 0
//
// solved by the revised primal simplex with an explicit basis inverse (m × m,
// m = shapes). Columns (node fill patterns) are only ever added, so every
// solve starts from the last optimal basis. Surplus columns (−e_i, cost 0)
// are implicit. The initial basis holds one single-shape pattern per shape,
// so the LP is feasible from the start and needs no phase 1.
type master struct {
	m     int
	n     []float64 // demand per shape
	cols  []column
	basis []int     // per row: a column index, or -1-i for the surplus of shape i
	binv  []float64 // m × m, row-major
	xb    []float64 // basic values
	y     []float64 // duals (cost_B · B⁻¹)
	work  int       // flops spent, roughly
	pivs  int
}

// column is a node fill pattern: a node of offering off holding a[i] items
// of shape i, at cost.
type column struct {
	off  int
	a    []int64
	cost float64
}

// eps is the tolerance of the simplex: reduced costs and pivots smaller than
// it (relative to the column's cost) count as zero.
const eps = 1e-9

func newMaster(n []float64, init []column) *master {
	m := len(n)
	lp := &master{m: m, n: n, basis: make([]int, m), binv: make([]float64, m*m), xb: make([]float64, m), y: make([]float64, m)}
	for i := range m {
		lp.cols = append(lp.cols, init[i])
		lp.basis[i] = i
		a := float64(init[i].a[i])
		lp.binv[i*m+i] = 1 / a
		lp.xb[i] = n[i] / a
	}
	lp.duals()
	return lp
}

// colCost returns the cost of a basic column (0 for a surplus).
func (lp *master) colCost(j int) float64 {
	if j < 0 {
		return 0
	}
	return lp.cols[j].cost
}

// duals recomputes y = cost_B · B⁻¹.
func (lp *master) duals() {
	m := lp.m
	for i := range m {
		s := 0.0
		for r := range m {
			s += lp.colCost(lp.basis[r]) * lp.binv[r*m+i]
		}
		lp.y[i] = s
	}
	lp.work += m * m
}

// reduced returns the reduced cost of column j.
func (lp *master) reduced(c *column) float64 {
	s := c.cost
	for i, a := range c.a {
		if a != 0 {
			s -= float64(a) * lp.y[i]
		}
	}
	lp.work += lp.m
	return s
}

// enter pivots column j (j ≥ 0 a pattern, j < 0 the surplus of shape -1-j)
// into the basis. It returns false when the column is unbounded (never for
// a pattern: every pattern covers a positive demand).
func (lp *master) enter(j int) bool {
	m := lp.m
	d := make([]float64, m)
	for r := range m {
		s := 0.0
		if j >= 0 {
			for i, a := range lp.cols[j].a {
				if a != 0 {
					s += lp.binv[r*m+i] * float64(a)
				}
			}
		} else {
			s = -lp.binv[r*m+(-1-j)]
		}
		d[r] = s
	}
	row, best := -1, math.Inf(1)
	for r := range m {
		if d[r] > eps {
			ratio := lp.xb[r] / d[r]
			if ratio < best-1e-12 || ratio <= best+1e-12 && row >= 0 && lp.basis[r] < lp.basis[row] {
				row, best = r, ratio
			}
		}
	}
	lp.work += 2 * m * m
	if row < 0 {
		return false
	}
	piv := d[row]
	for k := range m {
		lp.binv[row*m+k] /= piv
	}
	lp.xb[row] /= piv
	for r := range m {
		if r == row || d[r] == 0 {
			continue
		}
		f := d[r]
		for k := range m {
			lp.binv[r*m+k] -= f * lp.binv[row*m+k]
		}
		lp.xb[r] -= f * lp.xb[row]
		if lp.xb[r] < 0 && lp.xb[r] > -1e-9 {
			lp.xb[r] = 0
		}
	}
	lp.basis[row] = j
	lp.pivs++
	if lp.pivs%64 == 0 {
		lp.refactor()
	}
	lp.duals()
	return true
}

// refactor recomputes B⁻¹ and x_B from the basis columns by Gauss-Jordan
// elimination, which keeps rounding errors from piling up over many pivots.
func (lp *master) refactor() {
	m := lp.m
	a := make([]float64, m*2*m)
	for r := range m {
		// Column r of B is basis[r]; row i of B is entry i of each column.
		j := lp.basis[r]
		for i := range m {
			v := 0.0
			if j >= 0 {
				v = float64(lp.cols[j].a[i])
			} else if -1-j == i {
				v = -1
			}
			a[i*2*m+r] = v
		}
	}
	for i := range m {
		a[i*2*m+m+i] = 1
	}
	for c := range m {
		p := -1
		for r := c; r < m; r++ {
			if p < 0 || math.Abs(a[r*2*m+c]) > math.Abs(a[p*2*m+c]) {
				p = r
			}
		}
		if p < 0 || math.Abs(a[p*2*m+c]) < 1e-12 {
			return // singular: keep the product form
		}
		if p != c {
			for k := range 2 * m {
				a[p*2*m+k], a[c*2*m+k] = a[c*2*m+k], a[p*2*m+k]
			}
		}
		piv := a[c*2*m+c]
		for k := range 2 * m {
			a[c*2*m+k] /= piv
		}
		for r := range m {
			if r != c && a[r*2*m+c] != 0 {
				f := a[r*2*m+c]
				for k := range 2 * m {
					a[r*2*m+k] -= f * a[c*2*m+k]
				}
			}
		}
	}
	for r := range m {
		copy(lp.binv[r*m:(r+1)*m], a[r*2*m+m:(r+1)*2*m])
		s := 0.0
		for i := range m {
			s += lp.binv[r*m+i] * lp.n[i]
		}
		lp.xb[r] = max(s, 0)
	}
	lp.work += 4 * m * m * m
}

// improve pivots while some surplus or pooled column has a negative reduced
// cost, at most limit pivots; it reports whether it pivoted at all.
func (lp *master) improve(limit int) bool {
	moved := false
	for range limit {
		best, bestRC := 0, 0.0
		found := false
		for i := range lp.m {
			if lp.y[i] < -eps {
				if !found || lp.y[i] < bestRC {
					best, bestRC, found = -1-i, lp.y[i], true
				}
			}
		}
		for j := range lp.cols {
			c := &lp.cols[j]
			rc := lp.reduced(c)
			if rc < -eps*max(1, c.cost) && (!found || rc < bestRC) {
				best, bestRC, found = j, rc, true
			}
		}
		if !found || !lp.enter(best) {
			return moved
		}
		moved = true
	}
	return moved
}

// objective returns Σ cost_B x_B.
func (lp *master) objective() float64 {
	s := 0.0
	for r, j := range lp.basis {
		s += lp.colCost(j) * lp.xb[r]
	}
	return s
}

// lpMax returns the optimum of: maximize c·x subject to A x ≤ b, x ≥ 0,
// for b ≥ 0 (so x = 0 is feasible), by the dense tableau simplex with
// Bland's rule (no cycling). A is rows × len(c), row-major. It is meant for
// small problems: the LP relaxation of one node's knapsack. It returns
// +Inf when the LP is unbounded.
func lpMax(a []float64, b, c []float64) float64 {
	rows, n := len(b), len(c)
	w := n + rows + 1 // columns: x, slacks, rhs
	t := make([]float64, (rows+1)*w)
	for r := range rows {
		copy(t[r*w:r*w+n], a[r*n:(r+1)*n])
		t[r*w+n+r] = 1
		t[r*w+w-1] = b[r]
	}
	obj := t[rows*w : (rows+1)*w]
	for j := range n {
		obj[j] = -c[j]
	}
	for iter := 0; iter < 50*(rows+n); iter++ {
		col := -1
		for j := range w - 1 {
			if obj[j] < -1e-12 {
				col = j // Bland: the first improving column
				break
			}
		}
		if col < 0 {
			return obj[w-1]
		}
		row, best := -1, math.Inf(1)
		for r := range rows {
			if v := t[r*w+col]; v > 1e-12 {
				if q := t[r*w+w-1] / v; q < best-1e-15 {
					row, best = r, q
				}
			}
		}
		if row < 0 {
			return math.Inf(1)
		}
		p := t[row*w+col]
		for j := range w {
			t[row*w+j] /= p
		}
		for r := range rows + 1 {
			if r == row {
				continue
			}
			if f := t[r*w+col]; f != 0 {
				for j := range w {
					t[r*w+j] -= f * t[row*w+j]
				}
			}
		}
	}
	return math.Inf(1) // iteration cap: no bound proven
}
