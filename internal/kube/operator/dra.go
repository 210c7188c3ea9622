package operator

import (
	"context"
	"fmt"

	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
)

// claims reads the cluster's ResourceClaims and ResourceClaimTemplates
// (resource.k8s.io/v1beta1) for the demand model: a pass calls it only when
// a pod has DRA claims. When they cannot be read, Claims says why (the pods'
// devices are then not counted, and the pods are told so).
func (o *Operator) claims(ctx context.Context) demand.Claims {
	kc := o.cfg.Kube
	if kc == nil {
		return demand.Claims{Why: "tide kube has no Kubernetes client to read ResourceClaims with"}
	}
	why := func(what string, err error) demand.Claims {
		switch {
		case apierrors.IsNotFound(err):
			return demand.Claims{Why: "the cluster serves no resource.k8s.io/v1beta1 (before Kubernetes 1.34 it needs the DynamicResourceAllocation " +
				"feature gate and --runtime-config=resource.k8s.io/v1beta1=true)"}
		case apierrors.IsForbidden(err):
			return demand.Claims{Why: "tide kube may not list " + what + " (deploy/rbac.yaml grants it)"}
		}
		return demand.Claims{Why: fmt.Sprintf("list %s: %v", what, err)}
	}
	cl, err := kc.ResourceV1beta1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return why("ResourceClaims", err)
	}
	tl, err := kc.ResourceV1beta1().ResourceClaimTemplates(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return why("ResourceClaimTemplates", err)
	}
	c := demand.Claims{Served: true, Claims: make(map[string]*resourcev1beta1.ResourceClaim, len(cl.Items)),
		Templates: make(map[string]*resourcev1beta1.ResourceClaimTemplate, len(tl.Items))}
	for i := range cl.Items {
		c.Claims[cl.Items[i].Namespace+"/"+cl.Items[i].Name] = &cl.Items[i]
	}
	for i := range tl.Items {
		c.Templates[tl.Items[i].Namespace+"/"+tl.Items[i].Name] = &tl.Items[i]
	}
	return c
}
