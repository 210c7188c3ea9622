package demand

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func inGang(name, size string) podOpt {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{GangAnnotation: name}
		if size != "" {
			p.Annotations[GangSizeAnnotation] = size
		}
	}
}

func priority(n int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &n } }

// A gang's unschedulable pods are one demand of its declared size (members
// not yet marked unschedulable included), with its priority; it takes no
// room unless all of it fits; plain pods keep their priority.
func TestComputeGangsAndPriorities(t *testing.T) {
	pools := []Pool{{Name: "gpu"}}
	g8 := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	four := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "4")
	nodes := []*corev1.Node{node("gpu-0", "gpu", 0, g8)}
	pods := []*corev1.Pod{
		pod("t-0", four, inGang("train", "4"), priority(100)),
		pod("t-1", four, inGang("train", "4"), priority(100)),
		pod("t-2", four, inGang("train", "4"), priority(100)), // t-3 not created or not tried yet
		pod("lone", four, priority(-10)),
	}
	rep := Compute(pools, nodes, pods)
	pr := rep.Pressure["gpu"]
	var gang, lone *int
	for i := range pr.Pending {
		p := &pr.Pending[i]
		switch {
		case p.Gang == "default/train" && p.Priority == 100:
			gang = &p.Count
		case p.Gang == "" && p.Priority == -10:
			lone = &p.Count
		default:
			t.Fatalf("unexpected pending %+v", p)
		}
	}
	// The gang did not take gpu-0's room (8 GPUs for 16): the lone pod did.
	if gang == nil || *gang != 4 || lone != nil {
		t.Fatalf("pending %+v: want the gang's 4 pods as one demand and the lone pod placed in the room", pr.Pending)
	}
	if len(rep.Pods["gpu"]) != 3 {
		t.Fatalf("pods counted as demand: %v", rep.Pods["gpu"])
	}
	// A gang that fits the room whole is about to be scheduled: no demand.
	small := []*corev1.Pod{pod("s-0", four, inGang("pair", "")), pod("s-1", four, inGang("pair", ""))}
	if pr := Compute(pools, nodes, small).Pressure["gpu"]; len(pr.Pending) != 0 {
		t.Fatalf("pending %+v for a gang that fits", pr.Pending)
	}
	// Bound members count: a gang of 4 with 2 running and 1 unschedulable wants 2.
	two := []*corev1.Pod{pod("b-0", four, inGang("b", "4"), on("gpu-0")), pod("b-1", four, inGang("b", "4"), on("gpu-0")),
		pod("b-2", four, inGang("b", "4"))}
	if pr := Compute(pools, nodes, two).Pressure["gpu"]; len(pr.Pending) != 1 || pr.Pending[0].Count != 2 {
		t.Fatalf("pending %+v, want 2 for the gang's rest", pr.Pending)
	}
}

// A gang's members may differ (a ProvisioningRequest's pod sets): it
// takes room only when every member fits there, else each shape is one
// pending group of the gang, all on one pool.
func TestComputeMixedGang(t *testing.T) {
	pools := []Pool{{Name: "gpu"}}
	g8 := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	four := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "4")
	two := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "2")
	nodes := []*corev1.Node{node("gpu-0", "gpu", 0, g8)}
	fits := []*corev1.Pod{pod("m-0", four, inGang("mix", "")), pod("m-1", two, inGang("mix", "")), pod("m-2", two, inGang("mix", ""))}
	if rep := Compute(pools, nodes, fits); len(rep.Pressure["gpu"].Pending) != 0 || len(rep.Pods["gpu"]) != 0 {
		t.Fatalf("pending %+v for a mixed gang that fits the room", rep.Pressure["gpu"].Pending)
	}
	over := append(fits, pod("m-3", four, inGang("mix", "")))
	rep := Compute(pools, nodes, over)
	pr := rep.Pressure["gpu"]
	got := map[int64]int{}
	for _, p := range pr.Pending {
		if p.Gang != "default/mix" {
			t.Fatalf("pending %+v outside the gang", p)
		}
		got[p.Requests.GPUs] += p.Count
	}
	if len(pr.Pending) != 2 || got[4] != 2 || got[2] != 2 || len(rep.Pods["gpu"]) != 4 {
		t.Fatalf("pending %+v, pods %v: want the gang whole as 2 × 4 GPUs + 2 × 2 GPUs", pr.Pending, rep.Pods["gpu"])
	}
}
