package binpack

import (
	"slices"

	"github.com/tide-project/tide/internal/capacity"
)

// dims maps resources onto fixed-length int64 vectors, so that the packing
// loops compare slices instead of maps: index 0 is millicores, 1 memory,
// 2 GPUs, and 3.. the extended resource names in sorted order.
type dims struct {
	ext    []string
	sorted bool
}

// add registers the extended names r asks for (non-zero amounts only).
func (d *dims) add(r capacity.Resources) {
	for k, v := range r.Extended {
		if v != 0 && !slices.Contains(d.ext, k) {
			d.ext = append(d.ext, k)
			d.sorted = false
		}
	}
}

// n returns the vector length.
func (d *dims) n() int { return 3 + len(d.ext) }

// vec writes r into dst (len n()); names r lacks are zero, names d lacks are dropped.
func (d *dims) vec(r capacity.Resources, dst []int64) {
	if !d.sorted {
		slices.Sort(d.ext)
		d.sorted = true
	}
	dst[0], dst[1], dst[2] = r.MilliCPU, r.Memory, r.GPUs
	for i, k := range d.ext {
		dst[3+i] = r.Extended[k]
	}
}

// resources turns a vector back into Resources (Extended only when non-zero).
func (d *dims) resources(v []int64) capacity.Resources {
	r := capacity.Resources{MilliCPU: v[0], Memory: v[1], GPUs: v[2]}
	for i, k := range d.ext {
		if v[3+i] != 0 {
			if r.Extended == nil {
				r.Extended = make(map[string]int64, len(d.ext)-i)
			}
			r.Extended[k] = v[3+i]
		}
	}
	return r
}

// fits reports whether req ≤ avail in every dimension.
func fits(req, avail []int64) bool {
	avail = avail[:len(req)]
	for i, r := range req {
		if r > avail[i] {
			return false
		}
	}
	return true
}

// fitCount returns how many items requesting req fit in avail, at most limit.
func fitCount(avail, req []int64, limit int) int {
	n := int64(limit)
	for i, r := range req {
		if r > 0 {
			if q := avail[i] / r; q < n {
				n = q
			}
		}
	}
	return int(max(n, 0))
}

// take subtracts k × req from avail.
func take(avail, req []int64, k int) {
	kk := int64(k)
	for i, r := range req {
		avail[i] -= kk * r
	}
}
