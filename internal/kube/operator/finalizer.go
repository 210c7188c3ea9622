package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/drain"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// Finalizer is put on every NodePool tide runs: deleting the NodePool first
// tears its pool down (its Nodes cordoned, drained through the Eviction API
// with scale-down's guards, their machines deleted through the provider and
// the Node objects removed), and only then lets the NodePool go.
const Finalizer = "tide.dev/nodepool"

// deletingKey ends a runner's spec key while its NodePool is being deleted,
// so the deletion builds a new runner (a new controller, which takes the
// pool over at a higher epoch with teardownConfig).
const deletingKey = "\x00deleting"

// teardownConfig is the reconciler configuration of a pool being deleted:
// it may go down to zero nodes at once (no deletion marks, no protected
// first node), whatever its bounds were.
func teardownConfig(c reconcile.Config) reconcile.Config {
	c.Nodes = capacity.Elastic(0, max(c.Nodes.Max, c.Nodes.Desired, c.Nodes.Min, 1))
	c.ScaleDownDelay = 0
	c.ProtectFirstNode = false
	return c
}

// patchFinalizers writes the NodePool's finalizers with a merge patch that
// carries the resourceVersion read, so a concurrent change makes it fail
// (and the next pass tries again) instead of losing a finalizer.
func (o *Operator) patchFinalizers(ctx context.Context, r *runner, finalizers []string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": r.obj.GetResourceVersion()}})
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(NodePoolGVK)
	u.SetName(r.name)
	return o.cfg.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, body))
}

// ensureFinalizer puts Finalizer on a NodePool tide runs.
func (o *Operator) ensureFinalizer(ctx context.Context, r *runner) error {
	if r.obj == nil || slices.Contains(r.obj.GetFinalizers(), Finalizer) {
		return nil
	}
	return o.patchFinalizers(ctx, r, append(slices.Clone(r.obj.GetFinalizers()), Finalizer))
}

// release removes Finalizer: the NodePool may go.
func (o *Operator) release(ctx context.Context, r *runner, typ, reason, msg string) error {
	fs := r.obj.GetFinalizers()
	if !slices.Contains(fs, Finalizer) {
		return nil
	}
	o.event(r.obj, typ, reason, msg) // before: once the NodePool is gone an event would name nothing
	if err := o.patchFinalizers(ctx, r, slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == Finalizer })); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	o.log.Info("NodePool released", "pool", r.name, "why", msg)
	return nil
}

// teardown runs one pass of a pool whose NodePool is being deleted: every
// Node of the pool is drained and deleted through the pool controller
// (cordon, eviction with PodDisruptionBudgets and do-not-disrupt honoured,
// provider Delete, Node removed), demand is ignored, and once the provider
// has no machine of the pool left the finalizer is removed.
func (o *Operator) teardown(ctx context.Context, r *runner, now time.Time, nodes []*corev1.Node) error {
	if r.blocked == "" {
		r.blocked = "started"
		o.event(r.obj, corev1.EventTypeNormal, "Deleting",
			fmt.Sprintf("tide: NodePool %s is being deleted: its %s are drained and deleted before it goes", r.name, plural(len(nodes), "node")))
		r.ctl.SetDesired(policy.Decision{Desired: 0, Reason: policy.NewReason("nodepool-deleted", "the NodePool is being deleted")})
	}
	var errs []error
	tick := func(f func(context.Context) error) {
		if err := f(ctx); err != nil {
			if errors.Is(err, controller.ErrDeposed) {
				r.spec = ""
			}
			errs = append(errs, err)
		}
	}
	tick(r.ctl.Tick)
	// Busy nodes are drained too: the drain evicts what the guards allow
	// and waits for the rest.
	st := r.ctl.Status()
	for _, n := range st.Nodes {
		if !n.Draining {
			r.ctl.ReportBusy(n.ID, false)
		}
	}
	tick(r.ctl.Sync)
	if r.kwok != nil {
		if _, err := r.kwok.Sync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	st = r.ctl.Status()
	if !st.Started || st.Deposed {
		return errors.Join(append(errs, o.writeStatus(ctx, r, now, nodes, nil, st))...)
	}
	left, err := r.prov.List(ctx, provider.Filter{Pool: r.name})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if len(left) == 0 && st.Current == 0 && st.Pending == 0 && len(st.Deleting) == 0 {
		return errors.Join(append(errs, o.release(ctx, r, corev1.EventTypeNormal, "Deleted",
			fmt.Sprintf("tide: every node of NodePool %s is gone; the NodePool is released", r.name)))...)
	}
	if msg := o.blockedText(ctx, r, nodes); msg != "" && msg != r.blocked {
		r.blocked = msg
		o.event(r.obj, corev1.EventTypeWarning, "DeletionBlocked", msg)
	}
	if err := o.writeStatus(ctx, r, now, nodes, nil, st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// blockedText says which of the pool's cordoned Nodes still run pods that
// cannot be evicted now, and why ("" when none).
func (o *Operator) blockedText(ctx context.Context, r *runner, nodes []*corev1.Node) string {
	var pl corev1.PodList
	if err := o.cfg.Client.List(ctx, &pl); err != nil {
		return ""
	}
	pods := make([]*corev1.Pod, len(pl.Items))
	for i := range pl.Items {
		pods[i] = &pl.Items[i]
	}
	pdbs, _ := o.cfg.API.ListPDBs(ctx)
	var why []string
	for _, n := range nodes {
		if !n.Spec.Unschedulable {
			continue
		}
		bp := make([]*policyv1.PodDisruptionBudget, len(pdbs))
		for i := range pdbs {
			bp[i] = &pdbs[i]
		}
		plan := drain.Compute(n.Name, pods, bp)
		for _, b := range plan.Blocked {
			reason := b.Reason
			if b.Never {
				reason = fmt.Sprintf("annotated %s: \"true\"", demand.DoNotDisrupt)
			}
			why = append(why, fmt.Sprintf("pod %s/%s on node %s: %s", b.Pod.Namespace, b.Pod.Name, n.Name, reason))
		}
	}
	if len(why) == 0 {
		return ""
	}
	slices.Sort(why)
	return fmt.Sprintf("tide: NodePool %s is being deleted but %s cannot be evicted yet: %s", r.name,
		plural(len(why), "pod"), strings.Join(why, "; "))
}
