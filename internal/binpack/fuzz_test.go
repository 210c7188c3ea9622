package binpack

import (
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// byteReader hands out small values from fuzz input, zero once exhausted.
type byteReader struct{ b []byte }

func (r *byteReader) next() int64 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return int64(v)
}

// signed maps a byte to -8..247 so that negative amounts occur too.
func (r *byteReader) signed() int64 { return r.next() - 8 }

func (r *byteReader) shape() capacity.Resources {
	res := capacity.Resources{MilliCPU: r.signed(), Memory: r.signed(), GPUs: r.next() % 4}
	if x := r.next(); x%3 == 0 {
		res.Extended = map[string]int64{"x": int64(x % 5)}
	}
	return res
}

// FuzzPack checks Pack's invariants (checkPack) on arbitrary small inputs:
// capacity respected everywhere, every item accounted for, unplaced only when
// nothing fits or the cap is hit, cost consistent.
func FuzzPack(f *testing.F) {
	f.Add([]byte{3, 2, 100, 100, 0, 1, 5, 1, 10, 20, 0, 1, 50, 60, 0, 0, 9, 255})
	f.Add([]byte{1, 1, 200, 200, 4, 3, 7, 2, 1, 0, 1, 1, 0, 255, 1, 2})
	f.Add([]byte{4, 3, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{b: data}
		nOff := int(r.next() % 5)
		nGroups := int(r.next() % 6)
		var offs []capacity.Offering
		for range nOff {
			o := capacity.Offering{Type: "o", Resources: r.shape(), PricePerHour: float64(r.next())}
			if r.next()%2 == 0 {
				o.InterruptionProbability, o.InterruptionPenalty = float64(r.next())/255, float64(r.next())
			}
			offs = append(offs, o)
		}
		var groups []capacity.Pending
		for range nGroups {
			groups = append(groups, capacity.Pending{Requests: r.shape(), Count: int(r.signed() % 40)})
		}
		var free []capacity.Resources
		for range int(r.next() % 3) {
			free = append(free, r.shape())
		}
		maxNew := int(r.next()%8) - 1
		res := Pack(groups, offs, WithFree(free), WithMaxNew(maxNew))
		if err := checkPack(groups, offs, free, maxNew, res); err != nil {
			t.Fatalf("offerings %v groups %v free %v maxNew %d: %v", offs, groups, free, maxNew, err)
		}
	})
}

// FuzzBuy checks Buy's invariants (checkBuy) on arbitrary small inputs,
// with caps, per-offering limits (0: out of capacity), negative and empty
// shapes, huge counts and tiny work budgets: every node fits, every item is
// accounted for, unplaced only when nothing available fits or a cap is hit,
// the bound never above the cost, and never dearer than Pack when Pack can
// run on the same input.
func FuzzBuy(f *testing.F) {
	f.Add([]byte{3, 2, 100, 100, 0, 1, 5, 1, 10, 20, 0, 1, 50, 60, 0, 0, 9, 255})
	f.Add([]byte{1, 1, 200, 200, 4, 3, 7, 2, 1, 0, 1, 1, 0, 255, 1, 2})
	f.Add([]byte{4, 3, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{b: data}
		nOff := int(r.next() % 5)
		nGroups := int(r.next() % 6)
		var offs []capacity.Offering
		for range nOff {
			o := capacity.Offering{Type: "o", Resources: r.shape(), PricePerHour: float64(r.next())}
			if r.next()%2 == 0 {
				o.InterruptionProbability, o.InterruptionPenalty = float64(r.next())/255, float64(r.next())
			}
			offs = append(offs, o)
		}
		var groups []capacity.Pending
		for range nGroups {
			count := int(r.signed() % 40)
			if r.next()%7 == 0 {
				count *= 1 << 40 // huge counts: arithmetic, not expanded
			}
			groups = append(groups, capacity.Pending{Requests: r.shape(), Count: count})
		}
		opts := BuyOptions{MaxNodes: int(r.next()%8) - 1, Work: int(r.next()) * 1000}
		for range int(r.next() % 3) {
			opts.Free = append(opts.Free, r.shape())
		}
		if r.next()%2 == 0 {
			for range offs {
				opts.Limit = append(opts.Limit, int(r.next()%4)-1)
			}
		}
		p := Buy(groups, offs, opts)
		if err := checkBuy(groups, offs, opts, p); err != nil {
			t.Fatalf("offerings %v groups %v opts %+v: %v", offs, groups, opts, err)
		}
		if opts.Limit == nil && opts.MaxNodes < 0 && p.UnplacedTotal == 0 {
			small := true
			for _, g := range groups {
				small = small && g.Count < 1000
			}
			if small {
				res := Pack(groups, offs, WithFree(opts.Free))
				if res.UnplacedTotal == 0 && p.Cost > res.Cost*(1+1e-9)+1e-9 {
					t.Fatalf("offerings %v groups %v: Buy $%v dearer than Pack $%v", offs, groups, p.Cost, res.Cost)
				}
			}
		}
	})
}
