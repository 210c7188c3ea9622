package workload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	kubejournal "github.com/tide-project/tide/internal/kube/journal"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/kwok"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/kube/workload"
	"github.com/tide-project/tide/internal/policy"
)

// TestPoolControllerOnKwokNodes runs tide's pool controller (the one
// `tide head --config` runs per pool) with the kwok provider and this
// workload on a real cluster, its journal in a ConfigMap: a NodePool's
// desired count of 3 becomes three Ready Nodes carrying the pool's labels
// and taints; a second controller with its own handle on the journal (a
// failover) adopts them, creates none and fences the first out; scaling to 0
// cordons and drains each Node through the Eviction API (a pod on one of
// them is evicted) and deletes it.
func TestPoolControllerOnKwokNodes(t *testing.T) {
	c := kubetest.Shared(t)
	api, err := kubeapi.NewREST(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	np, err := nodepool.Parse("gpu", []byte(`{"nodes":{"min":0,"max":5},"provider":{"type":"kwok"},
		"offerings":[{"type":"g8","cpu":"32","memory":"256Gi","gpus":8,"price":24.5}],
		"node_labels":{"accelerator":"nvidia"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
		"scaling":{"policy":"tide"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var taints []corev1.Taint
	for _, tt := range np.Taints {
		taints = append(taints, corev1.Taint{Key: tt.Key, Value: tt.Value, Effect: corev1.TaintEffect(tt.Effect)})
	}
	prov, err := kwok.New(kwok.Config{API: api, Offerings: np.Config.Offerings, Scope: "ctl", NodeLabels: np.Labels, NodeTaints: taints})
	if err != nil {
		t.Fatal(err)
	}
	// Each replica has its own handle on the journal ConfigMap, as two
	// processes would.
	newController := func(id string) *controller.Controller {
		journal := kubejournal.New(api, "default", "tide-journal-gpu")
		ctl, err := controller.New(controller.Config{Pool: "gpu", Reconcile: np.Config.ReconcileConfig(), Offerings: np.Config.Offerings,
			Bootstrap: []byte("kubernetes"), ControllerID: id, ReconcileInterval: 100 * time.Millisecond},
			controller.Deps{Provider: prov, Journal: journal, Workload: workload.New(api, prov.NodeName, nil)})
		if err != nil {
			t.Fatal(err)
		}
		return ctl
	}
	ctx := t.Context()
	until := func(ctl *controller.Controller, what string, done func(controller.Status) bool) {
		t.Helper()
		kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
			if err := ctl.Tick(ctx); err != nil {
				return false, err.Error()
			}
			if _, err := prov.Sync(ctx); err != nil {
				return false, err.Error()
			}
			st := ctl.Status()
			return done(st), fmt.Sprintf("%s: status %+v", what, st)
		})
	}
	poolNodes := func() []corev1.Node {
		var list corev1.NodeList
		_, body, err := c.Do(http.MethodGet, "/api/v1/nodes?labelSelector="+demand.PoolLabel+"%3Dgpu", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	a := newController("tide-a")
	a.SetDesired(policy.Decision{Desired: 3})
	until(a, "scale to 3", func(st controller.Status) bool { return st.Current == 3 && st.Pending == 0 })
	nodes := poolNodes()
	if len(nodes) != 3 {
		t.Fatalf("%d Nodes, want 3", len(nodes))
	}
	for _, n := range nodes {
		ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
		if !ready || n.Labels["accelerator"] != "nvidia" || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "nvidia.com/gpu" }) ||
			n.Spec.ProviderID != kwok.ProviderIDPrefix+n.Name {
			t.Fatalf("node %s: ready %v labels %v taints %v providerID %q", n.Name, ready, n.Labels, n.Spec.Taints, n.Spec.ProviderID)
		}
	}

	// Failover: a new controller on the same journal adopts the three.
	b := newController("tide-b")
	until(b, "adopt", func(st controller.Status) bool { return st.Started && st.Current == 3 })
	if got := len(poolNodes()); got != 3 {
		t.Fatalf("after failover %d Nodes, want 3 (nothing created twice)", got)
	}
	// The deposed replica, asked for more, is fenced out and creates nothing.
	a.SetDesired(policy.Decision{Desired: 5})
	for range 3 {
		_ = a.Tick(context.Background())
	}
	if !a.Status().Deposed {
		t.Fatalf("the deposed controller still acts: %+v", a.Status())
	}
	if got := len(poolNodes()); got != 3 {
		t.Fatalf("after the deposed replica's ticks %d Nodes, want 3", got)
	}

	// A pod on one of the nodes: evicted by the drain.
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "train", "namespace": "default"},
		"spec": map[string]any{"automountServiceAccountToken": false,
			"tolerations": []map[string]string{{"key": "nvidia.com/gpu", "operator": "Exists"}},
			"containers": []map[string]any{{"name": "c", "image": "x", "resources": map[string]any{
				"requests": map[string]string{"nvidia.com/gpu": "1"}, "limits": map[string]string{"nvidia.com/gpu": "1"}}}}}}
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/default/pods", pod)
		return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod: %d %s %v", code, body, err)
	})
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		_, body, _ := c.Do(http.MethodGet, "/api/v1/namespaces/default/pods/train", nil)
		var p corev1.Pod
		_ = json.Unmarshal(body, &p)
		return p.Status.Phase == corev1.PodRunning, "pod phase " + string(p.Status.Phase)
	})

	b.SetDesired(policy.Decision{Desired: 0})
	until(b, "scale to 0", func(st controller.Status) bool {
		return st.Current == 0 && st.Pending == 0 && st.Draining == 0 && len(st.Deleting) == 0
	})
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		if _, err := prov.Sync(ctx); err != nil {
			return false, err.Error()
		}
		n := len(poolNodes())
		return n == 0, fmt.Sprintf("%d Nodes left", n)
	})
	if code, _, _ := c.Do(http.MethodGet, "/api/v1/namespaces/default/pods/train", nil); code != http.StatusNotFound {
		t.Fatalf("the pod was not evicted: GET answers %d", code)
	}
}
