// Package deploy holds the Kubernetes manifests of tide's Kubernetes mode
// (the NodePool CRD and the RBAC of the controller), embedded so that
// `tide kube install` prints exactly the files shipped here.
package deploy

import _ "embed"

// CRD is the NodePool CustomResourceDefinition (crd-nodepool.yaml).
//
//go:embed crd-nodepool.yaml
var CRD []byte

// RBAC is the namespace, service account, roles and bindings of the
// controller (rbac.yaml).
//
//go:embed rbac.yaml
var RBAC []byte

// All returns every manifest as one multi-document YAML stream, CRD first.
func All() []byte {
	out := append([]byte{}, CRD...)
	out = append(out, "---\n"...)
	return append(out, RBAC...)
}
