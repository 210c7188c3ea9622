package config

import (
	"strings"
	"testing"
	"time"
)

func TestLifecycleSection(t *testing.T) {
	base := "pools:\n  - name: gpu\n    provider: {type: local}\n    nodes: [0, 4]\n    offerings: [{type: c4, cpu: 4, price: 1}]\n"
	f, err := Parse("t.yaml", []byte(base+`    lifecycle:
      launch_timeout: 3m
      registration_timeout: 90s
      repair_after: 5m
      max_unhealthy: "50%"
      repair_conditions: [DiskPressure]
      expire_after: 720h
    disruption: {budgets: [{nodes: 1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, launch, reg, err := f.Pools[0].LifecycleConfig()
	if err != nil || launch != 3*time.Minute || reg != 90*time.Second || c.RepairAfter != 5*time.Minute ||
		c.MaxUnhealthyPercent != 50 || c.ExpireAfter != 720*time.Hour || len(c.Disruption.Budgets) != 1 || c.Disruption.Budgets[0].Nodes != 1 {
		t.Fatalf("parsed %+v launch %s registration %s: %v", c, launch, reg, err)
	}
	f, _ = Parse("t.yaml", []byte(base))
	if c, launch, reg, err := f.Pools[0].LifecycleConfig(); err != nil || launch != 0 || reg != 0 || c.RepairAfter != 0 || len(c.Disruption.Budgets) != 1 {
		t.Fatalf("defaults %+v %s %s %v", c, launch, reg, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"{max_unhealthy: \"0%\"}", "lifecycle.max_unhealthy: want a percentage within 1%..100%"},
		{"{max_unhealthy: lots}", "lifecycle.max_unhealthy"},
		{"{repair_after: -1m}", "lifecycle.repair_after"},
		{"{repair_conditions: [Ready]}", "lifecycle.repair_conditions[0]"},
		{"{registration_timeout: 1ms}", "lifecycle.registration_timeout: must be at least 1s"},
		{"{repair: 1m}", "repair: unknown field"},
	} {
		_, err := Parse("t.yaml", []byte(base+"    lifecycle: "+tc.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.yaml, err, tc.want)
		}
	}
}

// TestNodeHashes: what shapes a node changes its hash; its price does not.
func TestNodeHashes(t *testing.T) {
	parse := func(extra string) map[string]string {
		t.Helper()
		f, err := Parse("t.yaml", []byte("pools:\n  - name: gpu\n    provider: {type: local}\n    nodes: [0, 4]\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		return f.Pools[0].NodeHashes(nil)
	}
	base := parse("    offerings: [{type: c4, cpu: 4, price: 1}]\n    selector: {labels: {tier: a}}\n")
	if len(base) != 1 || base["c4/on-demand"] == "" {
		t.Fatalf("hashes %v", base)
	}
	for _, tc := range []struct {
		name, yaml string
		same       bool
	}{
		{"same", "    offerings: [{type: c4, cpu: 4, price: 1}]\n    selector: {labels: {tier: a}}\n", true},
		{"price", "    offerings: [{type: c4, cpu: 4, price: 2}]\n    selector: {labels: {tier: a}}\n", true},
		{"labels", "    offerings: [{type: c4, cpu: 4, price: 1}]\n    selector: {labels: {tier: b}}\n", false},
		{"resources", "    offerings: [{type: c4, cpu: 8, price: 1}]\n    selector: {labels: {tier: a}}\n", false},
	} {
		if got := parse(tc.yaml)["c4/on-demand"]; (got == base["c4/on-demand"]) != tc.same {
			t.Errorf("%s: hash %s vs %s, want same=%v", tc.name, got, base["c4/on-demand"], tc.same)
		}
	}
}
