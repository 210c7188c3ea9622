package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// TestLiveNodePoolDeletion: a NodePool carries tide's finalizer; deleting
// it tears its pool down before it goes. Its Nodes are cordoned and drained
// through the Eviction API (a long scale-down delay does not hold them), a
// pod annotated do-not-disrupt and a pod under a PodDisruptionBudget with
// maxUnavailable 0 are never evicted and keep their Nodes (the NodePool
// stays, with a DeletionBlocked event naming them), the free Nodes are
// deleted through the provider; once the guards are lifted the last Nodes
// go and so does the NodePool.
func TestLiveNodePoolDeletion(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "del", fmt.Sprintf(gpuPool, "1h"))
	l.runOperator(t, "del", "del")

	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pdb"}}}}
	if _, err := l.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, labels, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels, Annotations: ann},
			Spec: gpuPodSpec(8, map[string]string{"accelerator": "nvidia"})}
		out, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	keep := mk("keep", map[string]string{"app": "keep"}, map[string]string{demand.DoNotDisrupt: "true"})
	held := mk("held", map[string]string{"app": "pdb"}, nil)
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "plain"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "plain"}},
				Spec: gpuPodSpec(8, map[string]string{"accelerator": "nvidia"})}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podNode := func(name string) (string, bool) {
		p, err := l.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return p.Spec.NodeName, err == nil && p.Status.Phase == corev1.PodRunning
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, a := podNode("keep")
		_, b := podNode("held")
		r, _ := l.runningPods(t, "default", "app=plain")
		return a && b && r == 2, fmt.Sprintf("keep %v held %v, %d/2 plain running, %d Nodes", a, b, r, len(l.poolNodes(t, "del")))
	})
	if n := len(l.poolNodes(t, "del")); n != 4 {
		t.Fatalf("%d Nodes for four 8-GPU pods, want 4", n)
	}
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		fs := l.finalizers(t, "del")
		return slices.Contains(fs, operator.Finalizer), fmt.Sprintf("finalizers %v", fs)
	})
	keepNode, _ := podNode("keep")
	heldNode, _ := podNode("held")

	began := time.Now()
	if code, body, err := l.Do(http.MethodDelete, "/apis/tide.dev/v1alpha1/nodepools/del", nil); err != nil || code >= 300 {
		t.Fatalf("delete NodePool: %d %s %v", code, body, err)
	}
	// The two plain Nodes go; the guarded two stay, cordoned, with their pods.
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		var names []string
		for _, n := range l.poolNodes(t, "del") {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		want := []string{keepNode, heldNode}
		slices.Sort(want)
		return slices.Equal(names, want), fmt.Sprintf("Nodes %v, want %v", names, want)
	})
	t.Logf("the free Nodes were drained and deleted %v after the NodePool's deletion", time.Since(began).Round(time.Millisecond))
	var blocked string
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		for _, ev := range l.events(t, "", "NodePool", "DeletionBlocked") {
			if strings.Contains(ev.Message, "keep") && strings.Contains(ev.Message, "held") {
				blocked = ev.Message
				return true, ""
			}
		}
		return false, "no DeletionBlocked event naming both guarded pods"
	})
	t.Logf("NodePool event: %s", blocked)
	deadline := time.Now().Add(5 * time.Second) // several passes
	for time.Now().Before(deadline) {
		for _, want := range []*corev1.Pod{keep, held} {
			p, err := l.cs.CoreV1().Pods("default").Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil || p.UID != want.UID || p.DeletionTimestamp != nil {
				t.Fatalf("guarded pod %s was disrupted (%v)", want.Name, err)
			}
		}
		for _, n := range l.poolNodes(t, "del") {
			if !n.Spec.Unschedulable {
				t.Fatalf("Node %s of the deleted pool is not cordoned", n.Name)
			}
		}
		if code, _, _ := l.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/del", nil); code != http.StatusOK {
			t.Fatalf("the NodePool went (%d) while two of its Nodes are left", code)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Lift the guards: the do-not-disrupt pod is deleted by its owner, the
	// budget goes. The last Nodes go, then the NodePool.
	if err := l.cs.CoreV1().Pods("default").Delete(ctx, "keep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.cs.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "hold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		code, _, _ := l.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/del", nil)
		n := len(l.poolNodes(t, "del"))
		return code == http.StatusNotFound && n == 0, fmt.Sprintf("NodePool %d, %d Nodes left", code, n)
	})
	if _, err := l.cs.CoreV1().Pods("default").Get(ctx, "held", metav1.GetOptions{}); err == nil {
		t.Fatal("pod held is still there after its Node went")
	}
	for _, reason := range []string{"Deleting", "Deleted"} {
		kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
			return len(l.events(t, "", "NodePool", reason)) > 0, "no " + reason + " event on the NodePool"
		})
	}
	t.Logf("NodePool and all its Nodes gone %v after its deletion", time.Since(began).Round(time.Millisecond))
}

// finalizers reads a NodePool's finalizers.
func (l *live) finalizers(t testing.TB, pool string) []string {
	t.Helper()
	_, body, err := l.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Metadata.Finalizers
}
