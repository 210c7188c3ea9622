package demand

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/capacity"
)

// SlotPrefix starts the name of every resource tide makes up so that
// packing respects a placement rule (Slot). No Node advertises one.
const SlotPrefix = "slot.tide.dev/"

// slotMany is how much of an "only these offerings" slot a node provides:
// more than any pod count, so that it restricts where a pod goes, never how
// many share a node.
const slotMany = 1 << 30

// Slot is a resource tide makes up so that packing new nodes respects a
// placement rule binpack knows nothing about: each pod under the rule
// requests 1 of it, and every new node of the named offerings provides
// PerNode. Hostname anti-affinity is a slot of 1 per node, a hostname
// topology spread one of maxSkew, a host port one of 1, and a zone choice
// (or any rule that leaves only some of the pool's offerings) one that only
// those offerings provide.
type Slot struct {
	// Name is the made-up resource name (it starts with SlotPrefix).
	Name string
	// PerNode is what one new node provides.
	PerNode int64
	// Offerings names the offerings (capacity.Offering.Name) that provide
	// it; nil: all of the pool's.
	Offerings []string
}

// Augment returns a copy of offs in which every offering also provides the
// slots it is named in (offs is not modified). A policy that packs the
// report's pending pods, slots included, onto these offerings launches what
// the placement rules need.
func Augment(offs []capacity.Offering, slots []Slot) []capacity.Offering {
	out := make([]capacity.Offering, len(offs))
	for i, o := range offs {
		o.Resources = o.Resources.Clone()
		for _, s := range slots {
			if s.Offerings != nil && !slices.Contains(s.Offerings, o.Name()) {
				continue
			}
			if o.Resources.Extended == nil {
				o.Resources.Extended = map[string]int64{}
			}
			o.Resources.Extended[s.Name] = s.PerNode
		}
		out[i] = o
	}
	return out
}

// Compute builds every pool's pressure from the cluster's nodes and pods.
//
// Nodes belong to the pool named by their PoolLabel; pods bound to a node
// and not finished are its Running instances (daemons marked). Each
// unschedulable pod, in the order given, goes to one of the pools whose
// labels, taints and offerings admit it: one with room for it on a Node if
// any, else the one routing prefers (choose: weight, then cost, a pool at
// its max or a limit overflowing), else the others in name order should
// its rules fail there. There it is placed the way the scheduler would
// place it:
//
//   - on the room left on one of the pool's schedulable, unmarked Nodes
//     (first fit), if its placement rules allow that Node: the scheduler
//     puts it there on its next try (a Node just joined), so it counts as
//     running there rather than as demand, which would launch Nodes twice;
//   - otherwise on new nodes: it is Pending demand, its requests carrying
//     the slots (see Slot) its rules need: required pod anti-affinity and
//     affinity by hostname or zone, topology spread constraints by hostname
//     or zone (whenUnsatisfiable DoNotSchedule), host ports, and the zones
//     and instance types its node selector or affinity allow. Pods placed
//     earlier in the pass count for the rules of the later ones (a zone
//     spread fills its zones evenly).
//
// A pod whose rules tide cannot model (another topology key, a namespace
// selector, a non-self anti-affinity with other waiting pods, DRA claims
// that WithDevices did not turn into device requests)
// is counted by its requests alone and listed in Report.Unmodelled; one no
// pool can serve is in Report.Unmatched with the reason of each pool. The
// result is deterministic.
func Compute(pools []Pool, nodes []*corev1.Node, pods []*corev1.Pod) Report {
	ps := make([]*Pool, len(pools))
	for i := range pools {
		ps[i] = &pools[i]
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	rep := Report{Pressure: map[string]capacity.Pressure{}, Pods: map[string][]string{}, Slots: map[string][]Slot{}}
	w := newWorld(nodes)
	byPool := map[string][]*capacity.Node{}
	for _, p := range ps {
		rep.Pressure[p.Name] = capacity.Pressure{}
	}
	poolOf := map[string]*Pool{}
	for _, p := range ps {
		poolOf[p.Name] = p
	}
	for _, sn := range w.nodes {
		pool := sn.node.Labels[PoolLabel]
		if _, ok := rep.Pressure[pool]; !ok {
			continue
		}
		n := sn.node
		sn.cn = &capacity.Node{ID: n.Name, Ordinal: Ordinal(n), Resources: initializing(poolOf[pool], n), MarkedAt: Mark(n),
			JoinedAt: n.CreationTimestamp.Time}
		byPool[pool] = append(byPool[pool], sn.cn)
	}
	var waiting []*corev1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName == "" {
			if Unschedulable(pod) {
				waiting = append(waiting, pod)
			}
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		sn := w.byName[pod.Spec.NodeName]
		if sn == nil {
			continue
		}
		sn.add(pod)
		if sn.cn != nil {
			sn.cn.Running = append(sn.cn.Running, capacity.Instance{Requests: Requests(pod), Daemon: Daemon(pod)})
		}
	}
	// Room left on each pool's Nodes that can take pods (not cordoned, not
	// marked for deletion).
	for _, sn := range w.nodes {
		n := sn.node
		if sn.cn == nil || n.Spec.Unschedulable || n.DeletionTimestamp != nil || !sn.cn.MarkedAt.IsZero() {
			continue
		}
		sn.room = true
		sn.free = sn.cn.Resources.Sub(sn.cn.Allocated())
	}
	w.waiting = waiting
	pending := map[string]map[string]*capacity.Pending{}
	slots := map[string]map[string]Slot{}
	groups := map[string]map[string]*colocated{} // pool → hostname affinity term → pods on one new node
	var groupOrder []*colocated
	counted := map[string]capacity.Resources{} // demand counted per pool so far (limits)
	joined := map[string]capacity.Resources{}  // what the pool's Nodes hold
	for pool, ns := range byPool {
		for _, n := range ns {
			joined[pool] = joined[pool].Add(n.Resources)
		}
	}
	addPending := func(pool string, req capacity.Resources, prio int, gang string, n int) {
		if pending[pool] == nil {
			pending[pool] = map[string]*capacity.Pending{}
		}
		key := fmt.Sprintf("%d|%s|%s", -prio, gang, req.String())
		if pending[pool][key] == nil {
			pending[pool][key] = &capacity.Pending{Requests: req, Priority: prio, Gang: gang}
		}
		pending[pool][key].Count += n
		counted[pool] = counted[pool].Add(req.Scale(int64(n)))
	}
	gangs := gangsOf(pods)
	gangDone := map[string]bool{}
	for _, pod := range waiting {
		if g, _ := Gang(pod); g != "" {
			if !gangDone[g] {
				gangDone[g] = true
				rep.gang(w, ps, gangs[g], g, counted, joined, addPending)
			}
			continue
		}
		var why []string
		served := false
		// The pools that admit the pod: room left on any of their Nodes
		// is taken first (the scheduler places it there); else new nodes
		// of the pool routing prefers (weight, cost, overflow: choose),
		// then of the others in name order should its rules fail there.
		var fit []*Pool
		type admit struct {
			offs     []capacity.Offering
			byLabels bool
		}
		admits := map[string]admit{}
		for _, p := range ps {
			offs, byLabels, reason := allowed(p, pod)
			if reason != "" {
				why = append(why, fmt.Sprintf("pool %s: %s", p.Name, reason))
				continue
			}
			fit = append(fit, p)
			admits[p.Name] = admit{offs, byLabels}
		}
		if len(fit) > 1 {
			roomy := slices.IndexFunc(fit, func(p *Pool) bool { return w.hasRoom(p, pod) })
			first := roomy
			if first < 0 {
				first = slices.Index(fit, choose(fit, Requests(pod), counted, joined))
			}
			if first > 0 {
				fit = append([]*Pool{fit[first]}, slices.Delete(slices.Clone(fit), first, first+1)...)
			}
		}
		for _, p := range fit {
			if groups[p.Name] == nil {
				groups[p.Name] = map[string]*colocated{}
			}
			out := w.place(p, admits[p.Name].offs, admits[p.Name].byLabels, pod, groups[p.Name])
			if out.fail != "" {
				why = append(why, fmt.Sprintf("pool %s: %s", p.Name, out.fail))
				continue
			}
			served = true
			if out.unmodelled != "" {
				rep.Unmodelled = append(rep.Unmodelled, Unmatched{Namespace: pod.Namespace, Name: pod.Name, Reason: out.unmodelled})
			}
			if out.room {
				break // about to be scheduled on a Node of the pool
			}
			rep.Pods[p.Name] = append(rep.Pods[p.Name], pod.Namespace+"/"+pod.Name)
			if slots[p.Name] == nil {
				slots[p.Name] = map[string]Slot{}
			}
			for _, s := range out.slots {
				slots[p.Name][s.Name] = s
			}
			if out.group != nil {
				if out.group.pods == 0 {
					out.group.pool = p.Name
					groupOrder = append(groupOrder, out.group)
				}
				out.group.pods++
				out.group.req = out.group.req.Add(out.req)
				break
			}
			addPending(p.Name, out.req, Priority(pod), "", 1)
			break
		}
		if !served {
			if len(ps) == 0 {
				why = append(why, "no NodePool exists")
			}
			rep.Unmatched = append(rep.Unmatched, Unmatched{Namespace: pod.Namespace, Name: pod.Name, Reason: strings.Join(why, "; ")})
		}
	}
	for _, g := range groupOrder {
		// The pods of a self-affine hostname group go onto one new node
		// together: one item of their summed requests.
		if pending[g.pool] == nil {
			pending[g.pool] = map[string]*capacity.Pending{}
		}
		key := fmt.Sprintf("group %s %s", g.term, g.req)
		pending[g.pool][key] = &capacity.Pending{Requests: g.req, Count: 1}
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
		if len(slots[p.Name]) > 0 {
			for _, k := range slices.Sorted(maps.Keys(slots[p.Name])) {
				rep.Slots[p.Name] = append(rep.Slots[p.Name], slots[p.Name][k])
			}
		}
	}
	byKey := func(u []Unmatched) {
		sort.Slice(u, func(i, j int) bool {
			a, b := u[i], u[j]
			return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
		})
	}
	byKey(rep.Unmatched)
	byKey(rep.Unmodelled)
	return rep
}

// slotName makes a slot's name from its kind and what identifies its rule.
func slotName(kind, id string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	return fmt.Sprintf("%s%s-%016x", SlotPrefix, kind, h.Sum64())
}

// initializing returns a pool Node's allocatable resources, with the GPUs
// and extended resources its offering (found by its instance type and zone
// labels) declares filled in where the Node does not show them yet: a
// device plugin advertises them some time after the kubelet registers the
// Node, and until then the Node is still initializing (Karpenter counts
// such a Node by its instance type's resources as well). Without that, the
// pods waiting for it would launch another Node.
func initializing(p *Pool, n *corev1.Node) capacity.Resources {
	r := Resources(n.Status.Allocatable)
	if p == nil {
		return r
	}
	typ, zone := n.Labels[corev1.LabelInstanceTypeStable], n.Labels[corev1.LabelTopologyZone]
	for i := range p.Offerings {
		o := &p.Offerings[i]
		if typ == "" || o.Type != typ || o.Zone != zone {
			continue
		}
		if r.GPUs == 0 && o.Resources.GPUs > 0 {
			r.GPUs = o.Resources.GPUs
		}
		for k, v := range o.Resources.Extended {
			if r.Extended[k] == 0 && v > 0 {
				if r.Extended == nil {
					r.Extended = map[string]int64{}
				}
				r.Extended[k] = v
			}
		}
		break
	}
	return r
}

// gangDemand is a gang's pods: how many it declares, how many are bound
// to a Node, and its unschedulable ones.
type gangDemand struct {
	size, bound int
	pods        []*corev1.Pod
}

// gangsOf collects the gangs of pods (see Gang), finished pods left out.
func gangsOf(pods []*corev1.Pod) map[string]*gangDemand {
	gangs := map[string]*gangDemand{}
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		g, size := Gang(pod)
		if g == "" {
			continue
		}
		gd := gangs[g]
		if gd == nil {
			gd = &gangDemand{}
			gangs[g] = gd
		}
		gd.size = max(gd.size, size)
		switch {
		case pod.Spec.NodeName != "":
			gd.bound++
		case Unschedulable(pod):
			gd.pods = append(gd.pods, pod)
		}
	}
	return gangs
}

// gang counts gang g's unschedulable pods (at least its declared size
// less its bound pods, so that members not marked unschedulable yet are
// bought for in the same purchase, with the first pod's requests) as one
// demand of one pool: the first that admits every one of its pods and has
// room on its Nodes for all of them (they are about to be scheduled
// there), else the one routing prefers among those that admit them all,
// where all of them are demand (no part takes room, none is left out). Its
// pods may differ (a ProvisioningRequest's pod sets): each distinct shape
// is one pending group of the gang. A gang is counted by its requests: the
// placement rules of its pods are not modelled (Report.Unmodelled says so
// when they have any). When no pool admits every member, all of them are
// unmatched.
func (rep *Report) gang(w *world, ps []*Pool, gd *gangDemand, g string, counted, joined map[string]capacity.Resources,
	add func(pool string, req capacity.Resources, prio int, gang string, n int)) {
	if gd == nil || len(gd.pods) == 0 {
		return
	}
	first := gd.pods[0]
	// Distinct members are checked once: pods of one template share
	// their requests, selectors and tolerations.
	type shape struct {
		pod *corev1.Pod
		req capacity.Resources
		n   int
	}
	var shapes []*shape
	byKey := map[string]*shape{}
	reqs := make([]capacity.Resources, len(gd.pods))
	for i, pod := range gd.pods {
		reqs[i] = Requests(pod)
		key := memberKey(pod, reqs[i])
		s := byKey[key]
		if s == nil {
			s = &shape{pod: pod, req: reqs[i]}
			byKey[key] = s
			shapes = append(shapes, s)
		}
		s.n++
	}
	var why []string
	var fit []*Pool
	for _, p := range ps {
		reason := ""
		for _, s := range shapes {
			if _, reason = Allowed(p, s.pod); reason != "" {
				break
			}
		}
		if reason != "" {
			why = append(why, fmt.Sprintf("pool %s: %s", p.Name, reason))
			continue
		}
		fit = append(fit, p)
	}
	if len(fit) == 0 {
		if len(ps) == 0 {
			why = append(why, "no NodePool exists")
		}
		for _, pod := range gd.pods {
			rep.Unmatched = append(rep.Unmatched, Unmatched{Namespace: pod.Namespace, Name: pod.Name, Reason: strings.Join(why, "; ")})
		}
		return
	}
	extra := max(0, gd.size-gd.bound-len(gd.pods)) // members not seen yet
	for _, s := range shapes {
		if r := parseRules(s.pod); r.none() {
			continue
		}
		for _, pod := range gd.pods {
			rep.Unmodelled = append(rep.Unmodelled, Unmatched{Namespace: pod.Namespace, Name: pod.Name,
				Reason: "counted by its requests alone: the placement rules of a gang's pods are not modelled"})
		}
		break
	}
	if extra == 0 {
		for _, p := range fit {
			if w.placeAll(p, gd.pods, reqs) {
				return
			}
		}
	}
	total := shapes[0].req.Scale(int64(extra))
	for _, s := range shapes {
		total = total.Add(s.req.Scale(int64(s.n)))
	}
	p := choose(fit, total, counted, joined)
	for i, s := range shapes {
		n := s.n
		if i == 0 {
			n += extra
		}
		add(p.Name, s.req, Priority(first), g, n)
	}
	for _, pod := range gd.pods {
		rep.Pods[p.Name] = append(rep.Pods[p.Name], pod.Namespace+"/"+pod.Name)
	}
}

// memberKey tells apart the gang members that matching and packing may
// treat differently: their requests, node selector, affinity and
// tolerations.
func memberKey(pod *corev1.Pod, req capacity.Resources) string {
	var b strings.Builder
	b.WriteString(req.String())
	for _, k := range slices.Sorted(maps.Keys(pod.Spec.NodeSelector)) {
		fmt.Fprintf(&b, "|%s=%s", k, pod.Spec.NodeSelector[k])
	}
	if pod.Spec.Affinity != nil {
		fmt.Fprintf(&b, "|%v", pod.Spec.Affinity.String())
	}
	for _, t := range pod.Spec.Tolerations {
		fmt.Fprintf(&b, "|%s", t.String())
	}
	return b.String()
}
