package demand_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestDemandFromRealScheduler lets the real kube-scheduler decide which pods
// fit a kwok node of 8 GPUs, then reads the cluster back: the pods it marked
// Unschedulable are the pool's demand, the bound ones its node's use, and
// the pod no pool can hold is reported with the reason.
func TestDemandFromRealScheduler(t *testing.T) {
	c := kubetest.Shared(t)
	node := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "gpu-0",
		"labels":      map[string]string{demand.PoolLabel: "gpu", "accelerator": "nvidia"},
		"annotations": map[string]string{"kwok.x-k8s.io/node": "fake", demand.OrdinalAnnotation: "0"}},
		"spec": map[string]any{"taints": []map[string]string{{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}}},
		"status": map[string]any{
			"allocatable": map[string]string{"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"},
			"capacity":    map[string]string{"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}}}
	if code, body, err := c.Do(http.MethodPost, "/api/v1/nodes", node); err != nil || code != http.StatusCreated {
		t.Fatalf("create node: %d %s %v", code, body, err)
	}
	pod := func(name string, gpus int) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"automountServiceAccountToken": false,
				"tolerations":  []map[string]string{{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}},
				"nodeSelector": map[string]string{"accelerator": "nvidia"},
				"containers": []map[string]any{{"name": "c", "image": "x", "resources": map[string]any{
					"requests": map[string]string{"nvidia.com/gpu": fmt.Sprint(gpus)}, "limits": map[string]string{"nvidia.com/gpu": fmt.Sprint(gpus)}}}}}}
	}
	create := func(name string, gpus int) {
		kubetest.Eventually(t, time.Minute, func() (bool, string) { // the default ServiceAccount may lag the start
			code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/default/pods", pod(name, gpus))
			return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod %s: %d %s %v", name, code, body, err)
		})
	}
	for i := range 10 {
		create(fmt.Sprintf("train-%d", i), 1)
	}
	create("huge", 16)
	pool := demand.Pool{Name: "gpu", Labels: map[string]string{demand.PoolLabel: "gpu", "accelerator": "nvidia"},
		Taints:    []demand.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: demand.NoSchedule}},
		Offerings: []capacity.Offering{{Type: "g8", Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}}}
	var rep demand.Report
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		var nodes corev1.NodeList
		var pods corev1.PodList
		for path, out := range map[string]any{"/api/v1/nodes": &nodes, "/api/v1/pods": &pods} {
			_, body, err := c.Do(http.MethodGet, path, nil)
			if err != nil {
				return false, err.Error()
			}
			if err := json.Unmarshal(body, out); err != nil {
				return false, err.Error()
			}
		}
		var np []*corev1.Node
		for i := range nodes.Items {
			np = append(np, &nodes.Items[i])
		}
		var pp []*corev1.Pod
		for i := range pods.Items {
			pp = append(pp, &pods.Items[i])
		}
		rep = demand.Compute([]demand.Pool{pool}, np, pp)
		g := rep.Pressure["gpu"]
		return g.Queued() == 2 && len(g.Nodes) == 1 && g.Inflight() == 8 && len(rep.Unmatched) == 1,
			fmt.Sprintf("queued %d, nodes %d, inflight %d, unmatched %+v", g.Queued(), len(g.Nodes), g.Inflight(), rep.Unmatched)
	})
	if g := rep.Pressure["gpu"]; g.Nodes[0].Free().GPUs != 0 || g.Pending[0].Requests.GPUs != 1 {
		t.Fatalf("pressure = %+v", g)
	}
	if u := rep.Unmatched[0]; u.Name != "huge" || !strings.Contains(u.Reason, "gpu=16 fit no offering") {
		t.Fatalf("unmatched = %+v", u)
	}
}
