package operator_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestLiveScaleUp runs the two provisioning scale tests of Karpenter's e2e
// suite (aws/karpenter-provider-aws, test/suites/scale/provisioning_test.go)
// in their shape, on kwok Nodes: pods of 10m CPU and 50Mi are created and
// left pending with no NodePool; then the NodePool is created and the clock
// runs until every Node exists, every Node is Ready and every pod Running.
//
//   - node-dense: pods with required anti-affinity on hostname, one a Node
//     (Karpenter: 500 pods on 500 Nodes);
//   - pod-dense: 110 pods a Node (Karpenter: 6,600 pods on 60 Nodes).
//
// The pools run tide's karpenter policy (Karpenter's batching and
// packing; tide's default policy would add burst spares on top), so that
// the Node count is the one Karpenter's test expects. Karpenter's suite
// gives each a 30-minute spec timeout. By default the
// sizes are small (20 and 220 pods); TIDE_KUBE_BENCH=1 runs 1,000
// node-dense pods (1,000 Nodes) and 10,000 pod-dense ones (91 Nodes), the
// figures in docs/benchmarks.md.
func TestLiveScaleUp(t *testing.T) {
	l := startLive(t)
	_, _, _ = l.runOperator(t, "scale", "dense-nodes", "dense-pods")
	for _, tc := range []struct {
		pool    string
		pods    int
		perNode int
		anti    bool
	}{
		// pod-dense first: the scheduler then has no Nodes of the
		// other run to look at while it marks 10,000 pods.
		{"dense-pods", benchSize(t, 10000, 220), 110, false},
		{"dense-nodes", benchSize(t, 1000, 20), 1, true},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			l.scaleUp(t, tc.pool, tc.pods, tc.perNode, tc.anti)
		})
	}
}

// scaleUp is one of TestLiveScaleUp's runs.
func (l *live) scaleUp(t *testing.T, pool string, n, perNode int, anti bool) {
	t.Helper()
	zero := int64(0)
	no := false
	labels := map[string]string{"scale": pool}
	spec := corev1.PodSpec{NodeSelector: map[string]string{"tier": pool}, TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: &no,
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("50Mi")}}}}}
	if anti {
		spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}}
	}
	began := time.Now()
	l.createMany(t, pool, n, labels, spec)
	created := time.Since(began)
	// As Karpenter's test: the pods exist and are pending (the scheduler
	// marks them Unschedulable as it gets to them; tide acts on those).
	kubetest.Eventually(t, 10*time.Minute, func() (bool, string) {
		_, all := l.runningPods(t, "default", "scale="+pool)
		return all == n, fmt.Sprintf("%d of %d pods exist", all, n)
	})
	t.Logf("%s: %d pods created (pending) in %v", pool, n, created.Round(time.Millisecond))
	want := (n + perNode - 1) / perNode
	// perNode pods of 10m fill a Node's CPU; memory is ample.
	l.nodePool(t, pool, fmt.Sprintf(`{"nodes":{"min":0,"max":%d},"provider":{"type":"kwok"},
  "offerings":[{"type":"d","cpu":"%dm","memory":"%dMi","price":1}],
  "node_labels":{"tier":%q},"scaling":{"policy":"karpenter"}}`, want+10, 10*perNode, 64*perNode+64, pool))
	start := time.Now()
	var made, ready, running time.Duration
	// Listing 10,000 pods every 100 ms would load the apiserver being
	// measured: at most one look a second at the full size.
	every := time.Duration(min(n/1000, 10)) * 100 * time.Millisecond
	var last time.Time
	lastMsg := "not looked yet"
	kubetest.Eventually(t, 30*time.Minute, func() (bool, string) {
		if time.Since(last) < every {
			return false, lastMsg
		}
		last = time.Now()
		nodes := l.poolNodes(t, pool)
		r := 0
		for i := range nodes {
			if kubeletNodeReady(&nodes[i]) {
				r++
			}
		}
		if made == 0 && len(nodes) >= want {
			made = time.Since(start)
		}
		if ready == 0 && r >= want {
			ready = time.Since(start)
		}
		run, _ := l.runningPods(t, "default", "scale="+pool)
		if run == n {
			running = time.Since(start)
		}
		lastMsg = fmt.Sprintf("%d Nodes (%d Ready, want %d), %d of %d pods Running", len(nodes), r, want, run, n)
		return run == n, lastMsg
	})
	if got := len(l.poolNodes(t, pool)); got != want {
		t.Fatalf("%d Nodes for %d pods at %d a Node, want %d", got, n, perNode, want)
	}
	seen := func(d time.Duration) string {
		if d == 0 {
			return "not seen at a look"
		}
		return d.Round(time.Millisecond).String()
	}
	t.Logf("%s: NodePool created → %d Nodes created %s, all Ready %s, %d pods Running %s (%v from the first pod's creation)",
		pool, want, seen(made), seen(ready), n, seen(running), time.Since(began).Round(time.Millisecond))
}
