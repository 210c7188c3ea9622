package workload_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/controller"
	kubejournal "github.com/tide-project/tide/internal/kube/journal"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/kwok"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/kube/workload"
	"github.com/tide-project/tide/internal/lifecycle"
)

// TestNotReadyNodeIsRepaired runs the pool controller on kwok Nodes of a
// real cluster with this workload as its Inspector: a machine joins only
// once its Node is Ready; a Node that turns NotReady (taken from kwok and
// its Ready condition set False, as a dead kubelet's would be) stays
// NotReady past repair_after and is replaced: the replacement Node is
// Ready before the NotReady one is deleted.
func TestNotReadyNodeIsRepaired(t *testing.T) {
	c := kubetest.Shared(t)
	api, err := kubeapi.NewREST(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	np, err := nodepool.Parse("rep", []byte(`{"nodes":2,"provider":{"type":"kwok"},
		"offerings":[{"type":"c4","cpu":"4","memory":"16Gi","price":0.2}],
		"lifecycle":{"repair_after":"2s","max_unhealthy":"50%"}}`))
	if err != nil {
		t.Fatal(err)
	}
	lc, _, _, err := np.Config.LifecycleConfig()
	if err != nil || lc.RepairAfter != 2*time.Second || lc.MaxUnhealthyPercent != 50 {
		t.Fatalf("lifecycle from the NodePool spec: %+v %v", lc, err)
	}
	prov, err := kwok.New(kwok.Config{API: api, Offerings: np.Config.Offerings, Scope: "rep", NodeLabels: np.Labels})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []controller.Event
	ctl, err := controller.New(controller.Config{Pool: "rep", Reconcile: np.Config.ReconcileConfig(), Offerings: np.Config.Offerings,
		Bootstrap: []byte("kubernetes"), ControllerID: "ctl", ReconcileInterval: 100 * time.Millisecond,
		RequireRegistration: true, Lifecycle: lc},
		controller.Deps{Provider: prov, Journal: kubejournal.New(api, "default", "tide-journal-rep"),
			Workload: workload.New(api, prov.NodeName, nil),
			Events:   controller.EventFunc(func(e controller.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	until := func(what string, done func(controller.Status) bool) {
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
	until("two Nodes join", func(st controller.Status) bool { return st.Current == 2 && st.Pending == 0 })
	sick := ctl.Status().Nodes[0]
	name := prov.NodeName(sick.MachineID)

	// Take the Node from kwok (which would keep it Ready) and set it
	// NotReady, as the node lifecycle controller does for a silent kubelet.
	if code, body, err := c.Do(http.MethodPatch, "/api/v1/nodes/"+name,
		map[string]any{"metadata": map[string]any{"annotations": map[string]string{kwok.KwokAnnotation: "stopped"}}},
		"Content-Type", "application/merge-patch+json"); err != nil || code != http.StatusOK {
		t.Fatalf("take the Node from kwok: %d %s %v", code, body, err)
	}
	notReady := func() {
		t.Helper()
		_, body, err := c.Do(http.MethodGet, "/api/v1/nodes/"+name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n corev1.Node
		if err := json.Unmarshal(body, &n); err != nil {
			t.Fatal(err)
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
				n.Status.Conditions[i].Reason = "NodeStatusUnknown"
			}
		}
		if code, body, err := c.Do(http.MethodPut, "/api/v1/nodes/"+name+"/status", n); err != nil || code != http.StatusOK {
			t.Fatalf("set the Node NotReady: %d %s %v", code, body, err)
		}
	}
	notReady()
	until("the NotReady Node is repaired", func(st controller.Status) bool {
		return st.Current == 2 && st.Pending == 0 && !slices.ContainsFunc(st.Nodes, func(n controller.NodeStatus) bool {
			return n.MachineID == sick.MachineID
		})
	})
	mu.Lock()
	defer mu.Unlock()
	var order []string
	for _, e := range events {
		switch {
		case e.Reason == controller.ReasonUnhealthy && strings.Contains(e.Message, sick.MachineID) && strings.Contains(e.Message, "NotReady"):
			order = append(order, "unhealthy")
		case e.Reason == lifecycle.ReasonRepair && strings.Contains(e.Message, "is replaced"):
			order = append(order, "repair")
		case e.Reason == controller.ReasonJoined && len(order) > 0 && order[len(order)-1] == "repair":
			order = append(order, "joined")
		case e.Reason == lifecycle.ReasonRepair && strings.Contains(e.Message, "repaired"):
			order = append(order, "deleted")
		}
	}
	if !slices.Equal(order, []string{"unhealthy", "repair", "joined", "deleted"}) {
		var b strings.Builder
		for _, e := range events {
			b.WriteString(e.String() + "\n")
		}
		t.Fatalf("events in order %v, want unhealthy, repair, joined (the replacement), deleted\n%s", order, b.String())
	}
	// The NotReady Node goes (kwok's finalizer is lifted by Sync).
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		if _, err := prov.Sync(ctx); err != nil {
			return false, err.Error()
		}
		code, _, _ := c.Do(http.MethodGet, "/api/v1/nodes/"+name, nil)
		return code == http.StatusNotFound, fmt.Sprintf("GET the NotReady Node: %d", code)
	})
}
