package config

import (
	"strings"
	"testing"
)

// TestLimitsParse: `limits:` reads quantities as offerings do, reaches the
// policy config, and every bad value is refused naming the pool and field.
func TestLimitsParse(t *testing.T) {
	const pool = `
pools:
  - name: cpu
    provider: {type: sim}
    nodes: [1, 40]
    offerings: [{type: c4, cpu: 4, memory: 16Gi, price: 0.2}]
    limits: %s
`
	f, err := Parse("t.yaml", []byte(strings.Replace(pool, "%s", "{cpu: 64, memory: 256Gi, gpus: 0, cost_per_hour: 4.5}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	l := f.Pools[0].PolicyConfig().Limits
	if l.MilliCPU == nil || *l.MilliCPU != 64000 || *l.Memory != 256<<30 || *l.GPUs != 0 || *l.CostPerHour != 4.5 {
		t.Fatalf("limits %+v", l)
	}
	f, err = Parse("t.yaml", []byte(strings.Replace(pool, "limits: %s", "", 1)))
	if err != nil || !f.Pools[0].PolicyConfig().Limits.IsZero() {
		t.Fatalf("no limits section: %v, %+v", err, f.Pools[0].Limits)
	}
	for limits, want := range map[string]string{
		"{cpu: 2}":               `t.yaml: pool "cpu": limits.cpu: 2 is below nodes.min (1) x the smallest offering's 4`,
		"{cost_per_hour: -1}":    `t.yaml: pool "cpu": limits.cost_per_hour: must be a non-negative number, got -1`,
		"{memory: lots}":         `limits.memory`,
		"{cpus: 4}":              `cpus`,
		"{cost_per_hour: cheap}": `cost_per_hour`,
	} {
		_, err := Parse("t.yaml", []byte(strings.Replace(pool, "%s", limits, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("limits %s: error %v, want %q", limits, err, want)
		}
	}
}

// TestWeightParse: weight is read and bounded to 0..100, naming the field.
func TestWeightParse(t *testing.T) {
	const pool = `
pools:
  - name: cpu
    provider: {type: sim}
    nodes: [0, 4]
    offerings: [{type: c4, cpu: 4, memory: 16Gi, price: 0.2}]
    weight: %s
`
	f, err := Parse("t.yaml", []byte(strings.Replace(pool, "%s", "30", 1)))
	if err != nil || f.Pools[0].Weight != 30 {
		t.Fatalf("weight 30: %v", err)
	}
	_, err = Parse("t.yaml", []byte(strings.Replace(pool, "%s", "101", 1)))
	if err == nil || !strings.Contains(err.Error(), `pool "cpu": weight: must be within 0..100, got 101`) {
		t.Fatalf("weight 101: %v", err)
	}
	_, err = Parse("t.yaml", []byte(strings.Replace(pool, "weight: %s", "max_queued: -1", 1)))
	if err == nil || !strings.Contains(err.Error(), `pool "cpu": max_queued: must not be negative, got -1`) {
		t.Fatalf("max_queued -1: %v", err)
	}
}
