package demand

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/tide-project/tide/internal/capacity"
)

// simNode is a Node as the pass sees it: its pods (bound, then those the
// pass placed on its room) and, for a Node of a pool, its room.
type simNode struct {
	node  *corev1.Node
	cn    *capacity.Node // the pool's view (nil: the Node is in no pool)
	room  bool           // waiting pods may be placed on it
	free  capacity.Resources
	pods  []*corev1.Pod
	ports map[string]bool
	// hits caches, by pod term id, whether a pod on the Node matches the
	// term (cleared when a pod is added).
	hits map[string]bool
}

// has reports whether a pod on n matches t (cached).
func (n *simNode) has(t *podTerm) bool {
	if v, ok := n.hits[t.id]; ok {
		return v
	}
	v := false
	for _, p := range n.pods {
		if t.matches(p) {
			v = true
			break
		}
	}
	if n.hits == nil {
		n.hits = map[string]bool{}
	}
	n.hits[t.id] = v
	return v
}

func (n *simNode) add(pod *corev1.Pod) {
	n.hits = nil
	n.pods = append(n.pods, pod)
	for _, k := range hostPorts(pod) {
		if n.ports == nil {
			n.ports = map[string]bool{}
		}
		n.ports[k] = true
	}
}

func (n *simNode) zone() string { return n.node.Labels[corev1.LabelTopologyZone] }

// freshPod is a pod the pass put on new nodes, in zone ("" when its rules
// chose none).
type freshPod struct {
	pod  *corev1.Pod
	zone string
	pool string
}

// world is the cluster during one pass.
type world struct {
	nodes   []*simNode
	byName  map[string]*simNode
	waiting []*corev1.Pod
	fresh   []freshPod
	// antiOf caches the required anti-affinity terms by hostname of the
	// pods on Nodes (they may refuse a newcomer).
	antiOf map[*corev1.Pod][]podTerm
}

func newWorld(nodes []*corev1.Node) *world {
	w := &world{byName: map[string]*simNode{}, antiOf: map[*corev1.Pod][]podTerm{}}
	for _, n := range nodes {
		sn := &simNode{node: n}
		w.nodes = append(w.nodes, sn)
		w.byName[n.Name] = sn
	}
	return w
}

// colocated is a self-affine hostname group's pods: they go onto one new
// node together.
type colocated struct {
	pool, term string
	req        capacity.Resources
	pods       int
}

// outcome is where the pass put one waiting pod.
type outcome struct {
	room       bool               // on a Node's room
	req        capacity.Resources // its requests with its slots (new nodes)
	slots      []Slot
	group      *colocated // new nodes: with its hostname affinity group
	fail       string     // the pool cannot serve it, and why
	unmodelled string     // what of its rules tide does not model
}

// podTerm is a required pod (anti-)affinity term.
type podTerm struct {
	key  string   // topology key: hostname or zone
	ns   []string // nil: every namespace
	sel  labels.Selector
	id   string
	self bool // the pod matches its own term
}

func (t *podTerm) matches(p *corev1.Pod) bool {
	return (t.ns == nil || slices.Contains(t.ns, p.Namespace)) && t.sel.Matches(labels.Set(p.Labels))
}

// spreadRule is a topology spread constraint with whenUnsatisfiable
// DoNotSchedule (ScheduleAnyway is a preference: it never keeps a pod
// waiting).
type spreadRule struct {
	key        string
	skew       int
	minDomains int
	sel        labels.Selector
	ns         string
	id         string
	honorAff   bool // nodeAffinityPolicy Honor (the default)
	honorTaint bool // nodeTaintsPolicy Honor
}

func (s *spreadRule) matches(p *corev1.Pod) bool {
	return p.Namespace == s.ns && s.sel.Matches(labels.Set(p.Labels))
}

// rules are a pod's placement rules tide models.
type rules struct {
	anti, aff  []podTerm
	spread     []spreadRule
	ports      []string
	unmodelled []string
}

func (r *rules) none() bool {
	return len(r.anti) == 0 && len(r.aff) == 0 && len(r.spread) == 0 && len(r.ports) == 0
}

// topologyKeys are the keys tide models: every node has a hostname, and a
// zone is an offering's.
func modelledKey(k string) bool { return k == corev1.LabelHostname || k == corev1.LabelTopologyZone }

func parseRules(pod *corev1.Pod) rules {
	var r rules
	r.ports = hostPorts(pod)
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAntiAffinity != nil {
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if pt, why := newTerm(pod, t, "anti"); why != "" {
					r.unmodelled = append(r.unmodelled, "pod anti-affinity: "+why)
				} else {
					r.anti = append(r.anti, pt)
				}
			}
		}
		if a.PodAffinity != nil {
			for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if pt, why := newTerm(pod, t, "aff"); why != "" {
					r.unmodelled = append(r.unmodelled, "pod affinity: "+why)
				} else {
					r.aff = append(r.aff, pt)
				}
			}
		}
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		if !modelledKey(c.TopologyKey) {
			r.unmodelled = append(r.unmodelled, fmt.Sprintf("topology spread by %q (tide models %s and %s)", c.TopologyKey, corev1.LabelHostname, corev1.LabelTopologyZone))
			continue
		}
		sel, err := selectorWith(pod, c.LabelSelector, c.MatchLabelKeys, nil)
		if err != nil {
			r.unmodelled = append(r.unmodelled, "topology spread: "+err.Error())
			continue
		}
		s := spreadRule{key: c.TopologyKey, skew: max(int(c.MaxSkew), 1), sel: sel, ns: pod.Namespace,
			honorAff:   c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
			honorTaint: c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor}
		if c.MinDomains != nil {
			s.minDomains = int(*c.MinDomains)
		}
		s.id = fmt.Sprintf("%s|%d|%s|%s", s.key, s.skew, s.ns, sel)
		r.spread = append(r.spread, s)
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		why := "their devices are not counted"
		if d := draReason(pod); d != "" {
			why = "their devices are not counted: " + d
		}
		r.unmodelled = append(r.unmodelled, "dynamic resource claims (DRA): "+why)
	}
	return r
}

func newTerm(pod *corev1.Pod, t corev1.PodAffinityTerm, kind string) (podTerm, string) {
	if !modelledKey(t.TopologyKey) {
		return podTerm{}, fmt.Sprintf("topology key %q (tide models %s and %s)", t.TopologyKey, corev1.LabelHostname, corev1.LabelTopologyZone)
	}
	sel, err := selectorWith(pod, t.LabelSelector, t.MatchLabelKeys, t.MismatchLabelKeys)
	if err != nil {
		return podTerm{}, err.Error()
	}
	pt := podTerm{key: t.TopologyKey, sel: sel}
	switch ns := t.NamespaceSelector; {
	case ns != nil && len(ns.MatchLabels) == 0 && len(ns.MatchExpressions) == 0:
		// the empty selector: every namespace
	case ns != nil:
		return podTerm{}, "a namespace selector (namespaces' labels are not read)"
	case len(t.Namespaces) > 0:
		pt.ns = slices.Sorted(slices.Values(t.Namespaces))
	default:
		pt.ns = []string{pod.Namespace}
	}
	pt.id = fmt.Sprintf("%s|%s|%s|%s", kind, pt.key, strings.Join(pt.ns, ","), sel)
	pt.self = pt.matches(pod)
	return pt, ""
}

// selectorWith is ls (nil selects nothing) with the pod's values of
// matchLabelKeys required and those of mismatchLabelKeys excluded.
func selectorWith(pod *corev1.Pod, ls *metav1.LabelSelector, match, mismatch []string) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, err
	}
	if ls == nil {
		return sel, nil
	}
	for _, ks := range []struct {
		keys []string
		op   selection.Operator
	}{{match, selection.In}, {mismatch, selection.NotIn}} {
		for _, k := range ks.keys {
			v, ok := pod.Labels[k]
			if !ok {
				continue
			}
			req, err := labels.NewRequirement(k, ks.op, []string{v})
			if err != nil {
				return nil, err
			}
			sel = sel.Add(*req)
		}
	}
	return sel, nil
}

// hostPorts returns the host ports pod's containers (and sidecars) bind, as
// "PROTOCOL/port". The host IP is left out: two pods binding the same port
// on different addresses are kept apart (a node more at worst).
func hostPorts(pod *corev1.Pod) []string {
	var out []string
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				out = append(out, string(cmpOr(p.Protocol, corev1.ProtocolTCP))+"/"+strconv.Itoa(int(p.HostPort)))
			}
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func cmpOr(p, def corev1.Protocol) corev1.Protocol {
	if p == "" {
		return def
	}
	return p
}

// anywhere reports whether a pod matching t runs or was placed anywhere.
func (w *world) anywhere(t *podTerm) bool {
	for _, n := range w.nodes {
		for _, p := range n.pods {
			if t.matches(p) {
				return true
			}
		}
	}
	for _, f := range w.fresh {
		if t.matches(f.pod) {
			return true
		}
	}
	return false
}

// inZone reports whether a pod matching t runs or was placed in zone z.
func (w *world) inZone(t *podTerm, z string) bool {
	for _, n := range w.nodes {
		if n.zone() != z {
			continue
		}
		for _, p := range n.pods {
			if t.matches(p) {
				return true
			}
		}
	}
	for _, f := range w.fresh {
		if f.zone == z && t.matches(f.pod) {
			return true
		}
	}
	return false
}

// eligible reports whether node n counts as a domain of s for pod.
func eligible(s *spreadRule, pod *corev1.Pod, n *simNode) bool {
	if s.honorAff && labelsMatch(pod, n.node.Labels) != "" {
		return false
	}
	if s.honorTaint {
		for _, t := range n.node.Spec.Taints {
			if t.Effect != corev1.TaintEffectPreferNoSchedule && !tolerated(pod.Spec.Tolerations, Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}) {
				return false
			}
		}
	}
	return true
}

func count(s *spreadRule, pods []*corev1.Pod) int {
	c := 0
	for _, p := range pods {
		if s.matches(p) {
			c++
		}
	}
	return c
}

// zoneCounts returns s's matching pods by zone over its domains: the zones
// of the eligible Nodes, the extra zones given (a pool's offerings') and,
// when like is a Node, the zones this pass put pods of like's pool on new
// nodes in (they will be Nodes like it, in that zone: domains to
// kube-scheduler once they register).
func (w *world) zoneCounts(s *spreadRule, pod *corev1.Pod, extra []string, like *simNode) map[string]int {
	c := map[string]int{}
	for _, z := range extra {
		if z != "" {
			c[z] += 0
		}
	}
	for _, n := range w.nodes {
		z := n.zone()
		if z == "" || !eligible(s, pod, n) {
			continue
		}
		c[z] += count(s, n.pods)
	}
	if like != nil {
		pool := like.node.Labels[PoolLabel]
		seen := map[string]bool{}
		for _, f := range w.fresh {
			if _, ok := c[f.zone]; ok || f.zone == "" || f.pool != pool || seen[f.zone] {
				continue
			}
			seen[f.zone] = true
			if eligible(s, pod, like.inZone(f.zone)) {
				c[f.zone] += 0
			}
		}
	}
	for _, f := range w.fresh {
		if _, ok := c[f.zone]; ok && s.matches(f.pod) {
			c[f.zone]++
		}
	}
	return c
}

// inZone is a Node like n (labels, taints) in zone z, for eligibility
// checks of a new node of n's pool there.
func (n *simNode) inZone(z string) *simNode {
	nd := &corev1.Node{Spec: corev1.NodeSpec{Taints: n.node.Spec.Taints}}
	nd.Labels = make(map[string]string, len(n.node.Labels))
	for k, v := range n.node.Labels {
		nd.Labels[k] = v
	}
	nd.Labels[corev1.LabelTopologyZone] = z
	return &simNode{node: nd}
}

// minOf is the global minimum of a spread's counts (0 when fewer domains
// than minDomains exist).
func minOf(c map[string]int, minDomains int) int {
	if len(c) == 0 || len(c) < minDomains {
		return 0
	}
	m := -1
	for _, v := range c {
		if m < 0 || v < m {
			m = v
		}
	}
	return m
}

// allows says why pod may not go on Node n by its rules ("" when it may).
func (w *world) allows(n *simNode, pod *corev1.Pod, r *rules) string {
	for _, k := range r.ports {
		if n.ports[k] {
			return "host port " + k + " taken"
		}
	}
	for i := range r.anti {
		t := &r.anti[i]
		switch t.key {
		case corev1.LabelHostname:
			if n.has(t) {
				return "pod anti-affinity"
			}
		default:
			if z := n.zone(); z != "" && w.inZone(t, z) {
				return "pod anti-affinity"
			}
		}
	}
	// The pods on n may refuse pod (their own anti-affinity by hostname).
	for _, p := range n.pods {
		for _, pt := range w.hostAnti(p) {
			if pt.matches(pod) {
				return "anti-affinity of a pod on the node"
			}
		}
	}
	for i := range r.aff {
		t := &r.aff[i]
		ok := false
		switch t.key {
		case corev1.LabelHostname:
			ok = n.has(t)
		default:
			ok = n.zone() != "" && w.inZone(t, n.zone())
		}
		if !ok && !(t.self && !w.anywhere(t)) {
			return "pod affinity"
		}
	}
	for i := range r.spread {
		s := &r.spread[i]
		switch s.key {
		case corev1.LabelHostname:
			m := -1
			for _, o := range w.nodes {
				if eligible(s, pod, o) {
					if c := count(s, o.pods); m < 0 || c < m {
						m = c
					}
				}
			}
			if count(s, n.pods)+1-max(m, 0) > s.skew {
				return "topology spread by hostname"
			}
		default:
			z := n.zone()
			if z == "" {
				return "topology spread by zone: the node has no zone"
			}
			c := w.zoneCounts(s, pod, nil, n)
			if c[z]+1-minOf(c, s.minDomains) > s.skew {
				return "topology spread by zone"
			}
		}
	}
	return ""
}

// hasRoom reports whether one of p's Nodes has room for pod that its
// placement rules allow (place would put it there), without taking it.
func (w *world) hasRoom(p *Pool, pod *corev1.Pod) bool {
	req := Requests(pod)
	r := parseRules(pod)
	for _, n := range w.nodes {
		if !n.room || n.node.Labels[PoolLabel] != p.Name || !req.Fits(n.free) || labelsMatch(pod, n.node.Labels) != "" {
			continue
		}
		if (r.none() && !podsRefuse(n)) || w.allows(n, pod, &r) == "" {
			return true
		}
	}
	return false
}

// placeAll places every one of pods (pod i requesting reqs[i]) in the
// room left on p's Nodes (first fit, their node selectors honoured) if all
// of them fit, and else leaves the room as it was.
func (w *world) placeAll(p *Pool, pods []*corev1.Pod, reqs []capacity.Resources) bool {
	free := map[*simNode]capacity.Resources{}
	at := make([]*simNode, 0, len(pods))
	for i, pod := range pods {
		req := reqs[i]
		var got *simNode
		for _, n := range w.nodes {
			if !n.room || n.node.Labels[PoolLabel] != p.Name || labelsMatch(pod, n.node.Labels) != "" {
				continue
			}
			f, ok := free[n]
			if !ok {
				f = n.free
			}
			if req.Fits(f) {
				free[n], got = f.Sub(req), n
				break
			}
		}
		if got == nil {
			return false
		}
		at = append(at, got)
	}
	for i, n := range at {
		n.free = n.free.Sub(reqs[i])
		n.add(pods[i])
		n.cn.Running = append(n.cn.Running, capacity.Instance{Requests: reqs[i]})
	}
	return true
}

// place puts one waiting pod of pool p (offs: the offerings it may go on;
// byLabels: its node selector or affinity ruled some out) on the room of
// one of the pool's Nodes, or on new nodes with the slots its rules need,
// or says why the pool cannot serve it.
func (w *world) place(p *Pool, offs []capacity.Offering, byLabels bool, pod *corev1.Pod, groups map[string]*colocated) outcome {
	req := Requests(pod)
	r := parseRules(pod)
	out := outcome{req: req}
	unmod := r.unmodelled
	finish := func(o outcome) outcome {
		if o.fail == "" && len(unmod) > 0 {
			o.unmodelled = "counted by its requests alone: " + strings.Join(unmod, "; ")
		}
		return o
	}
	for _, n := range w.nodes {
		if !n.room || n.node.Labels[PoolLabel] != p.Name || !req.Fits(n.free) || labelsMatch(pod, n.node.Labels) != "" {
			continue
		}
		if !r.none() || podsRefuse(n) {
			if w.allows(n, pod, &r) != "" {
				continue
			}
		}
		n.free = n.free.Sub(req)
		n.add(pod)
		n.cn.Running = append(n.cn.Running, capacity.Instance{Requests: req})
		out.room = true
		return finish(out)
	}
	if r.none() && !byLabels {
		w.fresh = append(w.fresh, freshPod{pod: pod, pool: p.Name})
		return finish(out) // the common case: nothing to add
	}
	var slots []Slot
	for i := range r.anti {
		t := &r.anti[i]
		if t.key != corev1.LabelHostname {
			continue
		}
		if t.self {
			slots = append(slots, Slot{Name: slotName("anti", t.id), PerNode: 1})
			continue
		}
		for _, q := range w.waiting {
			if q != pod && t.matches(q) {
				unmod = append(unmod, "required anti-affinity by hostname with other waiting pods it does not match itself")
				break
			}
		}
	}
	for i := range r.spread {
		if s := &r.spread[i]; s.key == corev1.LabelHostname {
			slots = append(slots, Slot{Name: slotName("spread", s.id), PerNode: int64(s.skew)})
		}
	}
	for _, k := range r.ports {
		slots = append(slots, Slot{Name: slotName("port", k), PerNode: 1})
	}
	var group *colocated
	hostAff := 0
	for i := range r.aff {
		t := &r.aff[i]
		if t.key != corev1.LabelHostname {
			continue
		}
		if hostAff++; hostAff > 1 {
			unmod = append(unmod, "more than one required pod affinity by hostname (only the first is modelled)")
			continue
		}
		switch g := groups[t.id]; {
		case g != nil:
			group = g
		case w.anywhere(t):
			return outcome{fail: "required pod affinity by hostname: the pods it must run beside are on Nodes without room for it, and a new node would not have them"}
		case !t.self:
			return outcome{fail: "required pod affinity by hostname: no pod it must run beside exists"}
		default:
			group = &colocated{term: t.id}
			groups[t.id] = group
		}
	}
	// Zones: what the offerings allow, narrowed by the zone rules.
	zones := map[string]bool{}
	for i := range offs {
		zones[offs[i].Zone] = true
	}
	zoned := false
	var spreadCounts []map[string]int
	for i := range r.anti {
		if t := &r.anti[i]; t.key == corev1.LabelTopologyZone {
			zoned = true
			for z := range zones {
				if z != "" && w.inZone(t, z) {
					delete(zones, z)
				}
			}
		}
	}
	for i := range r.aff {
		t := &r.aff[i]
		if t.key != corev1.LabelTopologyZone {
			continue
		}
		zoned = true
		delete(zones, "")
		with := map[string]bool{}
		for z := range zones {
			if w.inZone(t, z) {
				with[z] = true
			}
		}
		switch {
		case len(with) > 0:
			zones = with
		case w.anywhere(t):
			return outcome{fail: "required pod affinity by zone: the pods it must run beside are in zones the pool's offerings are not in"}
		case !t.self:
			return outcome{fail: "required pod affinity by zone: no pod it must run beside exists"}
		}
	}
	for i := range r.spread {
		s := &r.spread[i]
		if s.key != corev1.LabelTopologyZone {
			continue
		}
		zoned = true
		delete(zones, "")
		var extra []string
		for j := range offs {
			extra = append(extra, offs[j].Zone)
		}
		c := w.zoneCounts(s, pod, extra, nil)
		m := minOf(c, s.minDomains)
		for z := range zones {
			if c[z]+1-m > s.skew {
				delete(zones, z)
			}
		}
		spreadCounts = append(spreadCounts, c)
	}
	if len(offs) > 0 && len(zones) == 0 {
		return outcome{fail: "its zone rules (pod affinity, anti-affinity, topology spread) leave no zone of the pool's offerings"}
	}
	zone := ""
	if zoned && len(offs) > 0 {
		// A zone the pool's new nodes already go to (they may share a
		// node), then the zone with the fewest matching pods (spread), then
		// by name.
		used := map[string]bool{}
		for _, f := range w.fresh {
			if f.pool == p.Name {
				used[f.zone] = true
			}
		}
		cands := slices.Sorted(func(yield func(string) bool) {
			for z := range zones {
				if !yield(z) {
					return
				}
			}
		})
		slices.SortStableFunc(cands, func(a, b string) int {
			if used[a] != used[b] {
				if used[a] {
					return -1
				}
				return 1
			}
			for _, c := range spreadCounts {
				if c[a] != c[b] {
					return c[a] - c[b]
				}
			}
			return 0
		})
		zone = cands[0]
	}
	w.fresh = append(w.fresh, freshPod{pod: pod, zone: zone, pool: p.Name})
	if len(offs) > 0 && (byLabels || zoned) {
		// Only these offerings (a packing on the others is what their
		// requests already rule out).
		var names []string
		for i := range offs {
			if !zoned || offs[i].Zone == zone {
				names = append(names, offs[i].Name())
			}
		}
		if len(names) < len(p.Offerings) {
			slots = append(slots, Slot{Name: slotName("only", strings.Join(names, ",")), PerNode: slotMany, Offerings: names})
		}
	}
	if len(slots) > 0 {
		req = req.Clone()
		if req.Extended == nil {
			req.Extended = map[string]int64{}
		}
		for _, s := range slots {
			req.Extended[s.Name]++
		}
	}
	out.req, out.slots, out.group = req, slots, group
	return finish(out)
}

// hostAnti returns p's required anti-affinity terms by hostname (cached).
func (w *world) hostAnti(p *corev1.Pod) []podTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAntiAffinity == nil {
		return nil
	}
	if ts, ok := w.antiOf[p]; ok {
		return ts
	}
	var ts []podTerm
	for _, t := range p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey != corev1.LabelHostname {
			continue
		}
		if pt, why := newTerm(p, t, "anti"); why == "" {
			ts = append(ts, pt)
		}
	}
	w.antiOf[p] = ts
	return ts
}

// podsRefuse reports whether a pod on n has a required anti-affinity (that
// may refuse a newcomer without rules of its own).
func podsRefuse(n *simNode) bool {
	for _, p := range n.pods {
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	return false
}
