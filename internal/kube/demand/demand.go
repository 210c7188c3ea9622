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
	"fmt"
	"slices"
	"sort"
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

// Requests returns what pod asks of a node: the larger of its containers'
// sum and its largest init container, plus its overhead.
func Requests(pod *corev1.Pod) capacity.Resources {
	var sum capacity.Resources
	for i := range pod.Spec.Containers {
		sum = sum.Add(Resources(pod.Spec.Containers[i].Resources.Requests))
	}
	for i := range pod.Spec.InitContainers {
		sum = maxRes(sum, Resources(pod.Spec.InitContainers[i].Resources.Requests))
	}
	return sum.Add(Resources(pod.Spec.Overhead))
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
// (for the Node objects a provider creates).
func ResourceList(r capacity.Resources) corev1.ResourceList {
	l := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(r.Memory, resource.BinarySI),
	}
	if r.GPUs > 0 {
		l[GPUResource] = *resource.NewQuantity(r.GPUs, resource.DecimalSI)
	}
	for k, v := range r.Extended {
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
	for k, v := range pod.Spec.NodeSelector {
		if got, ok := pool.Labels[k]; !ok || got != v {
			return false, fmt.Sprintf("node selector %s=%s does not match the pool's node labels", k, v)
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		if !anyTerm(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, pool.Labels) {
			return false, "required node affinity does not match the pool's node labels"
		}
	}
	for _, t := range pool.Taints {
		if t.Effect == PreferNoSchedule {
			continue
		}
		if !tolerated(pod.Spec.Tolerations, t) {
			return false, fmt.Sprintf("taint %s=%s:%s is not tolerated", t.Key, t.Value, t.Effect)
		}
	}
	if len(pool.Offerings) > 0 {
		req := Requests(pod)
		for i := range pool.Offerings {
			if req.Fits(pool.Offerings[i].Resources) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("requests %s fit no offering", req)
	}
	return true, ""
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

// Compute builds every pool's pressure from the cluster's nodes and pods.
// Nodes belong to the pool named by their PoolLabel; pods bound to
// a node and not finished are its Running instances (daemons marked);
// unschedulable pods become the Pending demand of the first pool that
// serves them (choose: weight, cost, limits), unless they fit in the room
// left on a schedulable, unmarked Node of a pool that matches them (first
// fit, pools in name order, pods in order): the scheduler will place those
// on its next try, so they count as running there (the Node is not empty)
// rather than as demand, which would launch Nodes twice. The result is
// deterministic.
func Compute(pools []Pool, nodes []*corev1.Node, pods []*corev1.Pod) Report {
	ps := make([]*Pool, len(pools))
	for i := range pools {
		ps[i] = &pools[i]
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	rep := Report{Pressure: map[string]capacity.Pressure{}, Pods: map[string][]string{}}
	index := map[string]*capacity.Node{}
	byPool := map[string][]*capacity.Node{}
	for _, p := range ps {
		rep.Pressure[p.Name] = capacity.Pressure{}
	}
	for _, n := range nodes {
		pool := n.Labels[PoolLabel]
		if _, ok := rep.Pressure[pool]; !ok {
			continue
		}
		cn := &capacity.Node{ID: n.Name, Ordinal: Ordinal(n), Resources: Resources(n.Status.Allocatable), MarkedAt: Mark(n),
			JoinedAt: n.CreationTimestamp.Time}
		index[n.Name] = cn
		byPool[pool] = append(byPool[pool], cn)
	}
	pending := map[string]map[string]*capacity.Pending{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" {
			continue
		}
		cn, ok := index[pod.Spec.NodeName]
		if ok && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			cn.Running = append(cn.Running, capacity.Instance{Requests: Requests(pod), Daemon: Daemon(pod)})
		}
	}
	// Room left on each pool's Nodes that can take pods (not cordoned, not
	// marked for deletion): the scheduler places a waiting pod there on its
	// next try (a Node just joined), so such a pod is not demand for more.
	room := map[string][]*roomy{}
	for _, n := range nodes {
		pool := n.Labels[PoolLabel]
		cn := index[n.Name]
		if cn == nil || n.Spec.Unschedulable || n.DeletionTimestamp != nil || !cn.MarkedAt.IsZero() {
			continue
		}
		room[pool] = append(room[pool], &roomy{node: cn, free: cn.Resources.Sub(cn.Allocated())})
	}
	counted := map[string]capacity.Resources{} // demand counted per pool so far
	joined := map[string]capacity.Resources{}  // what the pool's Nodes hold
	for pool, ns := range byPool {
		for _, n := range ns {
			joined[pool] = joined[pool].Add(n.Resources)
		}
	}
	for _, pod := range pods {
		if !Unschedulable(pod) {
			continue
		}
		var why []string
		var fit []*Pool
		for _, p := range ps {
			ok, reason := Match(p, pod)
			if !ok {
				why = append(why, fmt.Sprintf("pool %s: %s", p.Name, reason))
				continue
			}
			fit = append(fit, p)
		}
		matched := len(fit) > 0
		req := Requests(pod)
		placed := false
		for _, p := range fit {
			if place(room[p.Name], req) {
				placed = true // about to be scheduled on a Node of the pool
				break
			}
		}
		if matched && !placed {
			p := choose(fit, req, counted, joined)
			counted[p.Name] = counted[p.Name].Add(req)
			if pending[p.Name] == nil {
				pending[p.Name] = map[string]*capacity.Pending{}
			}
			key := req.String()
			if pending[p.Name][key] == nil {
				pending[p.Name][key] = &capacity.Pending{Requests: req}
			}
			pending[p.Name][key].Count++
			rep.Pods[p.Name] = append(rep.Pods[p.Name], pod.Namespace+"/"+pod.Name)
		}
		if !matched {
			if len(ps) == 0 {
				why = append(why, "no NodePool exists")
			}
			rep.Unmatched = append(rep.Unmatched, Unmatched{Namespace: pod.Namespace, Name: pod.Name, Reason: strings.Join(why, "; ")})
		}
	}
	for _, p := range ps {
		pr := capacity.Pressure{}
		ns := byPool[p.Name]
		sort.Slice(ns, func(i, j int) bool {
			if ns[i].Ordinal != ns[j].Ordinal {
				return ns[i].Ordinal < ns[j].Ordinal
			}
			return ns[i].ID < ns[j].ID
		})
		for _, n := range ns {
			pr.Nodes = append(pr.Nodes, *n)
		}
		keys := make([]string, 0, len(pending[p.Name]))
		for k := range pending[p.Name] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pr.Pending = append(pr.Pending, *pending[p.Name][k])
		}
		rep.Pressure[p.Name] = pr
		sort.Strings(rep.Pods[p.Name])
	}
	sort.Slice(rep.Unmatched, func(i, j int) bool {
		a, b := rep.Unmatched[i], rep.Unmatched[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return rep
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

// roomy is a Node's room left for waiting pods.
type roomy struct {
	node *capacity.Node
	free capacity.Resources
}

// place takes req out of the first room it fits (first fit) and counts it
// as running there (the Node is as good as busy: not to be marked), reporting
// whether one had it.
func place(rooms []*roomy, req capacity.Resources) bool {
	for _, r := range rooms {
		if req.Fits(r.free) {
			r.free = r.free.Sub(req)
			r.node.Running = append(r.node.Running, capacity.Instance{Requests: req})
			return true
		}
	}
	return false
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
