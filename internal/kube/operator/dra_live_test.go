package operator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// draPool is a kwok pool whose nodes each have two devices of DeviceClass
// gpu.example.com (the offering declares them; the test's driver publishes
// them in a ResourceSlice per Node).
const draPool = `{"nodes":{"min":0,"max":10},"provider":{"type":"kwok"},
  "offerings":[{"type":"d2","cpu":"4","memory":"16Gi","extended":{"deviceclass.tide.dev/gpu.example.com":2},"price":1}],
  "node_labels":{"tier":"dra"},"scaling":{"policy":"tide"}}`

// draDriver does what a DRA driver's kubelet plugin does for every Node of
// pool: publishes a ResourceSlice with the Node's two devices of driver
// gpu.example.com. It runs until the test ends.
func (l *live) draDriver(t *testing.T, pool string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := map[string]bool{}
		for ctx.Err() == nil {
			list, err := l.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: demand.PoolLabel + "=" + pool})
			if err == nil {
				for _, n := range list.Items {
					if done[n.Name] {
						continue
					}
					s := &resourcev1beta1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-gpu"}, Spec: resourcev1beta1.ResourceSliceSpec{
						Driver: "gpu.example.com", NodeName: n.Name, Pool: resourcev1beta1.ResourcePool{Name: n.Name, ResourceSliceCount: 1},
						Devices: []resourcev1beta1.Device{{Name: "gpu-0", Basic: &resourcev1beta1.BasicDevice{}}, {Name: "gpu-1", Basic: &resourcev1beta1.BasicDevice{}}}}}
					if _, err := l.cs.ResourceV1beta1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err == nil {
						done[n.Name] = true
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// draPod creates pod name asking for a device through a claim made from
// ResourceClaimTemplate tmpl.
func (l *live) draPod(t *testing.T, name, tmpl string) {
	t.Helper()
	zero := int64(0)
	no := false
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "dra"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"tier": "dra"}, TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: &no,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}},
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	if _, err := l.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLiveDRADeviceCounts: dynamic resource allocation on the real
// apiserver, scheduler and controller manager (resource.k8s.io/v1beta1,
// enabled by feature gate on 1.33) with kwok Nodes. A NodePool's offering
// declares two devices of DeviceClass gpu.example.com a node; three pods
// each claim one device through a ResourceClaimTemplate (an exact count of
// one): tide launches ⌈3/2⌉ = 2 Nodes, not the one their CPU would fit, the
// test's driver publishes each Node's devices, kube-scheduler allocates a
// device to each claim and binds every pod, and no more Node comes. A pod
// whose claim selects two devices by a CEL expression is counted by its
// CPU alone (which those Nodes hold: no Node for it) and gets a
// NotModelled event saying why.
//
// It runs twice: with resource.k8s.io/v1beta1 served alone (tide reads it),
// and with v1beta2 as well (tide reads v1beta2, the shape of v1, which
// Kubernetes 1.34 on serves and 1.33 does not have; the test's objects are
// still written in v1beta1, which the apiserver converts).
func TestLiveDRADeviceCounts(t *testing.T) {
	t.Run("v1beta1", func(t *testing.T) {
		// A plane of its own: the shared one serves v1beta2 too, and tide
		// must be seen reading v1beta1 when that is all there is.
		l := startOwnLive(t, kubetest.Options{FeatureGates: "DynamicResourceAllocation=true",
			RuntimeConfig: "resource.k8s.io/v1beta1=true"}, deploy.CRD, deploy.ProvisioningRequestCRD)
		draDeviceCounts(t, l, "v1beta1")
	})
	t.Run("v1beta2", func(t *testing.T) { draDeviceCounts(t, startLive(t), "v1beta2") })
}

func draDeviceCounts(t *testing.T, l *live, version string) {
	ctx := context.Background()
	dc := &resourcev1beta1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}, Spec: resourcev1beta1.DeviceClassSpec{
		Selectors: []resourcev1beta1.DeviceSelector{{CEL: &resourcev1beta1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}}
	if _, err := l.cs.ResourceV1beta1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]resourcev1beta1.DeviceRequest{
		"one-gpu": {Name: "gpu", DeviceClassName: "gpu.example.com"},
		"two-picky-gpus": {Name: "gpu", DeviceClassName: "gpu.example.com", Count: 2, Selectors: []resourcev1beta1.DeviceSelector{{CEL: &resourcev1beta1.CELDeviceSelector{
			Expression: `device.driver == "gpu.example.com"`}}}},
	} {
		tmpl := &resourcev1beta1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourcev1beta1.ResourceClaimTemplateSpec{Spec: resourcev1beta1.ResourceClaimSpec{Devices: resourcev1beta1.DeviceClaim{
				Requests: []resourcev1beta1.DeviceRequest{req}}}}}
		if _, err := l.cs.ResourceV1beta1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l.nodePool(t, "dra", draPool)
	l.draDriver(t, "dra")
	op, _, _ := l.runOperator(t, "replica-dra", "dra")
	for i := range 3 {
		l.draPod(t, fmt.Sprintf("dra-%d", i), "one-gpu")
	}
	peak := 0
	bound := func(n int) (bool, string) {
		nodes := l.poolNodes(t, "dra")
		peak = max(peak, len(nodes))
		got := 0
		for i := range n {
			p, err := l.cs.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("dra-%d", i), metav1.GetOptions{})
			if err == nil && p.Spec.NodeName != "" {
				got++
			}
		}
		return got == n && len(nodes) == 2, fmt.Sprintf("%d Nodes (want 2), %d of %d pods bound", len(nodes), got, n)
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) { return bound(3) })
	// Each pod's claim got a device.
	claims, err := l.cs.ResourceV1beta1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocated := 0
	for _, c := range claims.Items {
		if c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) == 1 {
			allocated++
		}
	}
	if allocated != 3 {
		t.Fatalf("%d of 3 ResourceClaims allocated one device", allocated)
	}
	// A pod whose claim tide cannot count (two devices picked by a CEL
	// expression; each Node has one free device at most now): counted by
	// its CPU alone, which the Nodes' room holds, and told so. It waits.
	l.draPod(t, "dra-3", "two-picky-gpus")
	var ev []corev1.Event
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		ev = l.events(t, "default", "Pod", "NotModelled")
		return len(ev) > 0, "no NotModelled event yet"
	})
	if len(ev) != 1 || ev[0].InvolvedObject.Name != "dra-3" || !strings.Contains(ev[0].Message, "CEL selectors") {
		t.Fatalf("NotModelled events: %+v, want one for dra-3 (CEL selectors)", ev)
	}
	for p0 := op.Passes(); op.Passes() < p0+4; {
		time.Sleep(200 * time.Millisecond)
		if ok, msg := bound(3); !ok {
			t.Fatalf("after the pods were bound: %s", msg)
		}
	}
	if peak != 2 {
		t.Fatalf("%d Nodes at the peak, want 2", peak)
	}
	if v := op.ClaimsVersion(); v != version {
		t.Fatalf("tide kube read the claims in resource.k8s.io/%s, want %s", v, version)
	}
	t.Logf("claims read in %s: 3 one-device pods on nodes of 2 devices: 2 Nodes, every claim allocated; the CEL-selector pod: %s", version, ev[0].Message)
}
