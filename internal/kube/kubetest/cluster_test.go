package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestClusterRunsKwokNodeAndPod starts the real control plane, creates a
// Node that kwok manages and a pod the real scheduler binds to it, and sees
// the pod Running.
func TestClusterRunsKwokNodeAndPod(t *testing.T) {
	c := Start(t)
	node := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{
		"name": "kw-0", "annotations": map[string]string{"kwok.x-k8s.io/node": "fake"}},
		"status": map[string]any{"allocatable": map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
			"capacity": map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}}}
	if code, body, err := c.Do(http.MethodPost, "/api/v1/nodes", node); err != nil || code != http.StatusCreated {
		t.Fatalf("create node: %d %s %v", code, body, err)
	}
	Eventually(t, time.Minute, func() (bool, string) {
		_, body, err := c.Do(http.MethodGet, "/api/v1/nodes/kw-0", nil)
		if err != nil {
			return false, err.Error()
		}
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		_ = json.Unmarshal(body, &n)
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("node not Ready: %s", body)
	})
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "default"},
		"spec": map[string]any{"automountServiceAccountToken": false, "containers": []map[string]any{{"name": "c", "image": "x",
			"resources": map[string]any{"requests": map[string]string{"cpu": "1"}}}}}}
	Eventually(t, time.Minute, func() (bool, string) { // the default ServiceAccount may appear a moment after start
		code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/default/pods", pod)
		return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod: %d %s %v", code, body, err)
	})
	Eventually(t, time.Minute, func() (bool, string) {
		_, body, _ := c.Do(http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
		var p struct {
			Spec   struct{ NodeName string }
			Status struct{ Phase string }
		}
		_ = json.Unmarshal(body, &p)
		return p.Spec.NodeName == "kw-0" && p.Status.Phase == "Running", fmt.Sprintf("pod: node %q phase %q", p.Spec.NodeName, p.Status.Phase)
	})
}
