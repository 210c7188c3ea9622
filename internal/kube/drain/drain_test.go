package drain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
)

func pod(name, node string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func dnd(p *corev1.Pod) { p.Annotations = map[string]string{demand.DoNotDisrupt: "true"} }
func ds(p *corev1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent"}}
}
func app(a string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels = map[string]string{"app": a} }
}

func pdb(name, app string, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

func names(ps []*corev1.Pod) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func TestCompute(t *testing.T) {
	gone := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }
	done := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	for _, tc := range []struct {
		name        string
		pods        []*corev1.Pod
		pdbs        []*policyv1.PodDisruptionBudget
		evict       string
		blocked     []string // reason fragments, in order
		terminating int
		empty       bool
	}{
		{name: "empty node", pods: []*corev1.Pod{pod("elsewhere", "n2")}, empty: true},
		{name: "only daemons and finished pods", pods: []*corev1.Pod{pod("agent", "n1", ds), pod("job", "n1", done)}, empty: true},
		{name: "plain pods evicted, daemon kept", pods: []*corev1.Pod{pod("b", "n1"), pod("a", "n1"), pod("agent", "n1", ds)}, evict: "a,b"},
		{name: "do-not-disrupt never evicted", pods: []*corev1.Pod{pod("a", "n1", dnd), pod("b", "n1")}, evict: "b",
			blocked: []string{"tide.dev/do-not-disrupt"}},
		{name: "pdb with no budget", pods: []*corev1.Pod{pod("a", "n1"), pod("b", "n1", app("db"))},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("web", "web", 0)}, evict: "b",
			blocked: []string{"PodDisruptionBudget default/web allows no more disruptions"}},
		{name: "pdb budget consumed within a pass", pods: []*corev1.Pod{pod("a", "n1"), pod("b", "n1"), pod("c", "n1")},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("web", "web", 2)}, evict: "a,b",
			blocked: []string{"default/web"}},
		{name: "pdb of another namespace", pods: []*corev1.Pod{pod("a", "n1")},
			pdbs:  []*policyv1.PodDisruptionBudget{func() *policyv1.PodDisruptionBudget { b := pdb("web", "web", 0); b.Namespace = "x"; return b }()},
			evict: "a"},
		{name: "terminating pods wait", pods: []*corev1.Pod{pod("a", "n1", gone)}, terminating: 1},
		// A kubelet marks a deleted pod Succeeded when its containers
		// stopped, and removes the object only after tearing it down.
		{name: "deleted pods wait until their object is gone, finished or not",
			pods: []*corev1.Pod{pod("a", "n1", gone, done), pod("job", "n1", done)}, terminating: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute("n1", tc.pods, tc.pdbs)
			if got := names(p.Evict); got != tc.evict {
				t.Errorf("evict = %q, want %q", got, tc.evict)
			}
			if len(p.Blocked) != len(tc.blocked) {
				t.Fatalf("blocked = %+v, want %v", p.Blocked, tc.blocked)
			}
			for i, b := range p.Blocked {
				if !strings.Contains(b.Reason, tc.blocked[i]) {
					t.Errorf("blocked[%d] = %q, want %q", i, b.Reason, tc.blocked[i])
				}
			}
			if p.Terminating != tc.terminating || p.Empty != tc.empty {
				t.Errorf("terminating %d empty %v, want %d %v", p.Terminating, p.Empty, tc.terminating, tc.empty)
			}
		})
	}
}

func TestProtected(t *testing.T) {
	pods := []*corev1.Pod{pod("a", "n1"), pod("keep", "n2", dnd), pod("agent", "n3", ds, dnd)}
	if ok, _ := Protected("n1", pods); ok {
		t.Error("n1 runs no do-not-disrupt pod")
	}
	if ok, why := Protected("n2", pods); !ok || !strings.Contains(why, "default/keep") {
		t.Errorf("n2: %v %q", ok, why)
	}
	if ok, _ := Protected("n3", pods); ok {
		t.Error("a daemon never protects its node")
	}
}
