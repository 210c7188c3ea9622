// Package provreq answers Cluster Autoscaler's ProvisioningRequest API
// (autoscaling.x-k8s.io/v1) in `tide kube`: a request names pod sets (a
// PodTemplate and a count each) and a provisioning class.
//
//   - best-effort-atomic-scale-up.autoscaling.x-k8s.io: the request's pods
//     are one gang (internal/kube/demand): bought for in one purchase on the
//     pool routing prefers, or not at all. Provisioned turns True once they
//     fit the room of Ready Nodes, and that room is then booked for them
//     (held against other demand and against scale-down) until the pods
//     that consume the request (annotated ConsumeAnnotation) have taken it,
//     or BookingTime has passed (BookingExpired). A request no pool can
//     ever hold (its max, its limits, or no pool admits the pods) Fails.
//   - check-capacity.autoscaling.x-k8s.io: Provisioned says whether the
//     pods fit the room of Ready Nodes now (booked the same way when
//     they do); nothing is ever bought for it.
//
// The package is pure: requests, templates, Nodes and pods come in as
// values, time as an argument; conditions and the pods that stand for a
// request in the demand computation come out. The operator does the I/O.
package provreq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
)

// The API group, version and kind of the ProvisioningRequest resource
// (Cluster Autoscaler's, which tide's CRD matches).
const (
	Group    = "autoscaling.x-k8s.io"
	Version  = "v1"
	Kind     = "ProvisioningRequest"
	Resource = "provisioningrequests"
)

// The provisioning classes tide answers; a request of another class is
// left alone (another controller may own it).
const (
	ClassAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
	ClassCheckCapacity = "check-capacity.autoscaling.x-k8s.io"
)

// ConsumeAnnotation, on a pod, names the request (in the pod's namespace)
// whose capacity the pod uses; LegacyConsumeAnnotation is its older key,
// read as well.
const (
	ConsumeAnnotation       = "autoscaling.x-k8s.io/consume-provisioning-request"
	LegacyConsumeAnnotation = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
)

// Condition types of a request's status that tide sets (the API's
// CapacityRevoked is not set by tide).
const (
	Accepted       = "Accepted"
	Provisioned    = "Provisioned"
	Failed         = "Failed"
	BookingExpired = "BookingExpired"
)

// ValidUntilSeconds is the parameter of an atomic request that bounds, in
// seconds from its creation, how long tide tries before it Fails.
const ValidUntilSeconds = "ValidUntilSeconds"

// BookingTime is how long capacity found or bought for a request stays
// booked for the pods that consume it (Cluster Autoscaler's 10 minutes).
const BookingTime = 10 * time.Minute

// PodSet is one group of a request's pods: count pods like the PodTemplate
// named Template (in the request's namespace).
type PodSet struct {
	// Template names the PodTemplate (spec.podSets[].podTemplateRef.name).
	Template string
	// Count is how many pods like it (spec.podSets[].count).
	Count int
}

// Request is a ProvisioningRequest as tide reads it.
type Request struct {
	// Namespace, Name, UID and Generation are the object's.
	Namespace, Name string
	UID             types.UID
	Generation      int64
	// Created is its creation time: requests are answered in that order.
	Created time.Time
	// Class is spec.provisioningClassName.
	Class string
	// PodSets are spec.podSets.
	PodSets []PodSet
	// Parameters are spec.parameters.
	Parameters map[string]string
	// Conditions are status.conditions as read.
	Conditions []metav1.Condition
}

// Key is "namespace/name".
func (r *Request) Key() string { return r.Namespace + "/" + r.Name }

// Total is the number of pods the request asks for.
func (r *Request) Total() int {
	n := 0
	for _, s := range r.PodSets {
		n += s.Count
	}
	return n
}

// Supported reports whether tide answers requests of class.
func Supported(class string) bool { return class == ClassAtomicScaleUp || class == ClassCheckCapacity }

// wire is the object's JSON shape (the fields tide reads).
type wire struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		ProvisioningClassName string `json:"provisioningClassName"`
		PodSets               []struct {
			PodTemplateRef struct {
				Name string `json:"name"`
			} `json:"podTemplateRef"`
			Count int32 `json:"count"`
		} `json:"podSets"`
		Parameters map[string]string `json:"parameters"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions"`
	} `json:"status"`
}

// Parse reads a request from its unstructured form (as the apiserver
// serves it). Errors name the field.
func Parse(obj map[string]any) (Request, error) {
	var w wire
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &w); err != nil {
		return Request{}, fmt.Errorf("provisioning request: %w", err)
	}
	r := Request{Namespace: w.Metadata.Namespace, Name: w.Metadata.Name, UID: w.Metadata.UID, Generation: w.Metadata.Generation,
		Created: w.Metadata.CreationTimestamp.Time, Class: w.Spec.ProvisioningClassName, Parameters: w.Spec.Parameters,
		Conditions: w.Status.Conditions}
	if len(w.Spec.PodSets) == 0 {
		return r, fmt.Errorf("provisioning request %s: spec.podSets: at least one pod set is needed", r.Key())
	}
	for i, s := range w.Spec.PodSets {
		if s.PodTemplateRef.Name == "" {
			return r, fmt.Errorf("provisioning request %s: spec.podSets[%d].podTemplateRef.name: must be set", r.Key(), i)
		}
		if s.Count < 1 {
			return r, fmt.Errorf("provisioning request %s: spec.podSets[%d].count: must be at least 1, got %d", r.Key(), i, s.Count)
		}
		r.PodSets = append(r.PodSets, PodSet{Template: s.PodTemplateRef.Name, Count: int(s.Count)})
	}
	return r, nil
}

// Consumes returns the name of the request pod consumes ("" for none).
func Consumes(pod *corev1.Pod) string {
	if v := pod.Annotations[ConsumeAnnotation]; v != "" {
		return v
	}
	return pod.Annotations[LegacyConsumeAnnotation]
}

// stand-in pods: the pods that stand for a request in the demand
// computation are named "provreq:<request>:<pod set>:<i>", a name no real
// pod can have (a colon is not allowed), so they never collide.
const standInPrefix = "provreq:"

// StandIn reports whether "namespace/name" (a key of demand.Report) is a
// pod that stands for a request (see Pods), and which request ("namespace/name").
func StandIn(key string) (string, bool) {
	ns, name, _ := strings.Cut(key, "/")
	rest, ok := strings.CutPrefix(name, standInPrefix)
	if !ok {
		return "", false
	}
	req, _, _ := strings.Cut(rest, ":")
	return ns + "/" + req, true
}

// Pods returns the pods that stand for what r still needs: each pod set's
// count of pods made from its template, less the pods consuming r that
// are bound to a Node (each taken from the first pod set whose template
// requests what the pod requests, else from the first with pods left).
// The pods are one gang (demand.GangAnnotation, its size their number)
// and unschedulable, so that demand.Compute books room for them or buys
// their nodes in one purchase. It also returns how many consumers are
// bound, and which templates are missing ("" when none).
func Pods(r *Request, templates map[string]*corev1.PodTemplate, consumers []*corev1.Pod) (pods []*corev1.Pod, bound int, missing string) {
	var absent []string
	left := make([]int, len(r.PodSets))
	reqs := make([]capacity.Resources, len(r.PodSets))
	for i, s := range r.PodSets {
		left[i] = s.Count
		t := templates[s.Template]
		if t == nil {
			absent = append(absent, s.Template)
			continue
		}
		reqs[i] = demand.Requests(&corev1.Pod{Spec: t.Template.Spec})
	}
	if len(absent) > 0 {
		return nil, 0, "PodTemplate " + strings.Join(absent, ", ") + " not found in namespace " + r.Namespace
	}
	for _, c := range consumers {
		if c.Spec.NodeName == "" || finished(c) {
			continue
		}
		bound++
		req := demand.Requests(c)
		at := -1
		for i := range left {
			if left[i] > 0 && reqs[i].String() == req.String() {
				at = i
				break
			}
		}
		for i := range left {
			if at < 0 && left[i] > 0 {
				at = i
			}
		}
		if at >= 0 {
			left[at]--
		}
	}
	n := 0
	for _, k := range left {
		n += k
	}
	gang := standInPrefix + r.Name
	for i, s := range r.PodSets {
		t := templates[s.Template]
		for j := range left[i] {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace,
				Name:   fmt.Sprintf("%s%s:%d:%d", standInPrefix, r.Name, i, j),
				UID:    types.UID(fmt.Sprintf("%s:%d:%d", r.UID, i, j)),
				Labels: t.Template.Labels, Annotations: map[string]string{}},
				Spec: *t.Template.Spec.DeepCopy()}
			for k, v := range t.Template.Annotations {
				p.Annotations[k] = v
			}
			p.Annotations[demand.GangAnnotation] = gang
			p.Annotations[demand.GangSizeAnnotation] = strconv.Itoa(n)
			p.Spec.NodeName = ""
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
			pods = append(pods, p)
		}
	}
	return pods, bound, ""
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil
}

// ResolvePriorities sets the spec.priority of each template that has
// none from its priorityClassName, or, without one, from the class that
// is the cluster's global default, as admission does for a pod: a
// request's pods are then bought for at their consumers' priority.
// Templates naming a class that does not exist are left as they are.
func ResolvePriorities(templates []corev1.PodTemplate, classes []schedulingv1.PriorityClass) {
	byName := map[string]int32{}
	var def *int32
	for i := range classes {
		pc := &classes[i]
		byName[pc.Name] = pc.Value
		if pc.GlobalDefault {
			def = &pc.Value
		}
	}
	for i := range templates {
		s := &templates[i].Template.Spec
		if s.Priority != nil {
			continue
		}
		if v, ok := byName[s.PriorityClassName]; ok {
			s.Priority = &v
		} else if s.PriorityClassName == "" && def != nil {
			v := *def
			s.Priority = &v
		}
	}
}
