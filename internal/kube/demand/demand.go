// Package demand turns what a Kubernetes cluster shows (pods and nodes) into
// the capacity.Pressure report of each NodePool, the same report the head's
// scheduler publishes for a tide pool, so that the same policies and the same
// reconciler decide.
//
// An unschedulable pod (PodScheduled=False, reason Unschedulable) is demand of
// a pool whose nodes it could run on: the pool's node labels satisfy its node
// selector and required node affinity, it tolerates the pool's NoSchedule and
// NoExecute taints, and its requests (CPU, memory, nvidia.com/gpu and extended
// resources) fit one of the pool's offerings. Among those, it goes where tide
// head routes an instance (internal/routing): the heaviest pool, then the one
// whose cheapest fitting offering costs least, then name order; a pool at its
// max or whose next node would cross one of its limits overflows to the next.
// A pod that fits no pool is reported with the reason of each pool.
//
// The package is pure: no I/O, no clock (time comes as an argument).
package demand

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/routing"
)

// GPUResource is the extended resource name of NVIDIA GPUs; it maps to
// capacity.Resources.GPUs.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// MarkTaintKey is the deletion-candidate taint (seed 001): its value is the
// Unix time, in seconds, at which the node was marked; its effect NoSchedule.
const MarkTaintKey = "tide.dev/deletion-candidate"

// DoNotDisrupt is the pod annotation that, valued "true", keeps a pod from
// ever being evicted by tide (its node is then never drained).
const DoNotDisrupt = "tide.dev/do-not-disrupt"

// OrdinalAnnotation is the node annotation holding the node's ordinal in its pool.
const OrdinalAnnotation = "tide.dev/ordinal"

// PoolLabel is the label every node of a pool carries, valued with the
// pool's name; it links a Node to its NodePool.
const PoolLabel = "tide.dev/pool"

// Taint effects a pool's node taint may have.
const (
	NoSchedule       = "NoSchedule"
	PreferNoSchedule = "PreferNoSchedule"
	NoExecute        = "NoExecute"
)

// Taint is a taint put on every node of a pool.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Pool is what matching needs of a NodePool.
type Pool struct {
	Name   string
	Labels map[string]string
	Taints []Taint
	// Offerings bound what one pod may request; with none, fit is not checked.
	Offerings []capacity.Offering
	// Weight prefers the pool among those that fit a pod (higher first).
	Weight int
	// Limits are the pool's limits and Held what its machines hold now:
	// a pod no Node of the pool has room for goes elsewhere when one more
	// node for it (and for the pods counted before it) would cross one.
	Limits policy.Limits
	Held   policy.Held
	// Short, when set, says why the pool takes no more demand now (at its
	// max with pods waiting); the pod overflows to the next pool.
	Short string
}

// Unmatched is an unschedulable pod no pool can serve, and why.
type Unmatched struct {
	Namespace, Name string
	// Reason says, pool by pool, why the pod fits none.
	Reason string
}

// Report is the outcome of one pass over the cluster.
type Report struct {
	// Pressure is each pool's report, by pool name (every pool given has one).
	Pressure map[string]capacity.Pressure
	// Pods lists, by pool name, the unschedulable pods counted as its demand
	// ("namespace/name"), sorted.
	Pods map[string][]string
	// Unmatched are the unschedulable pods that fit no pool, sorted by namespace/name.
	Unmatched []Unmatched
	// Unmodelled are the pods counted as a pool's demand (or placed on its
	// room) whose placement rules tide models only in part: they are
	// counted by their requests alone (Reason says what is left out),
	// sorted by namespace/name.
	Unmodelled []Unmatched
	// Slots are, by pool name, the made-up resources the pool's pending
	// requests carry (see Slot), sorted by name: a policy packs them onto
	// Augment(offerings, slots).
	Slots map[string][]Slot
}

// Unschedulable reports whether the scheduler marked pod unschedulable and it
// still waits (not bound, not terminating, not finished).
func Unschedulable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// Daemon reports whether pod runs on its node because of the node itself (a
// DaemonSet's pod or a static pod): such pods never hold a node up.
func Daemon(pod *corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" || o.Kind == "Node" {
			return true
		}
	}
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return mirror
}

// Requests returns what pod asks of a node, as the scheduler computes it:
// the larger of (its app containers plus its sidecars, the init containers
// whose restartPolicy is Always) and the peak of its init phase (each plain
// init container plus the sidecars started before it), dimension by
// dimension, plus its overhead.
func Requests(pod *corev1.Pod) capacity.Resources {
	var apps capacity.Resources
	for i := range pod.Spec.Containers {
		apps = apps.Add(Resources(pod.Spec.Containers[i].Resources.Requests))
	}
	var sidecars, peak capacity.Resources
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := Resources(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars = sidecars.Add(r)
			peak = maxRes(peak, sidecars)
			continue
		}
		peak = maxRes(peak, sidecars.Add(r))
	}
	return maxRes(apps.Add(sidecars), peak).Add(Resources(pod.Spec.Overhead))
}

// Resources converts a Kubernetes resource list: cpu to millicores, memory to
// bytes, nvidia.com/gpu to GPUs, and every other extended resource (a name
// with a domain prefix outside kubernetes.io) to Extended. Storage, pods and
// hugepages are not modelled by tide and are dropped.
func Resources(l corev1.ResourceList) capacity.Resources {
	var r capacity.Resources
	for name, q := range l {
		switch {
		case name == corev1.ResourceCPU:
			r.MilliCPU = q.MilliValue()
		case name == corev1.ResourceMemory:
			r.Memory = q.Value()
		case name == GPUResource:
			r.GPUs = q.Value()
		case extended(name):
			if r.Extended == nil {
				r.Extended = map[string]int64{}
			}
			r.Extended[string(name)] = q.Value()
		}
	}
	return r
}

func extended(name corev1.ResourceName) bool {
	s := string(name)
	domain, _, ok := strings.Cut(s, "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io") && !strings.HasPrefix(s, corev1.ResourceHugePagesPrefix)
}

// ResourceList converts tide resources back to a Kubernetes resource list
// (for the Node objects a provider creates). DRA device counts
// (DeviceClassPrefix) are left out: a Node does not advertise them.
func ResourceList(r capacity.Resources) corev1.ResourceList {
	l := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(r.Memory, resource.BinarySI),
	}
	if r.GPUs > 0 {
		l[GPUResource] = *resource.NewQuantity(r.GPUs, resource.DecimalSI)
	}
	for k, v := range r.Extended {
		if strings.HasPrefix(k, DeviceClassPrefix) {
			continue // DRA devices: a driver's ResourceSlices, not the Node's resources
		}
		l[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return l
}

func maxRes(a, b capacity.Resources) capacity.Resources {
	out := capacity.Resources{MilliCPU: max(a.MilliCPU, b.MilliCPU), Memory: max(a.Memory, b.Memory), GPUs: max(a.GPUs, b.GPUs)}
	for _, m := range []map[string]int64{a.Extended, b.Extended} {
		for k, v := range m {
			if out.Extended == nil {
				out.Extended = map[string]int64{}
			}
			out.Extended[k] = max(out.Extended[k], v)
		}
	}
	return out
}

// Match reports whether pod could run on a node of pool, or why not.
func Match(pool *Pool, pod *corev1.Pod) (bool, string) {
	_, why := Allowed(pool, pod)
	return why == "", why
}

// OfferingLabels returns the labels a node of pool launched from offering
// off carries: the pool's, its zone (topology.kubernetes.io/zone, when the
// offering has one) and its instance type (node.kubernetes.io/instance-type).
func OfferingLabels(pool *Pool, off *capacity.Offering) map[string]string {
	l := make(map[string]string, len(pool.Labels)+2)
	maps.Copy(l, pool.Labels)
	if off.Zone != "" {
		l[corev1.LabelTopologyZone] = off.Zone
	}
	if off.Type != "" {
		l[corev1.LabelInstanceTypeStable] = off.Type
	}
	return l
}

// Allowed returns the offerings of pool a node for pod may be launched from
// (its labels satisfy the pod's node selector and required node affinity,
// and the pod's requests fit it), or why there is none. A pool without
// offerings is matched on its labels alone and returns no offering.
func Allowed(pool *Pool, pod *corev1.Pod) ([]capacity.Offering, string) {
	offs, _, why := allowed(pool, pod)
	return offs, why
}

// allowed is Allowed, also saying whether the pod's node selector or
// affinity ruled out one of the pool's offerings (not only its requests).
func allowed(pool *Pool, pod *corev1.Pod) ([]capacity.Offering, bool, string) {
	for _, t := range pool.Taints {
		if t.Effect == PreferNoSchedule {
			continue
		}
		if !tolerated(pod.Spec.Tolerations, t) {
			return nil, false, fmt.Sprintf("taint %s=%s:%s is not tolerated", t.Key, t.Value, t.Effect)
		}
	}
	if len(pool.Offerings) == 0 {
		return nil, false, labelsMatch(pod, pool.Labels)
	}
	var out []capacity.Offering
	why := ""
	byLabels := false
	req := Requests(pod)
	a := pod.Spec.Affinity
	selects := len(pod.Spec.NodeSelector) > 0 || a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
	for i := range pool.Offerings {
		o := &pool.Offerings[i]
		if !selects {
			// no node labels to match: skip making them
		} else if w := labelsMatch(pod, OfferingLabels(pool, o)); w != "" {
			why = cmp.Or(why, w)
			byLabels = true
			continue
		}
		if !req.Fits(o.Resources) {
			why = cmp.Or(why, fmt.Sprintf("requests %s fit no offering", req))
			continue
		}
		out = append(out, *o)
	}
	if len(out) == 0 {
		return nil, false, why
	}
	return out, byLabels, ""
}

// labelsMatch says why a node with labels cannot run pod by its node
// selector and required node affinity ("" when it can).
func labelsMatch(pod *corev1.Pod, labels map[string]string) string {
	bad := "" // the first mismatched key, in name order (a stable reason)
	for k, v := range pod.Spec.NodeSelector {
		if got, ok := labels[k]; (!ok || got != v) && (bad == "" || k < bad) {
			bad = k
		}
	}
	if bad != "" {
		return fmt.Sprintf("node selector %s=%s does not match the pool's node labels", bad, pod.Spec.NodeSelector[bad])
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		if !anyTerm(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, labels) {
			return "required node affinity does not match the pool's node labels"
		}
	}
	return ""
}

// anyTerm reports whether one of the node selector terms matches labels
// (terms are ORed, expressions within a term ANDed). A term that selects by
// field (the node's name) cannot match a node not yet created.
func anyTerm(terms []corev1.NodeSelectorTerm, labels map[string]string) bool {
	for _, term := range terms {
		if len(term.MatchFields) > 0 || len(term.MatchExpressions) == 0 {
			continue
		}
		ok := true
		for _, e := range term.MatchExpressions {
			if !requirement(e, labels) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func requirement(e corev1.NodeSelectorRequirement, labels map[string]string) bool {
	v, has := labels[e.Key]
	switch e.Operator {
	case corev1.NodeSelectorOpIn:
		return has && contains(e.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !has || !contains(e.Values, v)
	case corev1.NodeSelectorOpExists:
		return has
	case corev1.NodeSelectorOpDoesNotExist:
		return !has
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !has || len(e.Values) != 1 {
			return false
		}
		got, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(e.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if e.Operator == corev1.NodeSelectorOpGt {
			return got > want
		}
		return got < want
	}
	return false
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// tolerated applies Kubernetes' toleration rules to one taint.
func tolerated(tols []corev1.Toleration, t Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && string(tol.Effect) != t.Effect {
			continue
		}
		if tol.Key == "" {
			if tol.Operator == corev1.TolerationOpExists {
				return true
			}
			continue
		}
		if tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			return true
		case corev1.TolerationOpEqual, "":
			if tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// Mark returns when node was marked for deletion (zero when unmarked or the
// taint's value is not a Unix time).
func Mark(node *corev1.Node) time.Time {
	for _, t := range node.Spec.Taints {
		if t.Key == MarkTaintKey {
			s, err := strconv.ParseInt(t.Value, 10, 64)
			if err != nil || s <= 0 {
				return time.Time{}
			}
			return time.Unix(s, 0).UTC()
		}
	}
	return time.Time{}
}

// MarkTaint returns the deletion-candidate taint for a mark made at at.
func MarkTaint(at time.Time) corev1.Taint {
	return corev1.Taint{Key: MarkTaintKey, Value: strconv.FormatInt(at.Unix(), 10), Effect: corev1.TaintEffectNoSchedule}
}

// Ordinal returns the node's ordinal in its pool from its annotation, or -1.
func Ordinal(node *corev1.Node) int {
	n, err := strconv.Atoi(node.Annotations[OrdinalAnnotation])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// choose is the pool of fit (in name order, none empty) an unschedulable pod
// with requests req is counted against: routing.Route's choice among them
// (weight, then cost, a pool with a shortfall overflowing), a pool being
// short when it says so (Pool.Short), or when it has limits, the demand
// counted on it before with req does not fit what its machines not yet
// Nodes hold (booting for that demand: held less joined), and one more
// node of a fitting offering, over what it holds and the demand beyond
// those machines, would cross a limit. Pools without offerings are chosen
// only when no pool with offerings fits: the first of them.
func choose(fit []*Pool, req capacity.Resources, counted, joined map[string]capacity.Resources) *Pool {
	byName := map[string]*Pool{}
	rps := make([]routing.Pool, len(fit))
	for i, p := range fit {
		byName[p.Name] = p
		rps[i] = routing.Pool{Name: p.Name, Weight: p.Weight, Offerings: p.Offerings}
	}
	short := func(name string, fits []string) string {
		p := byName[name]
		if p.Short != "" {
			return p.Short
		}
		if p.Limits.IsZero() {
			return ""
		}
		booting := nonNegative(p.Held.Resources.Sub(joined[name]))
		if counted[name].Add(req).Fits(booting) {
			return "" // machines on their way hold it
		}
		h := p.Held
		h.Resources = h.Resources.Add(nonNegative(counted[name].Sub(booting)))
		why := ""
		for _, o := range p.Offerings {
			if !slices.Contains(fits, o.Name()) {
				continue
			}
			if why = p.Limits.Crosses(h, o.Resources, o.PricePerHour); why == "" {
				return ""
			}
		}
		return "at a limit: " + why
	}
	if d := routing.Route(rps, short, nil, req); d.Pool != "" {
		return byName[d.Pool]
	}
	return fit[0]
}

// nonNegative is r with its negative CPU, memory and GPUs made zero.
func nonNegative(r capacity.Resources) capacity.Resources {
	r.MilliCPU, r.Memory, r.GPUs = max(r.MilliCPU, 0), max(r.Memory, 0), max(r.GPUs, 0)
	return r
}

// SetMark returns taints with the deletion-candidate taint for a mark made
// at at (replacing an older mark); taints is not modified.
func SetMark(taints []corev1.Taint, at time.Time) []corev1.Taint {
	return append(ClearMark(taints), MarkTaint(at))
}

// ClearMark returns taints without the deletion-candidate taint; taints is
// not modified.
func ClearMark(taints []corev1.Taint) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints)+1)
	for _, t := range taints {
		if t.Key != MarkTaintKey {
			out = append(out, t)
		}
	}
	return out
}

// GangAnnotation names the gang a pod belongs to (within its namespace):
// the pending pods of a gang are one demand, scaled up for all at once or
// not at all. GangSizeAnnotation is the gang's number of pods; without
// it the gang is the pods that carry the name. Both may also be labels.
const (
	GangAnnotation     = "tide.dev/gang"
	GangSizeAnnotation = "tide.dev/gang-size"
)

// Gang returns the gang pod declares ("" for none, else
// "<namespace>/<name>") and its declared size (0 when not given or not a
// positive integer).
func Gang(pod *corev1.Pod) (string, int) {
	get := func(k string) string {
		if v, ok := pod.Annotations[k]; ok {
			return v
		}
		return pod.Labels[k]
	}
	name := get(GangAnnotation)
	if name == "" {
		return "", 0
	}
	size, err := strconv.Atoi(get(GangSizeAnnotation))
	if err != nil || size < 0 {
		size = 0
	}
	return pod.Namespace + "/" + name, size
}

// Priority returns pod's priority (spec.priority, which admission sets
// from its PriorityClass; 0 when unset).
func Priority(pod *corev1.Pod) int {
	if pod.Spec.Priority != nil {
		return int(*pod.Spec.Priority)
	}
	return 0
}
