package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/provreq"
)

// GVKs of the ProvisioningRequest resource (Cluster Autoscaler's API) and
// its list.
var (
	ProvisioningRequestGVK     = schema.GroupVersionKind{Group: provreq.Group, Version: provreq.Version, Kind: provreq.Kind}
	ProvisioningRequestListGVK = schema.GroupVersionKind{Group: provreq.Group, Version: provreq.Version, Kind: provreq.Kind + "List"}
)

// requests is one pass's work on the ProvisioningRequests: what the
// demand computation must add and leave out, and what to write after it.
type requests struct {
	// standIns are the pods that stand for atomic requests' capacity
	// (demand of one gang each), in the requests' order.
	standIns []*corev1.Pod
	// claimed are the unschedulable pods consuming a live request: the
	// request stands for them, they are not demand of their own.
	claimed map[types.UID]bool
	// held counts, by pool, the requests whose capacity the pool is
	// buying or holds booked: its consolidation moves nothing meanwhile
	// (it would take that room or empty a booked Node).
	held map[string]int
	// poolOf is the pool a waiting atomic request's nodes are bought on.
	poolOf map[string]string
	items  []*requestPass
}

type requestPass struct {
	obj *unstructured.Unstructured
	req provreq.Request
	out provreq.Outcome
	// waiting are its claimed consumers (unschedulable, not demand of
	// their own).
	waiting []*corev1.Pod
}

// provisioning reads the ProvisioningRequests tide answers and steps each
// one (provreq.Step) in the order they were created: earlier requests book
// the room they fit first. Without the CRD (or the right to read it) it
// does nothing; the error says why only when it is not the CRD's absence.
//
// The pools a request is checked against ("no pool can ever hold it",
// --pools) are every NodePool whose spec parses and that is not being
// deleted, also one whose provider cannot be built right now: a passing
// outage does not fail a request for good.
func (o *Operator) provisioning(ctx context.Context, nodes []*corev1.Node, pods []*corev1.Pod) (requests, error) {
	rs := requests{claimed: map[types.UID]bool{}, held: map[string]int{}}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(ProvisioningRequestListGVK)
	if err := o.cfg.Client.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return rs, nil // no ProvisioningRequest CRD: nothing to answer
		}
		if apierrors.IsForbidden(err) {
			// RBAC from before tide answered them: say so once.
			if !o.provreqForbidden {
				o.provreqForbidden = true
				o.log.Warn("ProvisioningRequests not answered: tide kube may not list them (apply the RBAC of `tide kube install`)", "err", err)
			}
			return rs, nil
		}
		return rs, fmt.Errorf("list ProvisioningRequests: %w", err)
	}
	type item struct {
		obj *unstructured.Unstructured
		req provreq.Request
	}
	var items []item
	for i := range list.Items {
		obj := &list.Items[i]
		r, err := provreq.Parse(obj.Object)
		if err != nil {
			o.log.Warn("ProvisioningRequest not read", "err", err)
			continue
		}
		if provreq.Supported(r.Class) {
			items = append(items, item{obj, r})
		}
	}
	if len(items) == 0 {
		o.metrics.requests(nil)
		return rs, nil
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(a.req.Created.Compare(b.req.Created), cmp.Compare(a.req.Key(), b.req.Key()))
	})
	var tl corev1.PodTemplateList
	if err := o.cfg.Client.List(ctx, &tl); err != nil {
		return rs, fmt.Errorf("list PodTemplates: %w", err)
	}
	if err := o.resolvePriorities(ctx, tl.Items); err != nil {
		o.log.Warn("PodTemplates' priority classes not read; their pods count at priority 0", "err", err)
	}
	templates := map[string]map[string]*corev1.PodTemplate{}
	for i := range tl.Items {
		t := &tl.Items[i]
		if templates[t.Namespace] == nil {
			templates[t.Namespace] = map[string]*corev1.PodTemplate{}
		}
		templates[t.Namespace][t.Name] = t
	}
	consumers := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if name := provreq.Consumes(p); name != "" {
			consumers[p.Namespace+"/"+name] = append(consumers[p.Namespace+"/"+name], p)
		}
	}
	var pps []provreq.Pool
	managed := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(o.runners)) {
		if r := o.runners[name]; !r.deleting && r.pool.Config.Name != "" {
			pps = append(pps, provreq.Pool{Pool: r.pool.Demand(), Max: r.pool.Config.Nodes.Max})
			managed[name] = true
		}
	}
	onPools := func(n *corev1.Node) bool { return managed[n.Labels[demand.PoolLabel]] }
	room := provreq.NewRoom(nodes, pods)
	now := o.clk.Now()
	states := map[[2]string]int{}
	for _, it := range items {
		r := it.req
		cons := consumers[r.Key()]
		rest, bound, missing := provreq.Pods(&r, templates[r.Namespace], cons)
		in := provreq.Input{Now: now, Missing: missing, Bound: bound, Booking: o.cfg.Booking}
		var book func() []*corev1.Node
		if missing == "" && !done(&r) {
			all, _, _ := provreq.Pods(&r, templates[r.Namespace], nil)
			if len(o.cfg.Pools) > 0 && !provreq.Admitted(pps, all) {
				continue // another tide kube's NodePools, not ours
			}
			on := onPools
			if r.Class == provreq.ClassCheckCapacity {
				on = nil // any Node's room answers a check
			} else if !isTrue(&r, provreq.Provisioned) {
				in.Never = provreq.Never(pps, all)
			}
			book, in.Fits = room.Place(rest, on)
		}
		out := provreq.Step(&r, in)
		if out.Book && book != nil {
			pools := map[string]bool{}
			for _, n := range book() {
				if p := n.Labels[demand.PoolLabel]; managed[p] && !pools[p] {
					pools[p] = true
					rs.held[p]++
				}
			}
		}
		if out.Demand {
			rs.standIns = append(rs.standIns, rest...)
		}
		var waiting []*corev1.Pod
		if out.Claims {
			for _, p := range cons {
				if p.Spec.NodeName == "" {
					rs.claimed[p.UID] = true
					if demand.Unschedulable(p) {
						waiting = append(waiting, p)
					}
				}
			}
		}
		states[[2]string{r.Class, out.State}]++
		rs.items = append(rs.items, &requestPass{obj: it.obj, req: r, out: out, waiting: waiting})
	}
	o.metrics.requests(states)
	return rs, nil
}

// done: Failed or BookingExpired.
func done(r *provreq.Request) bool {
	return isTrue(r, provreq.Failed) || isTrue(r, provreq.BookingExpired)
}

func isTrue(r *provreq.Request, typ string) bool {
	for _, c := range r.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

// counted notes, from the pass's demand report, on which pool each
// waiting atomic request's nodes are bought (its stand-ins are that pool's
// demand).
func (rs *requests) counted(rep demand.Report) {
	rs.poolOf = map[string]string{}
	for pool, keys := range rep.Pods {
		for _, k := range keys {
			if req, ok := provreq.StandIn(k); ok && rs.poolOf[req] == "" {
				rs.poolOf[req] = pool
				rs.held[pool]++ // being bought for
			}
		}
	}
}

// answer writes each request's conditions (when they changed) and an
// event per changed condition (a waiting atomic request's names the pool
// its nodes are bought on: counted).
func (o *Operator) answer(ctx context.Context, rs requests) error {
	var errs []error
	live := map[types.UID]bool{}
	for _, it := range rs.items {
		it.out.On(rs.poolOf[it.req.Key()])
		// Its waiting consumers are told why nothing is bought for them
		// alone, once per state of the request.
		for _, p := range it.waiting {
			live[p.UID] = true
			msg := fmt.Sprintf("tide: this pod consumes ProvisioningRequest %s (%s): its capacity is bought and booked for the request, not for the pod alone",
				it.req.Name, it.out.State)
			if o.consumerMsg[p.UID] != msg {
				o.consumerMsg[p.UID] = msg
				o.event(p, corev1.EventTypeNormal, "ConsumesProvisioningRequest", msg)
			}
		}
		for _, c := range it.out.Changed {
			o.log.Info("ProvisioningRequest", "request", it.req.Key(), "class", it.req.Class, "condition", c.Type,
				"status", string(c.Status), "reason", c.Reason, "message", c.Message)
			typ := corev1.EventTypeNormal
			if (c.Type == provreq.Failed && c.Status == "True") || (c.Type == provreq.Accepted && c.Status == "False") {
				typ = corev1.EventTypeWarning
			}
			o.event(it.obj, typ, c.Reason, "tide: "+c.Type+"="+string(c.Status)+": "+c.Message)
		}
		before, _ := json.Marshal(it.req.Conditions)
		after, err := json.Marshal(it.out.Conditions)
		if err != nil {
			return err
		}
		if string(before) == string(after) {
			continue
		}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": it.out.Conditions}})
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ProvisioningRequestGVK)
		u.SetNamespace(it.req.Namespace)
		u.SetName(it.req.Name)
		if err := o.cfg.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("ProvisioningRequest %s: write status: %w", it.req.Key(), err))
		}
	}
	for uid := range o.consumerMsg {
		if !live[uid] {
			delete(o.consumerMsg, uid)
		}
	}
	return errors.Join(errs...)
}

// withoutStandIns drops the pods that stand for requests from u.
func withoutStandIns(u []demand.Unmatched) []demand.Unmatched {
	return slices.DeleteFunc(u, func(x demand.Unmatched) bool {
		_, ok := provreq.StandIn(x.Namespace + "/" + x.Name)
		return ok
	})
}

// resolvePriorities gives the pass's templates (its own copies) the
// priority of their PriorityClass (provreq.ResolvePriorities).
func (o *Operator) resolvePriorities(ctx context.Context, templates []corev1.PodTemplate) error {
	need := false
	for i := range templates {
		need = need || templates[i].Template.Spec.Priority == nil
	}
	if !need {
		return nil
	}
	var pcl schedulingv1.PriorityClassList
	if err := o.cfg.Client.List(ctx, &pcl); err != nil {
		return err
	}
	provreq.ResolvePriorities(templates, pcl.Items)
	return nil
}
