// Package drain plans the eviction of a node's pods before tide deletes the
// node (seed 001's scale-down, done the Kubernetes way): DaemonSet and static
// pods are left alone (they never hold a node up), a pod annotated
// tide.dev/do-not-disrupt: "true" is never evicted and keeps its node, and a
// PodDisruptionBudget that allows no more disruptions holds its pods back
// until it does. The plan is pure; the controller carries it out through the
// Eviction API, which checks the budgets again.
package drain

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tide-project/tide/internal/kube/demand"
)

// Blocked is a pod that cannot be evicted now, and why.
type Blocked struct {
	Pod    *corev1.Pod
	Reason string
	// Never is true when the pod will never be evicted (do-not-disrupt):
	// the node must not be drained at all.
	Never bool
}

// Plan is what one drain pass does on one node.
type Plan struct {
	// Evict are the pods to evict now, sorted by namespace/name.
	Evict []*corev1.Pod
	// Blocked are the pods that stay for now, sorted by namespace/name.
	Blocked []Blocked
	// Terminating counts the pods already on their way out.
	Terminating int
	// Empty is true when nothing but daemons is left on the node: it may
	// be deleted.
	Empty bool
}

// Disruptable reports whether pod may ever be evicted by tide.
func Disruptable(pod *corev1.Pod) bool {
	return pod.Annotations[demand.DoNotDisrupt] != "true"
}

// Protected reports whether node runs a pod tide must never evict; such a
// node is neither marked nor drained.
func Protected(node string, pods []*corev1.Pod) (bool, string) {
	for _, p := range pods {
		if p.Spec.NodeName == node && running(p) && !demand.Daemon(p) && !Disruptable(p) {
			return true, fmt.Sprintf("pod %s/%s has %s: \"true\"", p.Namespace, p.Name, demand.DoNotDisrupt)
		}
	}
	return false, ""
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// Compute plans one drain pass over node given every pod of the cluster (only
// the node's are considered) and the PodDisruptionBudgets. Budgets are
// consumed as the plan evicts, in namespace/name order, so one pass never
// asks more of a budget than its status allows.
func Compute(node string, pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) Plan {
	var mine []*corev1.Pod
	for _, p := range pods {
		// A deleted pod counts until its object is gone, whatever its
		// phase: a kubelet reports Succeeded or Failed once the containers
		// stopped, then tears the sandbox and volumes down and only then
		// removes the object. Deleting the machine in between strands the
		// pod object (Terminating until the pod GC, 40 s later, takes it).
		if p.Spec.NodeName == node && (running(p) || p.DeletionTimestamp != nil) && !demand.Daemon(p) {
			mine = append(mine, p)
		}
	}
	sort.Slice(mine, func(i, j int) bool {
		if mine[i].Namespace != mine[j].Namespace {
			return mine[i].Namespace < mine[j].Namespace
		}
		return mine[i].Name < mine[j].Name
	})
	allowed := make([]int32, len(pdbs))
	selectors := make([]labels.Selector, len(pdbs))
	for i, b := range pdbs {
		allowed[i] = b.Status.DisruptionsAllowed
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || b.Spec.Selector == nil {
			sel = labels.Nothing() // an invalid or empty selector matches nothing, as in the disruption controller
		}
		selectors[i] = sel
	}
	var plan Plan
	for _, p := range mine {
		if p.DeletionTimestamp != nil {
			plan.Terminating++
			continue
		}
		if !Disruptable(p) {
			plan.Blocked = append(plan.Blocked, Blocked{Pod: p, Never: true,
				Reason: fmt.Sprintf("pod %s/%s has %s: \"true\"", p.Namespace, p.Name, demand.DoNotDisrupt)})
			continue
		}
		var covering []int
		blocked := ""
		for i, b := range pdbs {
			if b.Namespace != p.Namespace || !selectors[i].Matches(labels.Set(p.Labels)) {
				continue
			}
			covering = append(covering, i)
			if allowed[i] <= 0 && blocked == "" {
				blocked = fmt.Sprintf("PodDisruptionBudget %s/%s allows no more disruptions", b.Namespace, b.Name)
			}
		}
		if blocked != "" {
			plan.Blocked = append(plan.Blocked, Blocked{Pod: p, Reason: blocked})
			continue
		}
		for _, i := range covering {
			allowed[i]--
		}
		plan.Evict = append(plan.Evict, p)
	}
	plan.Empty = len(mine) == 0
	return plan
}
