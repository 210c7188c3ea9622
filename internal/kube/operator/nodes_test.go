package operator

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/workload"
	"github.com/tide-project/tide/sdk/provider"
)

// cloud is a provider whose machines' Nodes carry its cloud's providerID
// (instances: machine id → instance id), as EC2's do.
type cloud struct {
	provider.Provider
	instances map[string]string
	deleted   []string
}

func (c *cloud) MachineOfProviderID(pid string) (string, bool) {
	for id, iid := range c.instances {
		if pid == "aws:///us-east-1a/"+iid {
			return id, true
		}
	}
	return "", false
}

func (c *cloud) Delete(_ context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	c.deleted = append(c.deleted, req.MachineID)
	return provider.Ack{MachineID: req.MachineID, State: provider.Deleting}, nil
}

func (c *cloud) Get(_ context.Context, id string) (provider.Machine, error) {
	return provider.Machine{ID: id, State: provider.Configured}, nil
}

func testNode(name, pool, providerID string, labels map[string]string) *corev1.Node {
	l := map[string]string{demand.PoolLabel: pool}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}}}
}

// TestNodeIndexFindsNodes: a machine's Node is found by the machine label,
// by a providerID tide sets (tide://, kwok://) or one its cloud sets
// (aws:///<zone>/<instance>, resolved by the provider), else by its default
// name; the label wins over the providerID, a Node being deleted loses to
// one that is not, and the index maps Node names back to machines.
func TestNodeIndexFindsNodes(t *testing.T) {
	prov := &cloud{instances: map[string]string{"p-3": "i-0abc", "p-6": "i-0def"}}
	x := newNodeIndex(func(id string) string { return id }, prov)
	gone := testNode("ip-10-0-0-0.ec2.internal", "p", "", map[string]string{MachineLabel: "p-7"})
	gone.DeletionTimestamp = &metav1.Time{}
	x.refresh([]*corev1.Node{
		testNode("ip-10-0-0-1.ec2.internal", "p", "aws:///us-east-1a/i-0def", map[string]string{MachineLabel: "p-1"}),
		testNode("p-2", "p", "tide://netns/p-2", nil),
		testNode("ip-10-0-0-3.ec2.internal", "p", "aws:///us-east-1a/i-0abc", nil),
		testNode("kwok-p-5", "p", "kwok://p-5", nil),
		testNode("ip-10-0-0-8.ec2.internal", "p", "aws:///us-east-1a/i-0fff", nil), // no machine of this pool
		gone,
		testNode("ip-10-0-0-10.ec2.internal", "p", "", map[string]string{MachineLabel: "p-7"}),
	})
	for _, c := range []struct{ machine, node string }{
		{"p-1", "ip-10-0-0-1.ec2.internal"}, // label (its providerID names p-6: the label wins)
		{"p-2", "p-2"},                      // tide://
		{"p-3", "ip-10-0-0-3.ec2.internal"}, // aws:/// through the provider
		{"p-4", "p-4"},                      // nothing: the default name
		{"p-5", "kwok-p-5"},                 // kwok://
		{"p-6", "p-6"},                      // its instance's Node says it is p-1's
		{"p-7", "ip-10-0-0-10.ec2.internal"},
	} {
		if got := x.Name(c.machine); got != c.node {
			t.Errorf("Name(%s) = %s, want %s", c.machine, got, c.node)
		}
	}
	if id, ok := x.Machine("ip-10-0-0-3.ec2.internal"); !ok || id != "p-3" {
		t.Errorf("Machine(ip-10-0-0-3.ec2.internal) = %s %v, want p-3", id, ok)
	}
	if id, ok := x.Machine("ip-10-0-0-0.ec2.internal"); ok {
		t.Errorf("Machine of the Node being deleted that lost p-7 = %s", id)
	}
	if id, ok := x.Machine("ip-10-0-0-8.ec2.internal"); ok {
		t.Errorf("Machine of a Node of no machine = %s", id)
	}
	if validLabelValue("pool-with-a-very-long-name-that-goes-on-and-on-and-on-and-on-0-1234") {
		t.Error("a 67-character machine id passes as a label value")
	}
	if l := machineLabels(map[string]string{}, "p-1"); l[MachineLabel] != "p-1" {
		t.Errorf("machineLabels: %v", l)
	}
}

// TestEKSStyleNodeDrainedAndDeleted: a machine whose Node is named after
// its instance's private DNS name and carries the cloud's providerID only
// (an EKS Node; no machine label) is, through the runner's one lookup,
// registered and Ready for the join check, inspected with its pod,
// cordoned, drained through the Eviction API (the pod listed by the Node's
// real name) and deleted with its machine; a Node that registered since
// the last refresh with the machine label is found at Delete without a
// refresh.
func TestEKSStyleNodeDrainedAndDeleted(t *testing.T) {
	ctx := context.Background()
	const dns = "ip-10-0-1-23.ec2.internal"
	node := testNode(dns, "eks", "aws:///us-east-1a/i-0123", nil)
	zero := int64(0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: dns, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	kc := kfake.NewClientset(node.DeepCopy(), pod)
	var selectors []string
	kc.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(k8stesting.ListActionImpl).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	var evicted []string
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		evicted = append(evicted, name)
		return true, nil, kc.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), name)
	})
	cache := crfake.NewClientBuilder().WithObjects(node.DeepCopy()).Build()
	prov := &cloud{instances: map[string]string{"eks-0-1": "i-0123", "eks-1-2": "i-0456"}}
	o := &Operator{cfg: Config{Client: cache, API: kubeapi.NewClientset(kc)}}
	r := &runner{name: "eks", joined: map[string]bool{}, nodes: newNodeIndex(func(id string) string { return id }, prov)}
	r.nodeName = r.nodes.Name
	j := joining{Provider: prov, o: o, r: r, provType: "aws"}
	work := workload.New(o.cfg.API, r.nodeName, nil)
	m := controller.Node{Pool: "eks", MachineID: "eks-0-1"}

	// Before the index knows the Node, the machine is not registered.
	info, err := work.Inspect(ctx, []controller.Node{m})
	if err != nil || info["eks-0-1"].Registered {
		t.Fatalf("before the refresh: %+v %v, want not registered", info, err)
	}
	r.nodes.refresh([]*corev1.Node{node})
	if got, err := j.Get(ctx, "eks-0-1"); err != nil || got.State != provider.Configured {
		t.Fatalf("join check: %+v %v, want configured (its Node is Ready)", got, err)
	}
	info, err = work.Inspect(ctx, []controller.Node{m})
	if in := info["eks-0-1"]; err != nil || !in.Registered || in.Unhealthy != "" || in.Used.MilliCPU != 500 {
		t.Fatalf("inspect: %+v %v, want registered, healthy, 500m used", info, err)
	}
	if err := work.Cordon(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n, err := kc.CoreV1().Nodes().Get(ctx, dns, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("cordon: %v %v, want %s unschedulable", n, err, dns)
	}
	if busy, err := work.Busy(ctx, m); err != nil || !busy {
		t.Fatalf("first drain poll: busy %v %v, want busy while evicting", busy, err)
	}
	if busy, err := work.Busy(ctx, m); err != nil || busy {
		t.Fatalf("second drain poll: busy %v %v, want drained", busy, err)
	}
	if !slices.Equal(evicted, []string{"web-1"}) {
		t.Errorf("evicted %v, want [web-1]", evicted)
	}
	for _, s := range selectors {
		if s != "spec.nodeName="+dns {
			t.Errorf("pods listed with %q, want spec.nodeName=%s", s, dns)
		}
	}
	f := provider.Fence{Controller: "c", Epoch: 1}
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "eks", MachineID: "eks-0-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Nodes().Get(ctx, dns, metav1.GetOptions{}); err == nil {
		t.Errorf("Node %s survived its machine's Delete", dns)
	}

	// A Node that registered after the last refresh, found by its label.
	const dns2 = "ip-10-0-2-7.ec2.internal"
	n2 := testNode(dns2, "eks", "", map[string]string{MachineLabel: "eks-1-2"})
	if _, err := kc.CoreV1().Nodes().Create(ctx, n2.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Create(ctx, n2.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "eks", MachineID: "eks-1-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Nodes().Get(ctx, dns2, metav1.GetOptions{}); err == nil {
		t.Errorf("Node %s survived its machine's Delete", dns2)
	}
	if !slices.Equal(prov.deleted, []string{"eks-0-1", "eks-1-2"}) {
		t.Errorf("machines deleted %v", prov.deleted)
	}
}
