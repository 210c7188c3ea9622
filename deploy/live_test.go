package deploy_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/nodepool"
)

// TestManifestsOnRealAPIServer installs the CRD and RBAC on a real
// kube-apiserver, creates the example NodePool (the apiserver applies the
// schema's defaults and tide reads the stored spec back), sees invalid
// NodePools refused with the field named, writes the status subresource and
// reads the printer columns.
func TestManifestsOnRealAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	if err := c.Create(deploy.All()); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		_, body, _ := c.Do(http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodepools.tide.dev", nil)
		return strings.Contains(string(body), `"type":"Established","status":"True"`), "CRD not established"
	})
	example, err := os.ReadFile("examples/nodepool-gpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The group's discovery may lag the Established condition by a moment.
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		err := c.Create(example)
		return err == nil, "create example: " + errString(err)
	})
	code, body, err := c.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/gpu", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("get: %d %s %v", code, body, err)
	}
	var stored struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(body, &stored); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stored.Spec), `"capacity":"on-demand"`) {
		t.Errorf("schema default for offerings[].capacity not applied: %s", stored.Spec)
	}
	p, err := nodepool.Parse("gpu", stored.Spec)
	if err != nil {
		t.Fatalf("tide cannot read the stored spec: %v", err)
	}
	if p.Config.Scaling.Policy != "utilization" || p.Config.Scaling.MinUtilization != 50 {
		t.Fatalf("scaling = %+v", p.Config.Scaling)
	}

	// A NodePool without scaling gets the default policy from the schema.
	minimal := []byte(`{"apiVersion":"tide.dev/v1alpha1","kind":"NodePool","metadata":{"name":"cpu"},
		"spec":{"nodes":{"min":1,"max":3},"provider":{"type":"kwok"},"offerings":[{"type":"c4","cpu":4,"memory":"16Gi","price":0.2}]}}`)
	if code, body, _ := c.Do(http.MethodPost, "/apis/tide.dev/v1alpha1/nodepools", minimal); code != http.StatusCreated ||
		!strings.Contains(string(body), `"policy":"tide"`) {
		t.Fatalf("minimal pool: %d %s", code, body)
	}

	for _, tc := range []struct{ spec, want string }{
		{`{"nodes":{"min":3,"max":2},"provider":{"type":"kwok"}}`, "min must be at most max"},
		{`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"scaling":{"policy":"magic"}}`, "spec.scaling.policy"},
		{`{"nodes":{"min":0,"max":2},"provider":{"type":"gce"}}`, "spec.provider.type"},
		{`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"scaling":{"scale_down_delay":"soon"}}`, "spec.scaling.scale_down_delay"},
		{`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_taints":[{"key":"a","effect":"Never"}]}`, "spec.node_taints[0].effect"},
		{`{"provider":{"type":"kwok"}}`, "spec.nodes"},
	} {
		obj := `{"apiVersion":"tide.dev/v1alpha1","kind":"NodePool","metadata":{"name":"bad"},"spec":` + tc.spec + `}`
		code, body, _ := c.Do(http.MethodPost, "/apis/tide.dev/v1alpha1/nodepools", []byte(obj))
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), tc.want) {
			t.Errorf("spec %s: %d %s, want 422 naming %q", tc.spec, code, body, tc.want)
		}
	}

	status := map[string]any{"apiVersion": "tide.dev/v1alpha1", "kind": "NodePool", "metadata": map[string]any{"name": "gpu"},
		"status": map[string]any{"current": 2, "target": 3, "marked": 1, "pending": 4, "lastDecision": "scale up to 3",
			"conditions": []map[string]any{{"type": "Ready", "status": "True", "reason": "Operational", "message": "2 nodes ready",
				"lastTransitionTime": "2026-11-25T00:00:00Z"}}}}
	var cur struct {
		Metadata map[string]any `json:"metadata"`
	}
	_ = json.Unmarshal(body, &cur)
	status["metadata"].(map[string]any)["resourceVersion"] = cur.Metadata["resourceVersion"]
	if code, body, _ := c.Do(http.MethodPut, "/apis/tide.dev/v1alpha1/nodepools/gpu/status", status); code != http.StatusOK {
		t.Fatalf("status update: %d %s", code, body)
	}
	code, body, _ = c.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/gpu", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if code != http.StatusOK {
		t.Fatalf("table: %d %s", code, body)
	}
	var table struct {
		ColumnDefinitions []struct{ Name string }
		Rows              []struct{ Cells []any }
	}
	if err := yaml.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, cd := range table.ColumnDefinitions {
		cols = append(cols, cd.Name)
	}
	row, _ := json.Marshal(table.Rows)
	if !strings.HasPrefix(strings.Join(cols, ","), "Name,Policy,Min,Max,Current,Target,Marked,Ready") ||
		!strings.Contains(string(row), `["gpu","utilization",0,10,2,3,1,"True"`) {
		t.Fatalf("columns %v rows %s", cols, row)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
