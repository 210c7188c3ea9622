package workload

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubeapi"
)

// fakeAPI serves Nodes and pods from maps.
type fakeAPI struct {
	nodes map[string]*corev1.Node
	pods  map[string][]corev1.Pod // by node name
}

func (f *fakeAPI) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	if n, ok := f.nodes[name]; ok {
		return n.DeepCopy(), nil
	}
	return nil, kubeapi.ErrNotFound
}
func (f *fakeAPI) UpdateNode(_ context.Context, n *corev1.Node) (*corev1.Node, error) { return n, nil }
func (f *fakeAPI) ListPods(_ context.Context, sel string) ([]corev1.Pod, error) {
	name := strings.TrimPrefix(sel, "spec.nodeName=")
	out := make([]corev1.Pod, len(f.pods[name]))
	for i, p := range f.pods[name] {
		p.Spec.NodeName = name
		out[i] = p
	}
	return out, nil
}
func (f *fakeAPI) Evict(context.Context, string, string) error { return nil }
func (f *fakeAPI) ListPDBs(context.Context) ([]policyv1.PodDisruptionBudget, error) {
	return nil, nil
}

func node(name string, conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: conds,
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
}

func pod(name string, cpu string, annotations map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// TestInspect: a Node registers once it exists; Ready not True, or a
// condition the pool names, is unhealthy; a do-not-disrupt pod blocks; the
// pods' requests are the node's used resources.
func TestInspect(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	api := &fakeAPI{nodes: map[string]*corev1.Node{
		"ok":   node("ok", ready),
		"down": node("down", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}),
		"disk": node("disk", ready, corev1.NodeCondition{Type: "DiskPressure", Status: corev1.ConditionTrue, Reason: "KubeletHasDiskPressure"}),
		"mem":  node("mem", ready, corev1.NodeCondition{Type: "MemoryPressure", Status: corev1.ConditionTrue}),
	}, pods: map[string][]corev1.Pod{
		"ok": {pod("p1", "1", nil), pod("p2", "500m", map[string]string{demand.DoNotDisrupt: "true"})},
	}}
	w := New(api, func(id string) string { return id }, nil).RepairOn("DiskPressure")
	var nodes []controller.Node
	for _, id := range []string{"ok", "down", "disk", "mem", "gone"} {
		nodes = append(nodes, controller.Node{Pool: "p", MachineID: id})
	}
	got, err := w.Inspect(context.Background(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["gone"]; ok {
		t.Errorf("a machine without a Node is registered: %+v", got["gone"])
	}
	if i := got["ok"]; !i.Registered || i.Unhealthy != "" || !strings.Contains(i.Blocked, "do-not-disrupt") || i.Used.MilliCPU != 1500 {
		t.Errorf("ok: %+v", i)
	}
	if i := got["down"]; !i.Registered || !strings.Contains(i.Unhealthy, "NotReady") {
		t.Errorf("down: %+v", i)
	}
	if i := got["disk"]; !strings.Contains(i.Unhealthy, "DiskPressure=True") {
		t.Errorf("disk: %+v", i)
	}
	if i := got["mem"]; i.Unhealthy != "" {
		t.Errorf("mem: a condition the pool does not name counts: %+v", i)
	}
}
