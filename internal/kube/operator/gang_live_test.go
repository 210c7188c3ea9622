package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestLiveGangOneScaleUp: a gang of 4 pods (tide.dev/gang, tide.dev/gang-size)
// of 6 GPUs each, on a tide NodePool of 8-GPU kwok nodes, created one every
// 300 ms (longer than the pool's batch window, so pod-by-pod demand would
// buy in several steps): the pool's target goes from 0 to 4 in one
// scale-up, and all four pods are bound to the four Nodes.
func TestLiveGangOneScaleUp(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "gang", `{"nodes":{"min":0,"max":20},"provider":{"type":"kwok"},
  "offerings":[{"type":"g8","cpu":"32","memory":"256Gi","gpus":8,"price":24.5}],
  "node_labels":{"accelerator":"nvidia"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
  "scaling":{"policy":"tide","batch_window":"100ms"}}`)
	l.runOperator(t, "replica-gang")
	var targets []string
	watch := func() {
		if v := fmt.Sprint(l.status(t, "gang")["target"]); v != "<nil>" && (len(targets) == 0 || targets[len(targets)-1] != v) {
			targets = append(targets, v)
		}
	}
	for i := range 4 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%d", i), Namespace: "default",
			Labels:      map[string]string{"app": "train"},
			Annotations: map[string]string{demand.GangAnnotation: "train", demand.GangSizeAnnotation: "4"}},
			Spec: gpuPodSpec(6, map[string]string{"accelerator": "nvidia"})}
		if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			watch()
			time.Sleep(20 * time.Millisecond)
		}
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		watch()
		r, n := l.runningPods(t, "default", "app=train")
		return r == 4, fmt.Sprintf("%d of %d pods running, %d Nodes, targets %v; not running: %s", r, n, len(l.poolNodes(t, "gang")), targets,
			l.notRunning(t, "default", "app=train"))
	})
	if got := len(l.poolNodes(t, "gang")); got != 4 {
		t.Fatalf("%d Nodes for a gang of four 6-GPU pods, want 4", got)
	}
	nonzero := []string{}
	for _, v := range targets {
		if v != "0" {
			nonzero = append(nonzero, v)
		}
	}
	if len(nonzero) == 0 || nonzero[0] != "4" {
		t.Fatalf("NodePool targets %v: want 4 at the first scale-up (one purchase for the whole gang)", targets)
	}
	t.Logf("NodePool targets seen: %v", targets)
}
