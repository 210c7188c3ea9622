// Package deploy holds what installs tide: the Kubernetes manifests of
// tide's Kubernetes mode (the NodePool CRD, the ProvisioningRequest CRD, the RBAC of the controller, its
// Deployment; kustomization.yaml gathers them), embedded so that `tide kube
// install` prints exactly the files shipped here; the systemd units
// (systemd/), the .deb/.rpm configuration (package/) and, in grafana/, the
// dashboard of tide's metrics.
package deploy

import (
	_ "embed"
	"strings"
)

// CRD is the NodePool CustomResourceDefinition (crd-nodepool.yaml).
//
//go:embed crd-nodepool.yaml
var CRD []byte

// ProvisioningRequestCRD is Cluster Autoscaler's ProvisioningRequest
// CustomResourceDefinition (autoscaling.x-k8s.io, same schema), which tide
// kube answers (crd-provisioningrequest.yaml).
//
//go:embed crd-provisioningrequest.yaml
var ProvisioningRequestCRD []byte

// RBAC is the namespace, service account, roles and bindings of the
// controller (rbac.yaml).
//
//go:embed rbac.yaml
var RBAC []byte

// All returns every manifest as one multi-document YAML stream, the CRDs
// first.
func All() []byte {
	out := append([]byte{}, CRD...)
	out = append(out, "---\n"...)
	out = append(out, ProvisioningRequestCRD...)
	out = append(out, "---\n"...)
	return append(out, RBAC...)
}

// Deployment is tide kube's Deployment (two replicas on a Lease), its
// metrics Service and PodDisruptionBudget (kube/deployment.yaml), with the
// placeholder image "tide".
//
//go:embed kube/deployment.yaml
var Deployment []byte

// AllWithDeployment returns All() followed by Deployment with its image set
// to image: what kubectl apply -k deploy/ creates.
func AllWithDeployment(image string) []byte {
	out := All()
	out = append(out, "---\n"...)
	return append(out, strings.ReplaceAll(string(Deployment), "\n          image: tide\n", "\n          image: "+image+"\n")...)
}
