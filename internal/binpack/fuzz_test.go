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
