package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// billionSnapshot is 10^9 pending instances in ten shapes on a pool of 100
// machines (50 busy), with a controller view.
func billionSnapshot() Snapshot {
	s := Snapshot{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Desired: 100, Controller: &Controller{}}
	for i := range 10 {
		s.Pending = append(s.Pending, capacity.Pending{Count: 100_000_000,
			Requests: capacity.Resources{MilliCPU: int64(250 * (i + 1)), Memory: int64(i+1) << 29, GPUs: int64(i % 3)}})
	}
	for i := range 100 {
		m := Machine{Ordinal: i, State: MachineReady}
		if i%2 == 0 {
			m.Running = []capacity.Instance{{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}}}
		}
		s.Controller.Machines = append(s.Controller.Machines, m)
	}
	return s
}

// BenchmarkDecideBillionPending runs a whole tide decide (policy, then one
// step of the reconciler on 100 machines) over 10^9 pending instances in
// ten shapes (docs/benchmarks.md).
func BenchmarkDecideBillionPending(b *testing.B) {
	nodes := capacity.Elastic(0, 1000)
	offs := []capacity.Offering{{Type: "g8", PricePerHour: 1, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, GPUs: 8}}}
	for _, name := range []string{policy.Skyward, policy.TargetTracking, policy.Utilization} {
		b.Run(name, func(b *testing.B) {
			in := Input{Pool: "p", Policy: policy.Config{Policy: name, Nodes: nodes, Offerings: offs, SlotsPerNode: 2},
				Reconcile: reconcile.Config{Nodes: nodes, ProtectFirstNode: true}, Interval: 15 * time.Second}
			s := billionSnapshot()
			b.ReportAllocs()
			for b.Loop() {
				res, err := Decide(in, s)
				if err != nil || res.Desired != 1000 {
					b.Fatal(fmt.Sprint(res.Desired, err))
				}
			}
		})
	}
}
