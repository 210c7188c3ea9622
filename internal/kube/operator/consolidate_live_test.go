package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// TestLiveNodePoolConsolidates: a NodePool with a disruption block
// consolidates as a `tide head` pool does. Two Nodes each end up running
// one small pod of its own Deployment (a quarter of the Node): neither is
// idle, so scale-down keeps both; consolidation cordons one, evicts its pod
// through the Eviction API, the Deployment recreates it on the other Node,
// and the emptied Node is released. A Consolidate event on the NodePool
// says so.
func TestLiveNodePoolConsolidates(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "cons", `{"nodes":{"min":0,"max":4},"provider":{"type":"kwok"},
  "offerings":[{"type":"c4","cpu":"4","memory":"16Gi","price":1}],
  "node_labels":{"tier":"cons"},
  "scaling":{"policy":"tide","idle_timeout":"2s"},
  "disruption":{"every":"1s","max_utilization":60,"horizon":"1h","budgets":[{"nodes":1}]}}`)
	l.runOperator(t, "replica-a")
	deployment := func(name string, replicas int32, cpu string) {
		t.Helper()
		zero := int64(0)
		no := false
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, NodeSelector: map[string]string{"tier": "cons"},
						TerminationGracePeriodSeconds: &zero,
						Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}}}
		if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeOf := func(app string) string {
		pods, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].DeletionTimestamp != nil {
			return ""
		}
		return pods.Items[0].Spec.NodeName
	}
	// Two 2.5-cpu fillers need two Nodes; a and b (1 cpu each) then land
	// on the less used one each.
	deployment("fill", 2, "2500m")
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		r, n := l.runningPods(t, "default", "app=fill")
		return r == 2, fmt.Sprintf("%d of %d fillers running, %d Nodes", r, n, len(l.poolNodes(t, "cons")))
	})
	deployment("a", 1, "1")
	kubetest.Eventually(t, time.Minute, func() (bool, string) { return nodeOf("a") != "", "a not running" })
	deployment("b", 1, "1")
	kubetest.Eventually(t, time.Minute, func() (bool, string) { return nodeOf("b") != "", "b not running" })
	if nodeOf("a") == nodeOf("b") {
		t.Fatalf("a and b were both placed on %s: the test needs one on each Node", nodeOf("a"))
	}
	l.scale(t, "fill", 0)
	// Each Node now runs one 1-cpu pod (25 %): scale-down keeps both;
	// consolidation empties one.
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		na, nb := nodeOf("a"), nodeOf("b")
		nodes := l.poolNodes(t, "cons")
		return na != "" && na == nb && len(nodes) == 1, fmt.Sprintf("a on %q, b on %q, %d Nodes", na, nb, len(nodes))
	})
	evs := l.events(t, "", "NodePool", operator.ReasonConsolidate)
	if len(evs) == 0 || !strings.Contains(evs[0].Message, "evicted default/") {
		t.Fatalf("no Consolidate event naming the evicted pod: %+v", evs)
	}
	t.Logf("event: %s", evs[0].Message)
}
