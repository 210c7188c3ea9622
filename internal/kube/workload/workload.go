// Package workload is the Kubernetes side of a pool for tide's pool
// controller (controller.Workload, Inspector): Inspect says which Nodes
// registered, which are unhealthy (NotReady, or a condition the pool
// names) and which run pods that may never be evicted; Cordon marks the Node unschedulable,
// Busy drains a cordoned Node through the Eviction API (drain.Compute says
// which pods may go: DaemonSet pods stay, do-not-disrupt pods are never
// evicted, PodDisruptionBudgets hold) and reports whether anything but
// daemons still runs, and Uncordon makes the Node schedulable again.
package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/drain"
	"github.com/tide-project/tide/internal/kube/kubeapi"
)

// API is the part of the Kubernetes API the workload uses; kubeapi.REST implements it.
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	UpdateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error)
	ListPods(ctx context.Context, fieldSelector string) ([]corev1.Pod, error)
	Evict(ctx context.Context, namespace, name string) error
	ListPDBs(ctx context.Context) ([]policyv1.PodDisruptionBudget, error)
}

// Workload implements controller.Workload on a Kubernetes cluster.
type Workload struct {
	api API
	// nodeName maps a machine id to its Node's name.
	nodeName func(machineID string) string
	log      *slog.Logger
	// conditions are the Node conditions that count as unhealthy when
	// True (RepairOn), besides Ready not True.
	conditions []string
}

var (
	_ controller.Workload   = (*Workload)(nil)
	_ controller.MarkReader = (*Workload)(nil)
)

// New returns the workload of a pool whose machine ids name their Nodes
// through nodeName (tide kube passes its per-pool Node index, which finds
// a Node by the machine label or providerID as well as by name).
func New(api API, nodeName func(string) string, log *slog.Logger) *Workload {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Workload{api: api, nodeName: nodeName, log: log}
}

// setUnschedulable writes spec.unschedulable with compare-and-swap; a Node
// that is gone needs nothing.
func (w *Workload) setUnschedulable(ctx context.Context, n controller.Node, v bool) error {
	for range 8 {
		node, err := w.api.GetNode(ctx, w.nodeName(n.MachineID))
		if errors.Is(err, kubeapi.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if node.Spec.Unschedulable == v {
			return nil
		}
		node.Spec.Unschedulable = v
		if _, err := w.api.UpdateNode(ctx, node); errors.Is(err, kubeapi.ErrConflict) {
			continue
		} else if errors.Is(err, kubeapi.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("node %s keeps changing", w.nodeName(n.MachineID))
}

// Cordon marks the node's Node unschedulable.
func (w *Workload) Cordon(ctx context.Context, n controller.Node) error {
	return w.setUnschedulable(ctx, n, true)
}

// Uncordon makes the node's Node schedulable again.
func (w *Workload) Uncordon(ctx context.Context, n controller.Node) error {
	return w.setUnschedulable(ctx, n, false)
}

// Busy reports whether anything but daemons runs on the node. On a cordoned
// Node it first evicts what the drain plan allows, so that polling Busy
// drains the node.
func (w *Workload) Busy(ctx context.Context, n controller.Node) (bool, error) {
	name := w.nodeName(n.MachineID)
	node, err := w.api.GetNode(ctx, name)
	if errors.Is(err, kubeapi.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	pods, err := w.api.ListPods(ctx, "spec.nodeName="+name)
	if err != nil {
		return false, err
	}
	var pdbs []policyv1.PodDisruptionBudget
	if node.Spec.Unschedulable {
		if pdbs, err = w.api.ListPDBs(ctx); err != nil {
			return false, err
		}
	}
	pp := make([]*corev1.Pod, len(pods))
	for i := range pods {
		pp[i] = &pods[i]
	}
	bp := make([]*policyv1.PodDisruptionBudget, len(pdbs))
	for i := range pdbs {
		bp[i] = &pdbs[i]
	}
	plan := drain.Compute(name, pp, bp)
	if node.Spec.Unschedulable {
		for _, p := range plan.Evict {
			err := w.api.Evict(ctx, p.Namespace, p.Name)
			switch {
			case err == nil:
				w.log.Info("evicted pod", "node", name, "pod", p.Namespace+"/"+p.Name)
			case errors.Is(err, kubeapi.ErrTooManyRequests), errors.Is(err, kubeapi.ErrNotFound):
			default:
				return true, err
			}
		}
		for _, b := range plan.Blocked {
			w.log.Info("pod not evicted", "node", name, "reason", b.Reason)
		}
	}
	return !plan.Empty, nil
}

// MarkedAt reads the node's deletion mark back from its deletion-candidate
// taint (zero when it has none, or when the Node is gone), so a controller
// that takes the pool over keeps the marks of its predecessor.
func (w *Workload) MarkedAt(ctx context.Context, n controller.Node) (time.Time, error) {
	node, err := w.api.GetNode(ctx, w.nodeName(n.MachineID))
	if errors.Is(err, kubeapi.ErrNotFound) {
		return time.Time{}, nil
	} else if err != nil {
		return time.Time{}, err
	}
	return demand.Mark(node), nil
}

// RepairOn makes the Node conditions named (besides Ready) count as
// unhealthy when True, e.g. DiskPressure: the pool's
// lifecycle.repair_conditions. It returns w.
func (w *Workload) RepairOn(conditions ...string) *Workload {
	w.conditions = append([]string(nil), conditions...)
	return w
}

// Inspect tells the controller what the cluster knows of the pool's nodes
// (controller.Inspector): a node is registered once its Node exists,
// unhealthy while its Ready condition is not True or a condition of
// RepairOn is True, and blocked while a pod on it may never be evicted
// (do-not-disrupt). A PodDisruptionBudget that holds a pod for now does
// not block: the drain waits on it through the Eviction API.
func (w *Workload) Inspect(ctx context.Context, nodes []controller.Node) (map[string]controller.NodeInfo, error) {
	out := make(map[string]controller.NodeInfo, len(nodes))
	for _, n := range nodes {
		name := w.nodeName(n.MachineID)
		node, err := w.api.GetNode(ctx, name)
		if errors.Is(err, kubeapi.ErrNotFound) {
			continue
		} else if err != nil {
			return nil, err
		}
		info := controller.NodeInfo{Registered: true, Unhealthy: w.unhealthy(node)}
		pods, err := w.api.ListPods(ctx, "spec.nodeName="+name)
		if err != nil {
			return nil, err
		}
		pp := make([]*corev1.Pod, len(pods))
		for i := range pods {
			pp[i] = &pods[i]
		}
		alloc := demand.Resources(node.Status.Allocatable)
		for _, p := range pp {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || demand.Daemon(p) {
				continue
			}
			req := demand.Requests(p)
			info.Used = info.Used.Add(req)
			if p.Status.StartTime != nil {
				info.WorkHours += time.Since(p.Status.StartTime.Time).Hours() * capacity.WorkShare(req, alloc)
			}
		}
		for _, b := range drain.Compute(name, pp, nil).Blocked {
			if b.Never {
				info.Blocked = b.Reason
				break
			}
		}
		out[n.MachineID] = info
	}
	return out, nil
}

// unhealthy says why node is unhealthy ("" when it is not).
func (w *Workload) unhealthy(node *corev1.Node) string {
	ready := false
	var why []string
	for _, c := range node.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady:
			ready = c.Status == corev1.ConditionTrue
			if !ready {
				why = append(why, fmt.Sprintf("Node NotReady (Ready=%s, %s)", c.Status, c.Reason))
			}
		case c.Status == corev1.ConditionTrue && slices.Contains(w.conditions, string(c.Type)):
			why = append(why, fmt.Sprintf("Node condition %s=True (%s)", c.Type, c.Reason))
		}
	}
	if !ready && len(why) == 0 {
		why = append(why, "Node NotReady (no Ready condition)")
	}
	return strings.Join(why, ", ")
}

var _ controller.Inspector = (*Workload)(nil)
