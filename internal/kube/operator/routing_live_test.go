package operator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/kube/kubetest"
)

// cpuKwokPool is a kwok NodePool of four-CPU Nodes labelled tier=both at
// price dollars an hour, with extra spec fields.
func cpuKwokPool(price float64, extra string) string {
	return fmt.Sprintf(`{"nodes":{"min":0,"max":4},"provider":{"type":"kwok"},
  "offerings":[{"type":"c4","cpu":"4","memory":"16Gi","price":%g}],
  "node_labels":{"tier":"both"}%s}`, price, extra)
}

// TestLiveCheaperNodePoolScales (issue 35): two NodePools fit the pods (same
// labels, same Node size); the dearer one comes first in name order, which
// is where the demand went before. The cheaper one scales and the pods run
// on its Nodes; the dearer one gets no Node.
func TestLiveCheaperNodePoolScales(t *testing.T) {
	l := startLive(t)
	l.nodePool(t, "a-od", cpuKwokPool(0.40, ""))
	l.nodePool(t, "b-spot", cpuKwokPool(0.10, ""))
	l.runOperator(t, "route", "a-od", "b-spot")

	l.cpuPods(t, "cheap", "both", 2)
	began := time.Now()
	l.boundNodes(t, "b-spot", "cheap", 2, 2*time.Minute)
	t.Logf("the cheaper NodePool b-spot scaled to 2 Nodes with the pods bound in %v", time.Since(began).Round(time.Millisecond))
	if n := len(l.poolNodes(t, "a-od")); n != 0 {
		t.Errorf("the dearer NodePool a-od has %d Nodes", n)
	}
}

// TestLiveNodePoolLimitOverflows: the cheaper NodePool has limits {cpu: 4},
// one four-CPU Node's worth; of two three-CPU pods it takes one (one Node,
// never a second) and the other is the dearer pool's demand, which scales
// for it. Both pods run.
func TestLiveNodePoolLimitOverflows(t *testing.T) {
	l := startLive(t)
	l.nodePool(t, "a-od", cpuKwokPool(0.40, ""))
	l.nodePool(t, "b-spot", cpuKwokPool(0.10, `,"limits":{"cpu":"4"}`))
	l.runOperator(t, "limit", "a-od", "b-spot")

	l.cpuPods(t, "lim", "both", 2)
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		spot, od := l.poolNodes(t, "b-spot"), l.poolNodes(t, "a-od")
		running, total := l.runningPods(t, "default", "")
		return len(spot) == 1 && len(od) == 1 && running == 2, fmt.Sprintf("b-spot %d Nodes, a-od %d, %d of %d pods running",
			len(spot), len(od), running, total)
	})
	// Held there: the limit never lets the cheaper pool buy a second Node.
	time.Sleep(3 * time.Second)
	if n := len(l.poolNodes(t, "b-spot")); n != 1 {
		t.Errorf("b-spot has %d Nodes past its limits.cpu 4", n)
	}
}
