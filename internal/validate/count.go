package validate

import (
	"math"
	"math/bits"
)

// Add returns a + b for counts (a, b ≥ 0), saturated at math.MaxInt.
func Add(a, b int) int {
	if s := a + b; s >= a == (b >= 0) {
		return s
	}
	if b > 0 {
		return math.MaxInt
	}
	return math.MinInt
}

// Sum returns the saturated sum of the counts (see Add).
func Sum(vs ...int) int {
	s := 0
	for _, v := range vs {
		s = Add(s, v)
	}
	return s
}

// Mul returns a × b for counts (a, b ≥ 0), saturated at math.MaxInt; a
// negative operand gives the exact product or saturates at the bound of its
// sign.
func Mul(a, b int) int {
	if a == 0 || b == 0 {
		return 0
	}
	neg := (a < 0) != (b < 0)
	hi, lo := bits.Mul64(absU(a), absU(b))
	if hi != 0 || (!neg && lo > math.MaxInt) || (neg && lo > 1<<63) {
		if neg {
			return math.MinInt
		}
		return math.MaxInt
	}
	if neg {
		return int(-lo)
	}
	return int(lo)
}

// Add64 is Add for int64.
func Add64(a, b int64) int64 { return int64(Add(int(a), int(b))) }

// Mul64 is Mul for int64.
func Mul64(a, b int64) int64 { return int64(Mul(int(a), int(b))) }

// CeilDiv returns ⌈a / b⌉ for a ≥ 0 and b > 0 without overflow (0 when b ≤ 0
// or a ≤ 0).
func CeilDiv(a, b int) int {
	if a <= 0 || b <= 0 {
		return 0
	}
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

func absU(v int) uint64 {
	if v < 0 {
		return uint64(-(v + 1)) + 1
	}
	return uint64(v)
}

// Add32 returns a + b saturated at the bounds of int32.
func Add32(a, b int32) int32 {
	return int32(min(max(int64(a)+int64(b), math.MinInt32), math.MaxInt32))
}

// MulDivCeil returns ⌈a × b / c⌉ for a, b ≥ 0 and c > 0, computed exactly
// in 128 bits and saturated at math.MaxInt64 (0 when an operand is out of
// its domain).
func MulDivCeil(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		if q == math.MaxUint64 {
			return math.MaxInt64
		}
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
