package provreq

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
)

// A pass over several requests: earlier ones book room first, atomic ones
// count only the Nodes of tide's pools, check-capacity ones any Node,
// waiting consumers are claimed, and the pools holding bookings are named.
func TestNewPlan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g8l := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	nodes := []*corev1.Node{node("gpu-a", "gpu", g8l, true), node("gpu-b", "gpu", g8l, true), node("else", "", g8l, true)}
	tmpl := map[string]map[string]*corev1.PodTemplate{"ml": {"t": template("t", spec(gpu8, map[string]string{"accelerator": "nvidia"}))}}
	pools := []Pool{{Pool: demand.Pool{Name: "gpu", Labels: map[string]string{"accelerator": "nvidia"}, Offerings: []capacity.Offering{g8}}, Max: 4}}
	req := func(name, class string, n int, at time.Duration) Request {
		return Request{Namespace: "ml", Name: name, UID: types.UID(name), Class: class, Created: t0.Add(at), PodSets: []PodSet{{"t", n}}}
	}
	consumer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ml", UID: "c", Annotations: map[string]string{ConsumeAnnotation: "late"}},
		Spec: spec(gpu8, nil), Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}}
	in := PlanInput{Templates: tmpl, Pools: pools, Nodes: nodes, Pods: []*corev1.Pod{consumer}, Now: t0.Add(time.Hour),
		Requests: []Request{
			req("late", ClassAtomicScaleUp, 1, 3*time.Second),  // created last: no room left on gpu-a/b
			req("first", ClassAtomicScaleUp, 2, time.Second),   // books gpu-a and gpu-b
			req("check", ClassCheckCapacity, 1, 2*time.Second), // not on gpu's Nodes: the other Node
			req("check2", ClassCheckCapacity, 1, 2500*time.Millisecond),
			req("huge", ClassAtomicScaleUp, 5, 4*time.Second), // more than max 4
		}}
	plan := NewPlan(in)
	got := map[string]string{}
	for _, it := range plan.Items {
		got[it.Request.Name] = it.Outcome.State
	}
	want := map[string]string{"first": StateProvisioned, "check": StateProvisioned, "check2": StateNoCapacity, "late": StateWaiting, "huge": StateFailed}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: state %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if order := []string{plan.Items[0].Request.Name, plan.Items[1].Request.Name}; order[0] != "first" || order[1] != "check" {
		t.Errorf("items in order %v, want by creation", order)
	}
	// first (provisioned, held on its room) and late (waiting) stand in.
	if len(plan.StandIns) != 3 {
		t.Errorf("%d stand-ins, want first's 2 and late's 1", len(plan.StandIns))
	}
	if plan.Held["gpu"] != 1 {
		t.Errorf("held %v, want gpu holding one request's booking", plan.Held)
	}
	if !plan.Claimed["c"] {
		t.Error("late's waiting consumer not claimed")
	}
	for _, it := range plan.Items {
		if it.Request.Name == "late" && (len(it.Waiting) != 1 || it.Waiting[0] != consumer) {
			t.Errorf("late's waiting consumers %v", it.Waiting)
		}
	}
	if plan.States[[2]string{ClassAtomicScaleUp, StateFailed}] != 1 || plan.States[[2]string{ClassCheckCapacity, StateProvisioned}] != 1 {
		t.Errorf("states %v", plan.States)
	}
	// OnlyAdmitted: a request none of the pools admits is left alone.
	in.OnlyAdmitted = true
	in.Requests = []Request{req("first", ClassAtomicScaleUp, 1, 0)}
	in.Templates = map[string]map[string]*corev1.PodTemplate{"ml": {"t": template("t", spec(gpu8, map[string]string{"accelerator": "amd"}))}}
	if plan := NewPlan(in); len(plan.Items) != 0 || len(plan.StandIns) != 0 {
		t.Errorf("a request for another tide kube's pools was stepped: %+v", plan.Items)
	}
	in.OnlyAdmitted = false
	if plan := NewPlan(in); len(plan.Items) != 1 || plan.Items[0].Outcome.State != StateFailed {
		t.Errorf("without --pools, a request no pool admits fails: %+v", plan.Items)
	}
}
