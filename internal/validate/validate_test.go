package validate

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestNumbers(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{NonNegative("count", -1), "count: must not be negative, got -1"},
		{NonNegative("count", 0), ""},
		{Between("replicas", 0, 1, 10), "replicas: must be between 1 and 10, got 0"},
		{Finite("x", nan), "x: must be a finite number, got NaN"},
		{Finite("x", -inf), "x: must be a finite number, got -Inf"},
		{Amount("price", nan), "price: must be a finite non-negative number, got NaN"},
		{Amount("price", inf), "price: must be a finite non-negative number, got +Inf"},
		{Amount("price", -0.5), "price: must be a finite non-negative number, got -0.5"},
		{Amount("price", 0.5), ""},
		{Probability("p", nan), "p: must be within [0, 1], got NaN"},
		{Probability("p", 1.5), "p: must be within [0, 1], got 1.5"},
		{Probability("p", 1), ""},
		{Cores("cpus", nan), "cpus: must be a finite number, got NaN"},
		{Cores("cpus", 1e300), "cpus: must be at most 1048576 cores, got 1e+300"},
		{Cores("cpus", 0.5), ""},
		{MemoryMB("memory", inf), "memory: must be a finite number, got +Inf"},
		{MemoryMB("memory", 1<<41), "memory: must be at most 1099511627776 MB"},
		{MemoryMB("memory", -1), "memory: must not be negative, got -1"},
		{GPUs("gpus", 1<<40), "gpus: must be at most 1048576 GPUs"},
		{Empty([]byte(" \n\t")), "is empty"},
		{Empty([]byte("{}")), ""},
	} {
		got := ""
		if tt.err != nil {
			got = tt.err.Error()
		}
		if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestYAMLNumbers(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"pools:\n  - offerings:\n      - {price: 1}\n      - {price: .nan}\n", "pools[0].offerings[1].price: must be a finite number, got .nan"},
		{"a: {b: -.inf}", "a.b: must be a finite number, got -.inf"},
		{".inf", "(document): must be a finite number, got .inf"},
		{"a: [1, 2.5, x]", ""},
		{"a: [", ""}, // left to the parser
	} {
		err := YAMLNumbers([]byte(tt.in))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("YAMLNumbers(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestArithmeticSaturates checks Add, Mul and CeilDiv against exact
// big-integer arithmetic: the result is exact when it fits and the bound of
// its sign when it does not.
func TestArithmeticSaturates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	edge := []int{0, 1, -1, 2, math.MaxInt, math.MinInt, math.MaxInt - 1, math.MinInt + 1, 1 << 31, 1 << 32, -(1 << 32), 3037000499, 3037000500}
	val := func() int {
		if rng.IntN(3) == 0 {
			return edge[rng.IntN(len(edge))]
		}
		return int(rng.Uint64() >> rng.UintN(64))
	}
	sat := func(b *big.Int) int {
		switch {
		case b.Cmp(big.NewInt(math.MaxInt64)) > 0:
			return math.MaxInt
		case b.Cmp(big.NewInt(math.MinInt64)) < 0:
			return math.MinInt
		}
		return int(b.Int64())
	}
	for range 200000 {
		a, b := val(), val()
		if got, want := Add(a, b), sat(new(big.Int).Add(big.NewInt(int64(a)), big.NewInt(int64(b)))); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", a, b, got, want)
		}
		if got, want := Mul(a, b), sat(new(big.Int).Mul(big.NewInt(int64(a)), big.NewInt(int64(b)))); got != want {
			t.Fatalf("Mul(%d, %d) = %d, want %d", a, b, got, want)
		}
		if a > 0 && b > 0 {
			q := new(big.Int).Add(big.NewInt(int64(a)), big.NewInt(int64(b-1)))
			if got, want := CeilDiv(a, b), int(q.Div(q, big.NewInt(int64(b))).Int64()); got != want {
				t.Fatalf("CeilDiv(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
	for range 100000 {
		a, b, c := int64(val()), int64(val()), int64(val())
		if a <= 0 || b <= 0 || c <= 0 {
			continue
		}
		x := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		x.Add(x, big.NewInt(c-1)).Div(x, big.NewInt(c))
		if got, want := MulDivCeil(a, b, c), int64(sat(x)); got != want {
			t.Fatalf("MulDivCeil(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
	}
	if Add32(math.MaxInt32, 1) != math.MaxInt32 || Add32(math.MinInt32, -1) != math.MinInt32 || Add32(2, 3) != 5 {
		t.Fatal("Add32 does not saturate")
	}
	if Sum(math.MaxInt, 5, 7) != math.MaxInt || Sum(1, 2, 3) != 6 {
		t.Fatal("Sum does not saturate")
	}
}
