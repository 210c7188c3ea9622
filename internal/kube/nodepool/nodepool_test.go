package nodepool

import (
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/poolspec"
	"github.com/tide-project/tide/internal/policy"
)

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/examples/nodepool-gpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Metadata struct{ Name string } `json:"metadata"`
		Spec     map[string]any        `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	spec, _ := yaml.Marshal(obj.Spec)
	js, err := yaml.YAMLToJSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(obj.Metadata.Name, js)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config
	if c.Name != "gpu" || c.Provider.Type != "kwok" || c.Nodes != capacity.Elastic(0, 10) {
		t.Fatalf("config = %+v", c)
	}
	pc := c.PolicyConfig()
	if err := pc.Validate(); err != nil {
		t.Fatal(err)
	}
	if pc.Policy != policy.Utilization || pc.MinUtilization != 50 || pc.MinUnutilizedNodes != 1 || pc.ScaleDownDelay != 10*time.Minute {
		t.Fatalf("policy config = %+v", pc)
	}
	if len(c.Offerings) != 1 || c.Offerings[0].Resources.GPUs != 8 || c.Offerings[0].Resources.Memory != 256<<30 {
		t.Fatalf("offerings = %+v", c.Offerings)
	}
	if p.Labels[PoolLabel] != "gpu" || p.Labels["accelerator"] != "nvidia" || len(p.Labels) != 2 {
		t.Fatalf("labels = %v", p.Labels)
	}
	if len(p.Taints) != 1 || p.Taints[0] != (Taint{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule}) {
		t.Fatalf("taints = %v", p.Taints)
	}
}

func TestParseErrors(t *testing.T) {
	const off = `"offerings":[{"type":"g8","gpus":8,"price":1}]`
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"not an object", `[]`, "spec:"},
		{"no nodes", `{"provider":{"type":"kwok"},` + off + `}`, "spec.nodes: must be set"},
		{"min above max", `{"nodes":{"min":3,"max":2},"provider":{"type":"kwok"},` + off + `}`, "spec.nodes"},
		{"unknown provider", `{"nodes":{"min":0,"max":2},"provider":{"type":"gce"},` + off + `}`, "spec.provider.type: unknown provider"},
		{"unknown field", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"colour":1,` + off + `}`, "colour"},
		{"bad policy", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"scaling":{"policy":"magic"},` + off + `}`, "spec.scaling.policy"},
		{"bad utilization", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"scaling":{"policy":"utilization","min_utilization":101}}`, "spec.scaling.min_utilization"},
		{"tide needs offerings", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"}}`, "offerings: policy tide needs at least one offering"},
		{"selector", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"selector":{},` + off + `}`, "spec.selector"},
		{"bad label key", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_labels":{"a b":"x"},` + off + `}`, "spec.node_labels: key"},
		{"bad label value", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_labels":{"a":"x y"},` + off + `}`, "spec.node_labels.a"},
		{"pool label", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_labels":{"tide.dev/pool":"other"},` + off + `}`, "set by tide"},
		{"bad effect", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_taints":[{"key":"a","effect":"Never"}],` + off + `}`, "spec.node_taints[0].effect"},
		{"dup taint", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"node_taints":[{"key":"a","effect":"NoSchedule"},{"key":"a","value":"b","effect":"NoSchedule"}],` + off + `}`, "spec.node_taints[1]: duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p", []byte(tc.spec))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseDefaultsAndOrder(t *testing.T) {
	p, err := Parse("cpu", []byte(`{"nodes":{"min":1,"desired":2,"max":4},"provider":{"type":"kwok"},
		"offerings":[{"type":"c4","cpu":4,"memory":"16Gi","price":0.2}],
		"node_taints":[{"key":"z","effect":"NoSchedule"},{"key":"a","effect":"NoExecute"},{"key":"a","effect":"NoSchedule"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Config.Nodes != (capacity.NodeSpec{Min: 1, Desired: 2, Max: 4, Elastic: true}) {
		t.Fatalf("nodes = %+v", p.Config.Nodes)
	}
	var got []string
	for _, tt := range p.Taints {
		got = append(got, tt.Key+":"+tt.Effect)
	}
	if strings.Join(got, ",") != "a:NoExecute,a:NoSchedule,z:NoSchedule" {
		t.Fatalf("taints = %v", got)
	}
	pc := p.Config.PolicyConfig()
	if err := pc.Validate(); err != nil || pc.Policy != policy.Tide {
		t.Fatalf("policy = %q, %v", pc.Policy, err)
	}
}

// TestSameNamesAsDemand: poolspec (the parser) writes its own label and
// effect constants; they must be the ones demand matches pods with.
func TestSameNamesAsDemand(t *testing.T) {
	if poolspec.PoolLabel != demand.PoolLabel || poolspec.NoSchedule != demand.NoSchedule ||
		poolspec.PreferNoSchedule != demand.PreferNoSchedule || poolspec.NoExecute != demand.NoExecute {
		t.Fatal("poolspec's pool label or taint effects differ from demand's")
	}
	p, err := Parse("p", []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}],"node_taints":[{"key":"k","value":"v","effect":"NoExecute"}]}`))
	if err != nil || len(p.Taints) != 1 || p.Taints[0] != (Taint{Key: "k", Value: "v", Effect: NoExecute}) {
		t.Fatalf("Parse = %+v, %v", p, err)
	}
}
