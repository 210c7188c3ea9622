package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
)

// TestFinishedPods: a pod that ends on a pool's Node counts once for that
// pool, with its requests; pods that had ended before the first pass, pods
// on Nodes of no pool and pods still running do not count.
func TestFinishedPods(t *testing.T) {
	node := func(name, pool string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if pool != "" {
			n.Labels[demand.PoolLabel] = pool
		}
		return n
	}
	pod := func(uid, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	nodes := []*corev1.Node{node("n1", "gpu"), node("n2", "")}
	var f finishedPods
	steps := []struct {
		pods []*corev1.Pod
		want int
	}{
		{[]*corev1.Pod{pod("old", "n1", corev1.PodSucceeded), pod("a", "n1", corev1.PodRunning)}, 0}, // the first pass notes "old"
		{[]*corev1.Pod{pod("old", "n1", corev1.PodSucceeded), pod("a", "n1", corev1.PodSucceeded), pod("b", "n2", corev1.PodFailed)}, 1},
		{[]*corev1.Pod{pod("a", "n1", corev1.PodSucceeded), pod("c", "n1", corev1.PodFailed), pod("d", "", corev1.PodFailed)}, 2},
		{nil, 2},
	}
	for i, s := range steps {
		f.observe(nodes, s.pods)
		pr := f.stamp("gpu", capacity.Pressure{})
		if pr.Finished != s.want || pr.FinishedRequests.MilliCPU != int64(2000*s.want) {
			t.Errorf("pass %d: finished %d (%v), want %d (%d cores)", i, pr.Finished, pr.FinishedRequests, s.want, 2*s.want)
		}
	}
	if len(f.seen) != 0 {
		t.Errorf("seen keeps %d pods no longer listed", len(f.seen))
	}
}
