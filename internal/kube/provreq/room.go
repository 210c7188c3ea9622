package provreq

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/policy"
)

// Room is the free capacity of a cluster's Nodes that can take pods now:
// Ready, schedulable, not being deleted and not marked for deletion; each
// Node's allocatable resources less the requests of the unfinished pods
// bound to it. Place finds and books part of it.
type Room struct {
	nodes []*roomNode
}

type roomNode struct {
	node  *corev1.Node
	match demand.Pool // the Node's labels and taints, for demand.Match
	free  capacity.Resources
}

// NewRoom returns the room of nodes given the pods (bound ones count).
func NewRoom(nodes []*corev1.Node, pods []*corev1.Pod) *Room {
	r := &Room{}
	byName := map[string]*roomNode{}
	for _, n := range nodes {
		if !usable(n) {
			continue
		}
		rn := &roomNode{node: n, free: demand.Resources(n.Status.Allocatable), match: demand.Pool{Name: n.Name, Labels: n.Labels}}
		for _, t := range n.Spec.Taints {
			rn.match.Taints = append(rn.match.Taints, demand.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
		}
		r.nodes = append(r.nodes, rn)
		byName[n.Name] = rn
	}
	slices.SortFunc(r.nodes, func(a, b *roomNode) int { return strings.Compare(a.node.Name, b.node.Name) })
	for _, p := range pods {
		if rn := byName[p.Spec.NodeName]; rn != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			rn.free = rn.free.Sub(demand.Requests(p))
		}
	}
	return r
}

// usable: Ready, schedulable, not going, not marked.
func usable(n *corev1.Node) bool {
	if n.Spec.Unschedulable || n.DeletionTimestamp != nil || !demand.Mark(n).IsZero() {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Place finds room for every one of pods, each on the first Node (in
// name order) that on accepts (nil: any), whose labels and taints the
// pod's node selector, required node affinity and tolerations allow, and
// where its requests fit: all of them or none. It reports whether they
// fit, and returns the function that books that room (the room is
// unchanged until it is called) and returns the Nodes booked.
func (r *Room) Place(pods []*corev1.Pod, on func(*corev1.Node) bool) (book func() []*corev1.Node, ok bool) {
	free := map[*roomNode]capacity.Resources{}
	type spot struct {
		n   *roomNode
		req capacity.Resources
	}
	var at []spot
	allowed := map[string]map[*roomNode]bool{} // pod shape → Nodes it may go on
	for _, p := range pods {
		req := demand.Requests(p)
		key := req.String() + "|" + fmt.Sprint(p.Spec.NodeSelector, p.Spec.Affinity, p.Spec.Tolerations)
		if allowed[key] == nil {
			allowed[key] = map[*roomNode]bool{}
			for _, n := range r.nodes {
				if on != nil && !on(n.node) {
					continue
				}
				if fits, _ := demand.Match(&n.match, p); fits {
					allowed[key][n] = true
				}
			}
		}
		var got *roomNode
		for _, n := range r.nodes {
			if !allowed[key][n] {
				continue
			}
			f, seen := free[n]
			if !seen {
				f = n.free
			}
			if req.Fits(f) {
				free[n], got = f.Sub(req), n
				break
			}
		}
		if got == nil {
			return func() []*corev1.Node { return nil }, false
		}
		at = append(at, spot{got, req})
	}
	return func() []*corev1.Node {
		var nodes []*corev1.Node
		for _, s := range at {
			s.n.free = s.n.free.Sub(s.req)
			if !slices.Contains(nodes, s.n.node) {
				nodes = append(nodes, s.n.node)
			}
		}
		return nodes
	}, true
}

// Pool is a NodePool as Never needs it: what demand matching knows, and
// its max.
type Pool struct {
	demand.Pool
	Max int
}

// Never says why none of pools can ever hold all of pods at once (""
// when one can): for each pool, a pod it does not admit, or that the pods
// packed onto new nodes of its offerings need more than its max of nodes,
// or that those nodes cross one of its limits (counted from an empty
// pool: what it could hold were it free). A pool without offerings is
// taken to hold anything it admits.
func Never(pools []Pool, pods []*corev1.Pod) string {
	if len(pools) == 0 {
		return "no NodePool exists"
	}
	type shape struct {
		pod  *corev1.Pod
		req  capacity.Resources
		n    int
		offs []capacity.Offering
	}
	var why []string
	for i := range pools {
		p := &pools[i]
		var shapes []*shape
		byKey := map[string]*shape{}
		bad := ""
		for _, pod := range pods {
			req := demand.Requests(pod)
			key := req.String() + "|" + fmt.Sprint(pod.Spec.NodeSelector, pod.Spec.Affinity, pod.Spec.Tolerations)
			if s := byKey[key]; s != nil {
				s.n++
				continue
			}
			offs, reason := demand.Allowed(&p.Pool, pod)
			if reason != "" {
				bad = reason
				break
			}
			s := &shape{pod: pod, req: req, n: 1, offs: offs}
			byKey[key] = s
			shapes = append(shapes, s)
		}
		if bad != "" {
			why = append(why, fmt.Sprintf("pool %s: %s", p.Name, bad))
			continue
		}
		if len(p.Offerings) == 0 {
			return ""
		}
		// One packing when every shape may go on the same offerings (the
		// usual case); else each shape on its own nodes (more nodes than
		// a joint packing: a request that fits that way fits).
		var packs [][]*shape
		same := true
		for _, s := range shapes[1:] {
			if !sameOfferings(s.offs, shapes[0].offs) {
				same = false
			}
		}
		if same {
			packs = [][]*shape{shapes}
		} else {
			for _, s := range shapes {
				packs = append(packs, []*shape{s})
			}
		}
		used, held, reason := 0, policy.Held{}, ""
		for _, pk := range packs {
			groups := make([]capacity.Pending, len(pk))
			for j, s := range pk {
				groups[j] = capacity.Pending{Requests: s.req, Count: s.n}
			}
			offs := pk[0].offs
			res := binpack.Pack(groups, offs, binpack.WithMaxNew(max(p.Max-used, 0)))
			if res.UnplacedTotal > 0 {
				reason = fmt.Sprintf("%s need more than its max of %d nodes", npods(len(pods)), p.Max)
				break
			}
			used += len(res.New)
			for _, n := range res.New {
				o := offs[n.Offering]
				if w := p.Limits.Crosses(held, o.Resources, o.PricePerHour); w != "" {
					reason = fmt.Sprintf("%s need %d or more nodes, past %s", npods(len(pods)), held.Nodes+1, w)
					break
				}
				held.Nodes++
				held.Resources = held.Resources.Add(o.Resources)
				held.CostPerHour += o.PricePerHour
			}
			if reason != "" {
				break
			}
		}
		if reason == "" {
			return ""
		}
		why = append(why, fmt.Sprintf("pool %s: %s", p.Name, reason))
	}
	return strings.Join(why, "; ")
}

func sameOfferings(a, b []capacity.Offering) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name() != b[i].Name() {
			return false
		}
	}
	return true
}

// Admitted reports whether one of pools admits every one of pods (its
// labels, taints and offerings; see demand.Allowed).
func Admitted(pools []Pool, pods []*corev1.Pod) bool {
	for i := range pools {
		ok := true
		for _, pod := range pods {
			if _, why := demand.Allowed(&pools[i].Pool, pod); why != "" {
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
