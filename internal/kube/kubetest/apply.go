package kubetest

import (
	"fmt"
	"net/http"
	"strings"

	"sigs.k8s.io/yaml"
)

// paths maps the kinds tide ships manifests of to their collection paths
// ("%s" is the namespace).
var paths = map[string]string{
	"CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
	"Namespace":                "/api/v1/namespaces",
	"ServiceAccount":           "/api/v1/namespaces/%s/serviceaccounts",
	"ClusterRole":              "/apis/rbac.authorization.k8s.io/v1/clusterroles",
	"ClusterRoleBinding":       "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	"Role":                     "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles",
	"RoleBinding":              "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
	"NodePool":                 "/apis/tide.dev/v1alpha1/nodepools",
	"Node":                     "/api/v1/nodes",
	"Pod":                      "/api/v1/namespaces/%s/pods",
	"Service":                  "/api/v1/namespaces/%s/services",
	"PodDisruptionBudget":      "/apis/policy/v1/namespaces/%s/poddisruptionbudgets",
	"Deployment":               "/apis/apps/v1/namespaces/%s/deployments",
	"PodTemplate":              "/api/v1/namespaces/%s/podtemplates",
	"ProvisioningRequest":      "/apis/autoscaling.x-k8s.io/v1/namespaces/%s/provisioningrequests",
}

// CollectionPath returns the path objects of kind are created under.
func CollectionPath(kind, namespace string) (string, error) {
	p, ok := paths[kind]
	if !ok {
		return "", fmt.Errorf("kubetest: no path known for kind %s", kind)
	}
	if strings.Contains(p, "%s") {
		if namespace == "" {
			namespace = "default"
		}
		p = fmt.Sprintf(p, namespace)
	}
	return p, nil
}

// Create creates every object of a multi-document YAML stream, in order,
// and returns the first error with the apiserver's answer.
func (c *Cluster) Create(stream []byte) error {
	for _, doc := range strings.Split(string(stream), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return err
		}
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(js, &obj); err != nil {
			return err
		}
		if obj.Kind == "" {
			continue
		}
		path, err := CollectionPath(obj.Kind, obj.Metadata.Namespace)
		if err != nil {
			return err
		}
		code, body, err := c.Do(http.MethodPost, path, js)
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("create %s: %d %s", obj.Kind, code, body)
		}
	}
	return nil
}
