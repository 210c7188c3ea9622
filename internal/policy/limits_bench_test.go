package policy

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

// BenchmarkLimitsGangs decides 10,000 pending instances in 100 gangs at 10
// priorities where a tenth of them fits: under a GPU limit (the run of
// gangs that fits within the limit is searched, and each gang checked to
// fit an empty pool), and, for comparison, under the pool's max alone.
func BenchmarkLimitsGangs(b *testing.B) {
	gpus := int64(1000)
	for _, bc := range []struct {
		name string
		max  int
		lim  Limits
	}{{"limits", 10000, Limits{GPUs: &gpus}}, {"max", 125, Limits{}}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := tideConfig(b, capacity.Elastic(0, bc.max), []capacity.Offering{g8, g2}, func(c *Config) { c.Limits = bc.lim })
			p, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			in := Input{Now: tideT0, State: waited, Held: &Held{}}
			for g := range 100 {
				in.Pressure.Pending = append(in.Pressure.Pending, capacity.Pending{Requests: gpu([]int64{1, 2, 4, 8}[g%4]), Count: 100,
					Gang: fmt.Sprintf("g%03d", g), Priority: g % 10})
			}
			if d := p.Decide(in); d.Desired == 0 || d.Desired >= 10000 {
				b.Fatalf("desired %d (%s)", d.Desired, d.Reason.String())
			}
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			for b.Loop() {
				p.Decide(in)
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			// CPU time is the figure on a shared machine (see BenchmarkDecideGangs).
			cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
