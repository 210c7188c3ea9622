package controller

import (
	"testing"

	"github.com/tide-project/tide/internal/reconcile"
)

func TestParseMachineID(t *testing.T) {
	for _, id := range []reconcile.NodeID{0, 7, 123} {
		for _, serial := range []uint64{1, 99} {
			got, ok := ParseMachineID("gpu-a", machineID("gpu-a", id, serial))
			if !ok || got != id {
				t.Errorf("ParseMachineID(machineID(%d, %d)) = %d, %v", id, serial, got, ok)
			}
		}
	}
	for _, bad := range []string{"gpu-a", "gpu-a-", "gpu-a-1", "gpu-a-x-1", "gpu-a-1-x", "gpu-a-01-1", "gpu-a--1-1", "cpu-1-1", "gpu-a-1-2-3"} {
		if _, ok := ParseMachineID("gpu-a", bad); ok {
			t.Errorf("ParseMachineID(%q) accepted", bad)
		}
	}
}

// Every test's controller (this package's and controller_test's) checks on
// every pass that the node list it kept is the one a rebuild from every
// node gives (publish).
func init() { checkPublish = true }
