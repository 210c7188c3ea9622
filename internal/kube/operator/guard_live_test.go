package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestLiveDisruptionGuards: a pod annotated tide.dev/do-not-disrupt, a pod
// under a PodDisruptionBudget with maxUnavailable 0, a plain pod and a
// DaemonSet on every Node. When the plain pod goes, its Node (running only
// the DaemonSet's pod) is tainted, drained and deleted: a daemon holds no
// Node up. Squeezed to max 1, the pool evicts neither guarded pod and keeps
// both their Nodes. A pod no pool can fit gets a Warning event saying why.
func TestLiveDisruptionGuards(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	// min_utilization 100: two busy Nodes of three (67%) are too few.
	l.nodePool(t, "guard", strings.Replace(fmt.Sprintf(gpuPool, "2s"), `"min_utilization":50`, `"min_utilization":100`, 1))
	l.runOperator(t, "guard")
	began := time.Now()

	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	if _, err := l.cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pdb"}}}}
	if _, err := l.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, labels, ann map[string]string, gpus int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels, Annotations: ann},
			Spec: gpuPodSpec(gpus, map[string]string{"accelerator": "nvidia"})}
		out, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	keep := mk("keep", map[string]string{"app": "keep"}, map[string]string{demand.DoNotDisrupt: "true"}, 8)
	held := mk("held", map[string]string{"app": "pdb"}, nil, 8)
	mk("free", map[string]string{"app": "free"}, nil, 8)
	mk("huge", map[string]string{"app": "huge"}, nil, 16) // no offering has 16 GPUs

	running := func(name string) (*corev1.Pod, bool) {
		p, err := l.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return p, err == nil && p.Status.Phase == corev1.PodRunning
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, a := running("keep")
		_, b := running("held")
		_, c := running("free")
		r, n := l.runningPods(t, "default", "app=agent")
		return a && b && c && r == 3 && n == 3, fmt.Sprintf("keep %v held %v free %v, %d/%d daemon pods running, %d Nodes",
			a, b, c, r, n, len(l.poolNodes(t, "guard")))
	})
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		for _, ev := range l.events(t, "default", "Pod", "NoNodePoolFits") {
			if ev.InvolvedObject.Name == "huge" && strings.Contains(ev.Message, "fit no offering") {
				t.Logf("event on the unfittable pod: %s", ev.Message)
				return true, ""
			}
		}
		return false, "no NoNodePoolFits event on pod huge"
	})
	t.Logf("3 Nodes, guarded pods and daemons running after %v", time.Since(began).Round(time.Millisecond))
	free, _ := running("free")
	freeNode := free.Spec.NodeName

	// The plain pod goes: its Node, with only a daemon left, goes too.
	if err := l.cs.CoreV1().Pods("default").Delete(ctx, "free", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tainted := false
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		n, err := l.cs.CoreV1().Nodes().Get(ctx, freeNode, metav1.GetOptions{})
		if err != nil {
			return true, ""
		}
		tainted = tainted || !demand.Mark(n).IsZero()
		return false, fmt.Sprintf("Node %s still there (taints %v)", freeNode, n.Spec.Taints)
	})
	t.Logf("the plain pod's Node is gone after %v", time.Since(began).Round(time.Millisecond))
	if !tainted {
		t.Log("the Node went before a poll saw its taint")
	}
	if n := len(l.poolNodes(t, "guard")); n != 2 {
		t.Fatalf("%d Nodes after the plain pod left, want 2", n)
	}

	// Squeeze the pool to max 1: the guarded pods stay, with their Nodes.
	if _, _, err := l.Do("PATCH", "/apis/tide.dev/v1alpha1/nodepools/guard", []byte(`{"spec":{"nodes":{"min":0,"max":1}}}`),
		"Content-Type", string(types.MergePatchType)); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		st := l.status(t, "guard")
		return fmt.Sprint(st["target"]) == "1", fmt.Sprintf("status %v", st)
	})
	deadline := time.Now().Add(8 * time.Second) // four delays and many passes
	for time.Now().Before(deadline) {
		for _, want := range []*corev1.Pod{keep, held} {
			p, ok := running(want.Name)
			if !ok || p.UID != want.UID {
				t.Fatalf("pod %s was disrupted", want.Name)
			}
		}
		if n := len(l.poolNodes(t, "guard")); n != 2 {
			t.Fatalf("%d Nodes, want the 2 running guarded pods", n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
