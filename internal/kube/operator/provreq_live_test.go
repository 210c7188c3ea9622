package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/kube/provreq"
)

// provisioningRequest creates a PodTemplate (unless tmpl is "") and a
// ProvisioningRequest of class for count pods of it, in default.
func (l *live) provisioningRequest(t *testing.T, name, class, template string, count int) {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: %s, namespace: default}
spec:
  provisioningClassName: %s
  podSets: [{podTemplateRef: {name: %s}, count: %d}]
`, name, class, template, count)
	if err := l.Create([]byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// podTemplate creates a PodTemplate in default with spec.
func (l *live) podTemplate(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	pt := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Template: corev1.PodTemplateSpec{Spec: spec}}
	if _, err := l.cs.CoreV1().PodTemplates("default").Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// requestConditions reads a ProvisioningRequest's conditions, by type.
func (l *live) requestConditions(t testing.TB, name string) map[string]metav1.Condition {
	t.Helper()
	code, body, err := l.Do(http.MethodGet, "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests/"+name, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("get ProvisioningRequest %s: %d %s %v", name, code, body, err)
	}
	var obj struct {
		Status struct {
			Conditions []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatal(err)
	}
	out := map[string]metav1.Condition{}
	for _, c := range obj.Status.Conditions {
		out[c.Type] = c
	}
	return out
}

// waitCondition waits until the request's condition typ has status and
// reason, and returns its message.
func (l *live) waitCondition(t *testing.T, name, typ string, status metav1.ConditionStatus, reason string, within time.Duration) string {
	t.Helper()
	var msg string
	kubetest.Eventually(t, within, func() (bool, string) {
		c, ok := l.requestConditions(t, name)[typ]
		msg = c.Message
		return ok && c.Status == status && c.Reason == reason,
			fmt.Sprintf("ProvisioningRequest %s: %s=%s (%s: %s), want %s (%s)", name, typ, c.Status, c.Reason, c.Message, status, reason)
	})
	return msg
}

// TestLiveProvisioningRequests: Cluster Autoscaler's ProvisioningRequest
// API, answered by tide kube on the real apiserver and scheduler with kwok
// Nodes (booking 10 s):
//
//   - atomic requests no pool can ever hold (21 eight-GPU pods on a pool of
//     max 20; a 16-GPU pod on 8-GPU nodes) are Failed with the reason and
//     buy nothing;
//   - an atomic request for 4 pods of 8 GPUs on 8-GPU nodes gets its 4
//     Nodes in one scale-up (the pool's target goes 0 → 4) and
//     Provisioned=True, while the 4 pods consuming it, created at once and
//     unschedulable meanwhile, are not bought for again: 4 Nodes, all 4
//     pods bound to them;
//   - a check-capacity request on a pool with no room is Provisioned=False
//     and the pool buys nothing; with the pool's min raised to one Node it
//     turns Provisioned=True;
//   - an atomic request nobody consumes gets its Node, then BookingExpired
//     after the booking, and the Node is released.
func TestLiveProvisioningRequests(t *testing.T) {
	l := startLive(t)
	l.options = func(o *operator.Options) { o.Booking = 10 * time.Second }
	ctx := context.Background()
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		code, body, err := l.Do(http.MethodGet, "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests", nil)
		return err == nil && code == http.StatusOK, fmt.Sprintf("ProvisioningRequest API not served: %d %s %v", code, body, err)
	})
	l.nodePool(t, "gpu", `{"nodes":{"min":0,"max":20},"provider":{"type":"kwok"},
  "offerings":[{"type":"g8","cpu":"32","memory":"256Gi","gpus":8,"price":24.5}],
  "node_labels":{"accelerator":"nvidia"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
  "scaling":{"policy":"tide","batch_window":"100ms","idle_timeout":"1s"}}`)
	l.nodePool(t, "small", `{"nodes":{"min":0,"max":3},"provider":{"type":"kwok"},
  "offerings":[{"type":"c4","cpu":"4","memory":"16Gi","price":0.2}],
  "node_labels":{"tier":"small"},"scaling":{"policy":"tide","batch_window":"100ms","idle_timeout":"1s"}}`)
	_, metrics, _ := l.runOperator(t, "replica-provreq")
	gpu8 := gpuPodSpec(8, map[string]string{"accelerator": "nvidia"})
	l.podTemplate(t, "gpu8", gpu8)
	l.podTemplate(t, "gpu16", gpuPodSpec(16, map[string]string{"accelerator": "nvidia"}))
	small := corev1.PodSpec{NodeSelector: map[string]string{"tier": "small"}, Containers: []corev1.Container{{Name: "c", Image: "x",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}}
	l.podTemplate(t, "small2", small)

	// Requests no pool can ever hold: Failed, nothing bought.
	l.provisioningRequest(t, "too-many", provreq.ClassAtomicScaleUp, "gpu8", 21)
	l.provisioningRequest(t, "too-big", provreq.ClassAtomicScaleUp, "gpu16", 1)
	msg := l.waitCondition(t, "too-many", provreq.Failed, metav1.ConditionTrue, "NoNodePoolCanHold", time.Minute)
	if !strings.Contains(msg, "max of 20 nodes") {
		t.Errorf("too-many: Failed says %q, want the pool's max named", msg)
	}
	t.Logf("too-many: %s", msg)
	msg = l.waitCondition(t, "too-big", provreq.Failed, metav1.ConditionTrue, "NoNodePoolCanHold", time.Minute)
	t.Logf("too-big: %s", msg)
	time.Sleep(2 * time.Second) // passes that could buy (none should)
	if n := len(l.poolNodes(t, "gpu")); n != 0 || fmt.Sprint(l.status(t, "gpu")["target"]) != "0" {
		t.Fatalf("failed requests bought nodes: %d Nodes, status %v", n, l.status(t, "gpu"))
	}

	// The atomic request: 4 Nodes in one scale-up; its 4 consumers are
	// not bought for twice.
	l.provisioningRequest(t, "train", provreq.ClassAtomicScaleUp, "gpu8", 4)
	for i := range 4 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%d", i), Namespace: "default",
			Labels: map[string]string{"app": "train"}, Annotations: map[string]string{provreq.ConsumeAnnotation: "train"}}, Spec: gpu8}
		if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var targets []string
	maxNodes := 0
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		if v := fmt.Sprint(l.status(t, "gpu")["target"]); v != "<nil>" && (len(targets) == 0 || targets[len(targets)-1] != v) {
			targets = append(targets, v)
		}
		nodes := len(l.poolNodes(t, "gpu"))
		maxNodes = max(maxNodes, nodes)
		r, n := l.runningPods(t, "default", "app=train")
		c := l.requestConditions(t, "train")[provreq.Provisioned]
		return r == 4 && c.Status == metav1.ConditionTrue,
			fmt.Sprintf("%d of %d pods running, %d Nodes, targets %v, Provisioned %s (%s)", r, n, nodes, targets, c.Status, c.Message)
	})
	time.Sleep(2 * time.Second)
	if n := len(l.poolNodes(t, "gpu")); n != 4 || maxNodes != 4 {
		t.Fatalf("%d Nodes (at most %d) for a request of four 8-GPU pods and its 4 consumers, want 4", n, maxNodes)
	}
	if targets[0] == "0" {
		targets = targets[1:]
	}
	if len(targets) == 0 || targets[0] != "4" {
		t.Fatalf("NodePool targets %v: want 4 at the first scale-up (one purchase for the request)", targets)
	}
	if c := l.requestConditions(t, "train")[provreq.Accepted]; c.Status != metav1.ConditionTrue {
		t.Fatalf("Accepted = %+v", c)
	}
	if ev := l.events(t, "default", "ProvisioningRequest", "CapacityProvisioned"); len(ev) == 0 {
		t.Fatal("no CapacityProvisioned event on the request")
	}
	if ev := l.events(t, "default", "Pod", "ConsumesProvisioningRequest"); len(ev) == 0 {
		t.Fatal("no waiting consumer was told it consumes the request")
	} else {
		t.Logf("consumer event: %s", ev[0].Message)
	}
	t.Logf("train: targets %v, Provisioned: %s", targets, l.requestConditions(t, "train")[provreq.Provisioned].Message)

	// check-capacity: no room, nothing bought; room, True.
	l.provisioningRequest(t, "check", provreq.ClassCheckCapacity, "small2", 2)
	msg = l.waitCondition(t, "check", provreq.Provisioned, metav1.ConditionFalse, "CapacityNotFound", time.Minute)
	t.Logf("check without room: %s", msg)
	time.Sleep(2 * time.Second)
	if n := len(l.poolNodes(t, "small")); n != 0 || fmt.Sprint(l.status(t, "small")["target"]) != "0" {
		t.Fatalf("a check-capacity request bought nodes: %d Nodes, status %v", n, l.status(t, "small"))
	}
	patch := []byte(`{"spec":{"nodes":{"min":1,"max":3}}}`)
	if code, body, err := l.Do(http.MethodPatch, "/apis/tide.dev/v1alpha1/nodepools/small", patch,
		"Content-Type", string(types.MergePatchType)); err != nil || code != http.StatusOK {
		t.Fatalf("raise small's min: %d %s %v", code, body, err)
	}
	msg = l.waitCondition(t, "check", provreq.Provisioned, metav1.ConditionTrue, "CapacityFound", time.Minute)
	t.Logf("check with one 4-CPU Node: %s", msg)
	if n := len(l.poolNodes(t, "small")); n != 1 {
		t.Fatalf("%d Nodes in small, want its min of 1", n)
	}

	// A booking nobody consumes expires and its Node goes.
	l.provisioningRequest(t, "idle", provreq.ClassAtomicScaleUp, "gpu8", 1)
	l.waitCondition(t, "idle", provreq.Provisioned, metav1.ConditionTrue, "CapacityProvisioned", time.Minute)
	if n := len(l.poolNodes(t, "gpu")); n != 5 {
		t.Fatalf("%d gpu Nodes with idle provisioned, want 5", n)
	}
	msg = l.waitCondition(t, "idle", provreq.BookingExpired, metav1.ConditionTrue, "BookingTimeElapsed", time.Minute)
	t.Logf("idle: %s", msg)
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "gpu"))
		return n == 4, fmt.Sprintf("%d gpu Nodes after idle's booking expired, want 4 (the consumed request's)", n)
	})
	if c := l.requestConditions(t, "train")[provreq.BookingExpired]; c.Status == metav1.ConditionTrue {
		t.Fatalf("the consumed request's booking expired: %+v", c)
	}
	code, body := get(t, "http://"+metrics+"/metrics")
	for _, want := range []string{
		`tide_kube_provisioning_requests{class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",state="failed"} 2`,
		`tide_kube_provisioning_requests{class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",state="consumed"} 1`,
		`tide_kube_provisioning_requests{class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",state="booking-expired"} 1`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
}

// TestLiveWithoutProvisioningRequestCRD: on a cluster without the
// ProvisioningRequest CRD (tide kube installed before it shipped one),
// tide kube scales as before and logs no failed pass.
func TestLiveWithoutProvisioningRequestCRD(t *testing.T) {
	// A plane of its own: the shared one has the ProvisioningRequest CRD.
	l := startOwnLive(t, kubetest.Options{}, deploy.CRD)
	var logs strings.Builder
	var mu sync.Mutex
	l.options = func(o *operator.Options) {
		o.Logger = slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(b)
		}), nil))
	}
	l.nodePool(t, "cpu", `{"nodes":{"min":0,"max":3},"provider":{"type":"kwok"},
  "offerings":[{"type":"c4","cpu":"4","memory":"16Gi","price":0.2}],"node_labels":{"tier":"cpu"},
  "scaling":{"policy":"tide","batch_window":"100ms"}}`)
	l.runOperator(t, "replica-nocrd")
	l.cpuPods(t, "plain", "cpu", 2)
	l.boundNodes(t, "cpu", "plain", 2, time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "ProvisioningRequests not watched") {
		t.Fatalf("tide kube's log does not say the CRD is absent:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "pass failed") || strings.Contains(logs.String(), "ProvisioningRequests not answered") {
		t.Fatalf("tide kube's log without the CRD:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
