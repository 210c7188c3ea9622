package httpapi

import (
	"math"
	"strings"
	"testing"
)

// TestResourceSpecValidate: the head refuses what cannot be meant before
// converting units, so memory_mb = 2^44 is refused instead of wrapping to 0
// bytes (mem << 20), and cpu_cores = 1e308 instead of converting to garbage.
func TestResourceSpecValidate(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, tt := range []struct {
		spec ResourceSpec
		want string
	}{
		{ResourceSpec{MemoryMB: i(1 << 44)}, "resource_requirements.memory_mb: must be at most 1099511627776 MB"},
		{ResourceSpec{MemoryMB: i(-1)}, "resource_requirements.memory_mb: must not be negative"},
		{ResourceSpec{CPUCores: f(1e308)}, "resource_requirements.cpu_cores: must be at most 1048576 cores"},
		{ResourceSpec{CPUCores: f(math.NaN())}, "resource_requirements.cpu_cores: must be a finite number"},
		{ResourceSpec{GPUUnits: i(math.MaxInt64)}, "resource_requirements.gpu_units: must be at most 1048576 GPUs"},
		{ResourceSpec{CPUCores: f(0.5), GPUUnits: i(8), MemoryMB: i(1 << 20)}, ""},
	} {
		err := tt.spec.Validate("resource_requirements")
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.spec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate = %v, want %q", err, tt.want)
		}
	}
	spec := ResourceSpec{CPUCores: f(1 << 20), MemoryMB: i(1 << 40), GPUUnits: i(1 << 20)}
	if err := spec.Validate("r"); err != nil {
		t.Fatal(err)
	}
	if r := spec.ToResources(1, 0, 512); r.Memory <= 0 || r.MilliCPU <= 0 || r.GPUs <= 0 {
		t.Fatalf("the largest valid spec converts to %+v", r)
	}
	if (*ResourceSpec)(nil).Validate("r") != nil {
		t.Fatal("a missing spec takes the defaults")
	}
}
