package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

const sketch = `
pools:
  - name: gpu
    provider: {type: local}
    nodes: {min: 0, max: 8, desired: 2}
    offerings:
      - {type: g8, cpu: 32, memory: 256Gi, gpus: 8, price: 24.5, capacity: on-demand}
      - {type: g8, cpu: 32, memory: 256Gi, gpus: 8, price: 9.1, capacity: spot,
         interruption_probability: 0.05, interruption_penalty: 40}
    selector: {labels: {accelerator: gpu}}
    scaling:
      policy: tide
      cooldown: 30s
      idle_timeout: 60s
      reconcile_interval: 15s
      target_capacity: 100
      scale_step: {min: 1, max: 10000}
      scale_in_datapoints: 15
      min_utilization: 80
      min_unutilized_nodes: 0
      scale_down_delay: 10m
      protect_first_node: true
  - name: cpu
    provider: {type: sim}
    nodes: [1, 4]
    offerings:
      - {type: c4, cpu: 4, memory: 16Gi, price: 0.2}
    scaling: {policy: skyward, slots_per_node: 4, cooldown: 5}
`

// TestDesignSketchParses checks that the pool sketch of DESIGN.md is a valid config.
func TestDesignSketchParses(t *testing.T) {
	f, err := Parse("tide.yaml", []byte(sketch))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Pools) != 2 {
		t.Fatalf("got %d pools", len(f.Pools))
	}
	gpu, ok := f.Pool("gpu")
	if !ok {
		t.Fatal("no gpu pool")
	}
	if gpu.Nodes != (capacity.NodeSpec{Min: 0, Desired: 2, Max: 8, Elastic: true}) {
		t.Fatalf("nodes = %+v", gpu.Nodes)
	}
	if len(gpu.Offerings) != 2 || gpu.Offerings[1].Kind != capacity.Spot || gpu.Offerings[0].Resources.GPUs != 8 {
		t.Fatalf("offerings = %+v", gpu.Offerings)
	}
	if gpu.Selector.Labels["accelerator"] != "gpu" || !gpu.Scaling.ProtectFirstNode {
		t.Fatalf("selector/scaling = %+v %+v", gpu.Selector, gpu.Scaling)
	}
	pc := gpu.PolicyConfig()
	if err := pc.Validate(); err != nil {
		t.Fatal(err)
	}
	if pc.Cooldown != 30*time.Second || pc.ScaleDownDelay != 10*time.Minute || pc.MaxStep != 10000 {
		t.Fatalf("policy config = %+v", pc)
	}
	cpu, _ := f.Pool("cpu")
	if cpu.PolicyConfig().Cooldown != 5*time.Second || cpu.ReconcileEvery() != DefaultReconcileInterval {
		t.Fatalf("cpu pool = %+v", cpu.Scaling)
	}
}

func TestErrorsNameFilePoolAndField(t *testing.T) {
	base := "pools:\n  - name: gpu\n    provider: {type: local}\n    offerings: [{type: c4, cpu: 4, price: 1}]\n"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"no pools", "pools: []\n", []string{"t.yaml: pools: at least one pool"}},
		{"unknown top field", "pool: []\n", []string{"t.yaml", "pool: unknown field"}},
		{"unknown pool field", base + "    nodes: 1\n    colour: red\n", []string{`pool "gpu"`, "colour: unknown field"}},
		{"nodes missing", base, []string{`pool "gpu": nodes: must be set`}},
		{"desired above max", base + "    nodes: {min: 1, desired: 9, max: 4}\n", []string{`pool "gpu": nodes.desired: 9 is above max 4`}},
		{"bad policy", base + "    nodes: 1\n    scaling: {policy: magic}\n", []string{`pool "gpu": scaling.policy: unknown policy "magic"`}},
		{"bad duration", base + "    nodes: 1\n    scaling: {cooldown: soon}\n", []string{"cooldown", "want a duration"}},
		{"negative duration", base + "    nodes: 1\n    scaling: {cooldown: -5s}\n", []string{"must not be negative"}},
		{"bad target", base + "    nodes: 1\n    scaling: {target_capacity: 150}\n", []string{`pool "gpu": scaling.target_capacity: must be within 1..100`}},
		{"bad quantity", "pools:\n  - name: gpu\n    provider: {type: local}\n    nodes: 1\n    offerings: [{type: c4, cpu: 4, memory: 4GB, price: 1}]\n", []string{`pool "gpu": offerings[0].memory`}},
		{"bad provider", "pools:\n  - name: gpu\n    provider: {type: ec2}\n    nodes: 1\n    scaling: {policy: skyward}\n", []string{`provider.type: unknown provider "ec2"`}},
		{"bad name", "pools:\n  - name: GPU_pool\n    provider: {type: local}\n    nodes: 1\n    scaling: {policy: skyward}\n", []string{"name:", "DNS label"}},
		{"duplicate", "pools:\n  - {name: a, provider: {type: local}, nodes: 1, scaling: {policy: skyward}}\n  - {name: a, provider: {type: local}, nodes: 1, scaling: {policy: skyward}}\n", []string{`pool "a": name: duplicate`}},
		{"needs offerings", "pools:\n  - {name: a, provider: {type: local}, nodes: 1}\n", []string{`pool "a": offerings: policy tide needs at least one offering`}},
		{"wrong type", base + "    nodes: 1\n    scaling: {slots_per_node: many}\n", []string{"slots_per_node", "want int"}},
		{"not yaml", "pools: [\n", []string{"t.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tide.yaml")
	if err := os.WriteFile(path, []byte(sketch), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path + ".missing"); err == nil || !strings.Contains(err.Error(), "reading config") {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sketch))
	f.Add([]byte("pools: [{name: a, provider: {type: local}, nodes: [0, 2]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, p := range cfg.Pools {
			pc := p.PolicyConfig()
			if err := pc.Validate(); err != nil {
				t.Fatalf("accepted pool %q fails policy validation: %v", p.Name, err)
			}
		}
	})
}

// TestEvaluateEvery: the autoscale loop's tick is the shorter of the
// cooldown and the reconcile interval, and 5 s without a cooldown.
func TestEvaluateEvery(t *testing.T) {
	for _, tc := range []struct {
		cooldown, reconcile, want time.Duration
	}{
		{0, 0, 5 * time.Second},
		{0, 2 * time.Second, 5 * time.Second},
		{30 * time.Second, 0, DefaultReconcileInterval},
		{10 * time.Second, 15 * time.Second, 10 * time.Second},
		{30 * time.Second, time.Second, time.Second},
	} {
		p := Pool{Scaling: Scaling{Cooldown: Duration(tc.cooldown), ReconcileInterval: Duration(tc.reconcile)}}
		if got := p.EvaluateEvery(); got != tc.want {
			t.Errorf("cooldown %s, reconcile %s: %s, want %s", tc.cooldown, tc.reconcile, got, tc.want)
		}
	}
}
