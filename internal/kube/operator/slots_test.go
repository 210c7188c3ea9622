package operator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/policy"
)

// TestSlotPolicy: the pool's policy decides on the offerings with the
// slots of the pressure it is given, so three anti-affine pods buy three
// nodes (with the pool's own policy on the plain offerings they fit none:
// their slot is unknown there), and pods without rules buy one; the
// policy built for a set of slots is reused while the slots stay.
func TestSlotPolicy(t *testing.T) {
	cfg := policy.Config{Policy: policy.Karpenter, Nodes: capacity.Elastic(0, 10),
		Offerings: []capacity.Offering{{Type: "c4", PricePerHour: 1, Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}}}}
	base, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sp := &slotPolicy{base: base, cfg: cfg}
	pool := demand.Pool{Name: "p", Labels: map[string]string{demand.PoolLabel: "p"}, Offerings: cfg.Offerings}
	pod := func(name string, anti bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable}}}}
		if anti {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
		}
		return p
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	decide := func(pods ...*corev1.Pod) (policy.Decision, policy.Decision) {
		rep := demand.Compute([]demand.Pool{pool}, nil, pods)
		sp.set(rep.Slots["p"])
		var st policy.State
		var d policy.Decision
		// The karpenter policy batches: decide until the batch closes.
		for i := range 30 {
			d = sp.Decide(policy.Input{Now: now.Add(time.Duration(i) * time.Second), Pressure: rep.Pressure["p"], State: st})
			st = d.State
			if d.Desired > 0 {
				break
			}
		}
		return d, base.Decide(policy.Input{Now: now.Add(30 * time.Second), Pressure: rep.Pressure["p"]})
	}
	d, plain := decide(pod("a", true), pod("b", true), pod("c", true))
	if d.Desired != 3 {
		t.Fatalf("anti-affine pods: desired %d (%s), want 3", d.Desired, d.Reason)
	}
	if plain.Desired == 3 {
		t.Fatalf("the plain policy also bought 3 (%s): the test shows nothing", plain.Reason)
	}
	built := sp.built
	if d, _ = decide(pod("a", true), pod("b", true), pod("c", true)); d.Desired != 3 || sp.built != built {
		t.Fatalf("same slots: desired %d, policy rebuilt %v", d.Desired, sp.built != built)
	}
	if d, _ = decide(pod("a", false), pod("b", false), pod("c", false)); d.Desired != 1 {
		t.Fatalf("pods without rules: desired %d (%s), want 1", d.Desired, d.Reason)
	}
}
