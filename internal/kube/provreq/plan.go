package provreq

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/kube/demand"
)

// PlanInput is what one pass knows of the cluster's requests.
type PlanInput struct {
	// Requests are the requests of supported classes, in any order.
	Requests []Request
	// Templates are the PodTemplates by namespace, then name.
	Templates map[string]map[string]*corev1.PodTemplate
	// Pools are the NodePools requests are checked against: tide's own
	// (their Nodes' room answers atomic requests).
	Pools []Pool
	// Nodes and Pods are the cluster's.
	Nodes []*corev1.Node
	Pods  []*corev1.Pod
	// Now is the pass's time; Booking how long a booking lasts (0:
	// BookingTime).
	Now     time.Time
	Booking time.Duration
	// OnlyAdmitted: leave alone the requests none of Pools admits
	// (another tide kube's, when each acts on some NodePools only).
	OnlyAdmitted bool
}

// Planned is one request's outcome in a pass.
type Planned struct {
	// Request is the request as read; Outcome what the pass does about it.
	Request Request
	Outcome Outcome
	// Waiting are its consumers it claims that wait unschedulable.
	Waiting []*corev1.Pod
}

// Plan is what a pass does about the requests.
type Plan struct {
	// Items are the requests stepped, in the order they were created
	// (then by namespace/name).
	Items []Planned
	// StandIns are the pods that stand for atomic requests' capacity in
	// the demand computation (put before the cluster's pods, so that they
	// take room before other waiting pods).
	StandIns []*corev1.Pod
	// Claimed are the unbound pods consuming a live request: not demand
	// of their own.
	Claimed map[types.UID]bool
	// Held counts, by pool, the requests whose room is booked on its
	// Nodes.
	Held map[string]int
	// States counts the requests by (class, state).
	States map[[2]string]int
}

// NewPlan steps every request (Step) in the order they were created:
// each one's remaining pods are checked against the room the earlier ones
// left (an atomic request against the Nodes of in.Pools, a check-capacity
// one against every Node), a request that books takes its room, and one
// not yet provisioned is checked for a pool that can ever hold it (Never).
func NewPlan(in PlanInput) Plan {
	plan := Plan{Claimed: map[types.UID]bool{}, Held: map[string]int{}, States: map[[2]string]int{}}
	if len(in.Requests) == 0 {
		return plan
	}
	reqs := slices.Clone(in.Requests)
	slices.SortFunc(reqs, func(a, b Request) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Key(), b.Key()))
	})
	consumers := map[string][]*corev1.Pod{}
	for _, p := range in.Pods {
		if name := Consumes(p); name != "" {
			consumers[p.Namespace+"/"+name] = append(consumers[p.Namespace+"/"+name], p)
		}
	}
	ours := map[string]bool{}
	for _, p := range in.Pools {
		ours[p.Name] = true
	}
	onPools := func(n *corev1.Node) bool { return ours[n.Labels[demand.PoolLabel]] }
	room := NewRoom(in.Nodes, in.Pods)
	for i := range reqs {
		r := &reqs[i]
		cons := consumers[r.Key()]
		rest, bound, missing := Pods(r, in.Templates[r.Namespace], cons)
		st := Input{Now: in.Now, Missing: missing, Bound: bound, Booking: in.Booking}
		var book func() []*corev1.Node
		if missing == "" && !isDone(r) {
			all, _, _ := Pods(r, in.Templates[r.Namespace], nil)
			if in.OnlyAdmitted && !Admitted(in.Pools, all) {
				continue
			}
			on := onPools
			if r.Class == ClassCheckCapacity {
				on = nil // any Node's room answers a check
			} else if !has(r, Provisioned) {
				st.Never = Never(in.Pools, all)
			}
			book, st.Fits = room.Place(rest, on)
		}
		out := Step(r, st)
		if out.Book && book != nil {
			pools := map[string]bool{}
			for _, n := range book() {
				if p := n.Labels[demand.PoolLabel]; ours[p] && !pools[p] {
					pools[p] = true
					plan.Held[p]++
				}
			}
		}
		if out.Demand {
			plan.StandIns = append(plan.StandIns, rest...)
		}
		item := Planned{Request: *r, Outcome: out}
		if out.Claims {
			for _, p := range cons {
				if p.Spec.NodeName != "" {
					continue
				}
				plan.Claimed[p.UID] = true
				if demand.Unschedulable(p) {
					item.Waiting = append(item.Waiting, p)
				}
			}
		}
		plan.States[[2]string{r.Class, out.State}]++
		plan.Items = append(plan.Items, item)
	}
	return plan
}

// has reports whether r's condition typ is True.
func has(r *Request, typ string) bool {
	for _, c := range r.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

// isDone: Failed or BookingExpired (final).
func isDone(r *Request) bool { return has(r, Failed) || has(r, BookingExpired) }
