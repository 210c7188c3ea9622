package operator

import (
	"context"
	"encoding/json"
	"fmt"

	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
)

// claimVersions are the resource.k8s.io versions tide reads claims in, in
// order of preference: v1 (Kubernetes 1.34 on) and v1beta2 have one shape
// (read as v1beta2 and converted), v1beta1 is read as is.
var claimVersions = []string{"v1", "v1beta2", "v1beta1"}

// claims reads the cluster's ResourceClaims and ResourceClaimTemplates for
// the demand model in the first of claimVersions the cluster serves: a pass
// calls it only when a pod has DRA claims. When they cannot be read,
// Claims says why (the pods' devices are then not counted, and the pods
// are told so).
func (o *Operator) claims(ctx context.Context) demand.Claims {
	kc := o.cfg.Kube
	if kc == nil {
		return demand.Claims{Why: "tide kube has no Kubernetes client to read ResourceClaims with"}
	}
	why := func(what string, err error) demand.Claims {
		if apierrors.IsForbidden(err) {
			return demand.Claims{Why: "tide kube may not list " + what + " (deploy/rbac.yaml grants it)"}
		}
		return demand.Claims{Why: fmt.Sprintf("list %s: %v", what, err)}
	}
	for _, v := range claimVersions {
		c := demand.Claims{Served: true, Version: v, Claims: map[string]*resourcev1beta1.ResourceClaim{},
			Templates: map[string]*resourcev1beta1.ResourceClaimTemplate{}}
		if v == "v1beta1" {
			cl, err := kc.ResourceV1beta1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				break
			} else if err != nil {
				return why("ResourceClaims", err)
			}
			tl, err := kc.ResourceV1beta1().ResourceClaimTemplates(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return why("ResourceClaimTemplates", err)
			}
			for i := range cl.Items {
				c.Claims[cl.Items[i].Namespace+"/"+cl.Items[i].Name] = &cl.Items[i]
			}
			for i := range tl.Items {
				c.Templates[tl.Items[i].Namespace+"/"+tl.Items[i].Name] = &tl.Items[i]
			}
			return c
		}
		// v1 and v1beta2: one shape; client-go of Kubernetes 1.33 has no
		// typed v1 client, so both are read as JSON into v1beta2's types.
		rest := kc.ResourceV1beta2().RESTClient()
		var cl resourcev1beta2.ResourceClaimList
		raw, err := rest.Get().AbsPath("/apis/resource.k8s.io/" + v + "/resourceclaims").Do(ctx).Raw()
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return why("ResourceClaims", err)
		}
		if err := json.Unmarshal(raw, &cl); err != nil {
			return why("ResourceClaims", err)
		}
		var tl resourcev1beta2.ResourceClaimTemplateList
		raw, err = rest.Get().AbsPath("/apis/resource.k8s.io/" + v + "/resourceclaimtemplates").Do(ctx).Raw()
		if err != nil {
			return why("ResourceClaimTemplates", err)
		}
		if err := json.Unmarshal(raw, &tl); err != nil {
			return why("ResourceClaimTemplates", err)
		}
		for i := range cl.Items {
			c.Claims[cl.Items[i].Namespace+"/"+cl.Items[i].Name] = demand.ClaimV1beta2(&cl.Items[i])
		}
		for i := range tl.Items {
			c.Templates[tl.Items[i].Namespace+"/"+tl.Items[i].Name] = demand.TemplateV1beta2(&tl.Items[i])
		}
		return c
	}
	return demand.Claims{Why: "the cluster serves no resource.k8s.io API (v1 from Kubernetes 1.34; before, v1beta2 or v1beta1 " +
		"with the DynamicResourceAllocation feature gate and --runtime-config)"}
}
