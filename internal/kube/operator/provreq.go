package operator

import (
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

// requests is one pass's work on the ProvisioningRequests (a
// provreq.Plan), with the objects to write to and what the demand report
// adds.
type requests struct {
	provreq.Plan
	objs map[string]*unstructured.Unstructured // by "namespace/name"
	// poolOf is the pool a waiting atomic request's nodes are bought on.
	poolOf map[string]string
}

// provisioning reads the ProvisioningRequests tide answers, the
// PodTemplates they name (with their PriorityClasses' priorities) and
// plans the pass (provreq.NewPlan). Without the CRD (or the right to read
// it) it does nothing; the error says why only when it is not the CRD's
// absence.
//
// The pools a request is checked against ("no pool can ever hold it",
// --pools) are every NodePool whose spec parses and that is not being
// deleted, also one whose provider cannot be built right now: a passing
// outage does not fail a request for good.
func (o *Operator) provisioning(ctx context.Context, nodes []*corev1.Node, pods []*corev1.Pod) (requests, error) {
	rs := requests{Plan: provreq.NewPlan(provreq.PlanInput{}), objs: map[string]*unstructured.Unstructured{}}
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
	in := provreq.PlanInput{Nodes: nodes, Pods: pods, Now: o.clk.Now(), Booking: o.cfg.Booking, OnlyAdmitted: len(o.cfg.Pools) > 0}
	for i := range list.Items {
		obj := &list.Items[i]
		r, err := provreq.Parse(obj.Object)
		if err != nil {
			o.log.Warn("ProvisioningRequest not read", "err", err)
			continue
		}
		if provreq.Supported(r.Class) {
			in.Requests = append(in.Requests, r)
			rs.objs[r.Key()] = obj
		}
	}
	if len(in.Requests) == 0 {
		o.metrics.requests(nil)
		return rs, nil
	}
	var tl corev1.PodTemplateList
	if err := o.cfg.Client.List(ctx, &tl); err != nil {
		return rs, fmt.Errorf("list PodTemplates: %w", err)
	}
	if err := o.resolvePriorities(ctx, tl.Items); err != nil {
		o.log.Warn("PodTemplates' priority classes not read; their pods count at priority 0", "err", err)
	}
	in.Templates = map[string]map[string]*corev1.PodTemplate{}
	for i := range tl.Items {
		t := &tl.Items[i]
		if in.Templates[t.Namespace] == nil {
			in.Templates[t.Namespace] = map[string]*corev1.PodTemplate{}
		}
		in.Templates[t.Namespace][t.Name] = t
	}
	for _, name := range slices.Sorted(maps.Keys(o.runners)) {
		if r := o.runners[name]; !r.deleting && r.pool.Config.Name != "" {
			in.Pools = append(in.Pools, provreq.Pool{Pool: r.pool.Demand(), Max: r.pool.Config.Nodes.Max})
		}
	}
	rs.Plan = provreq.NewPlan(in)
	o.metrics.requests(rs.States)
	return rs, nil
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
				rs.Held[pool]++ // being bought for
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
	for i := range rs.Items {
		it := &rs.Items[i]
		obj := rs.objs[it.Request.Key()]
		it.Outcome.On(rs.poolOf[it.Request.Key()])
		// Its waiting consumers are told why nothing is bought for them
		// alone, once per state of the request.
		for _, p := range it.Waiting {
			live[p.UID] = true
			msg := fmt.Sprintf("tide: this pod consumes ProvisioningRequest %s (%s): its capacity is bought and booked for the request, not for the pod alone",
				it.Request.Name, it.Outcome.State)
			if o.consumerMsg[p.UID] != msg {
				o.consumerMsg[p.UID] = msg
				o.event(p, corev1.EventTypeNormal, "ConsumesProvisioningRequest", msg)
			}
		}
		for _, c := range it.Outcome.Changed {
			o.log.Info("ProvisioningRequest", "request", it.Request.Key(), "class", it.Request.Class, "condition", c.Type,
				"status", string(c.Status), "reason", c.Reason, "message", c.Message)
			typ := corev1.EventTypeNormal
			if (c.Type == provreq.Failed && c.Status == "True") || (c.Type == provreq.Accepted && c.Status == "False") {
				typ = corev1.EventTypeWarning
			}
			o.event(obj, typ, c.Reason, "tide: "+c.Type+"="+string(c.Status)+": "+c.Message)
		}
		before, _ := json.Marshal(it.Request.Conditions)
		after, err := json.Marshal(it.Outcome.Conditions)
		if err != nil {
			return err
		}
		if string(before) == string(after) {
			continue
		}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": it.Outcome.Conditions}})
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ProvisioningRequestGVK)
		u.SetNamespace(it.Request.Namespace)
		u.SetName(it.Request.Name)
		if err := o.cfg.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("ProvisioningRequest %s: write status: %w", it.Request.Key(), err))
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
