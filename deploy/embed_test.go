package deploy

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/kube/provreq"
)

// jsonFields returns the JSON names of t's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func get(t *testing.T, m map[string]any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			t.Fatalf("no %s in schema", strings.Join(path, "."))
		}
		m = next
	}
	return m
}

// TestCRDMirrorsConfig keeps the NodePool schema in step with tide's YAML
// pool config: every scaling knob of config.Scaling is in the schema and
// nothing else is, the spec holds every pool field but name and selector,
// and provider.type takes every provider type of the config.
func TestCRDMirrorsConfig(t *testing.T) {
	var crd map[string]any
	if err := yaml.Unmarshal(CRD, &crd); err != nil {
		t.Fatal(err)
	}
	versions := get(t, crd, "spec")["versions"].([]any)
	schema := get(t, versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties")
	spec := get(t, schema, "spec", "properties")
	scaling := keys(get(t, spec, "scaling", "properties"))
	if want := jsonFields(reflect.TypeOf(config.Scaling{})); !slices.Equal(scaling, want) {
		t.Errorf("spec.scaling properties = %v, config.Scaling has %v", scaling, want)
	}
	for _, f := range jsonFields(reflect.TypeOf(config.Pool{})) {
		if _, ok := spec[f]; !ok && f != "name" && f != "selector" {
			t.Errorf("spec lacks pool field %q", f)
		}
	}
	for _, f := range []string{"node_labels", "node_taints"} {
		if _, ok := spec[f]; !ok {
			t.Errorf("spec lacks %q", f)
		}
	}
	var types []string
	for _, v := range get(t, spec, "provider", "properties", "type")["enum"].([]any) {
		types = append(types, v.(string))
	}
	if want := slices.Sorted(slices.Values(config.ProviderTypes)); !slices.Equal(slices.Sorted(slices.Values(types)), want) {
		t.Errorf("spec.provider.type enum = %v, config.ProviderTypes has %v", types, want)
	}
	if _, ok := get(t, versions[0].(map[string]any), "subresources")["status"]; !ok {
		t.Error("no status subresource")
	}
}

func TestAllIsValidYAMLStream(t *testing.T) {
	docs := strings.Split(string(All()), "\n---\n")
	var kinds []string
	for _, d := range docs {
		var obj struct{ Kind string }
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("%v in %q", err, d)
		}
		kinds = append(kinds, obj.Kind)
	}
	want := []string{"CustomResourceDefinition", "CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		// kubelet NodePools: the bootstrap tokens' Role in kube-system, and kubeadm's TLS bootstrap bindings
		"Role", "RoleBinding", "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds = %v, want %v", kinds, want)
	}
}

// TestProvisioningRequestCRD: the CRD serves what internal/kube/provreq
// reads, under Cluster Autoscaler's names (group, kind, plural, v1 stored,
// v1beta1 served), so either CRD serves tide.
func TestProvisioningRequestCRD(t *testing.T) {
	var crd map[string]any
	if err := yaml.Unmarshal(ProvisioningRequestCRD, &crd); err != nil {
		t.Fatal(err)
	}
	s := get(t, crd, "spec")
	names := get(t, s, "names")
	if s["group"] != provreq.Group || names["kind"] != provreq.Kind || names["plural"] != provreq.Resource || s["scope"] != "Namespaced" ||
		get(t, crd, "metadata")["name"] != provreq.Resource+"."+provreq.Group {
		t.Fatalf("names %v in group %v", names, s["group"])
	}
	versions := s["versions"].([]any)
	if len(versions) != 2 {
		t.Fatalf("%d versions, want v1 and v1beta1", len(versions))
	}
	for i, want := range []string{provreq.Version, "v1beta1"} {
		v := versions[i].(map[string]any)
		if v["name"] != want || v["served"] != true || v["storage"] != (i == 0) {
			t.Fatalf("version %d: %v", i, v)
		}
		if _, ok := get(t, v, "subresources")["status"]; !ok {
			t.Fatalf("version %s has no status subresource", want)
		}
		props := get(t, v, "schema", "openAPIV3Schema", "properties")
		spec := get(t, props, "spec", "properties")
		if got := keys(spec); !slices.Equal(got, []string{"parameters", "podSets", "provisioningClassName"}) {
			t.Errorf("%s spec properties %v", want, got)
		}
		item := get(t, spec, "podSets", "items", "properties")
		if got := keys(item); !slices.Equal(got, []string{"count", "podTemplateRef"}) {
			t.Errorf("%s podSets[] properties %v", want, got)
		}
		if _, ok := get(t, item, "podTemplateRef", "properties")["name"]; !ok {
			t.Errorf("%s podTemplateRef lacks name", want)
		}
		if got := keys(get(t, props, "status", "properties")); !slices.Equal(got, []string{"conditions", "provisioningClassDetails"}) {
			t.Errorf("%s status properties %v", want, got)
		}
	}
}
