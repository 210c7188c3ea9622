package config

import (
	"strings"
	"testing"
)

// TestStrategyParsesAndNamesItsFaults: a strategy beside the pools is
// kept; a pool it names that the file lacks, two bases, no weight, or a
// figure out of range is refused naming the field.
func TestStrategyParsesAndNamesItsFaults(t *testing.T) {
	pools := "pools:\n  - {name: od, provider: {type: sim}, nodes: [0, 4], offerings: [{type: c4, cpu: 4, price: 0.4}]}\n" +
		"  - {name: spot, provider: {type: sim}, nodes: [0, 4], offerings: [{type: c4, cpu: 4, price: 0.2}]}\n"
	f, err := Parse("f.yaml", []byte(pools+"strategy:\n  - {pool: od, base: 2, weight: 1}\n  - {pool: spot, weight: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Strategy) != 2 || f.Strategy[0] != (StrategyEntry{Pool: "od", Base: 2, Weight: 1}) || f.Strategy[1].Weight != 3 {
		t.Fatalf("strategy %+v", f.Strategy)
	}
	for body, want := range map[string]string{
		"strategy: [{pool: gpu, weight: 1}]":                                `f.yaml: strategy[0].pool: no pool "gpu" in the file`,
		"strategy: [{pool: od, base: 1, weight: 1}, {pool: spot, base: 1}]": "only one pool may have a base",
		"strategy: [{pool: od, base: 1}]":                                   "at least one pool needs a weight",
		"strategy: [{pool: od, weight: 1001}]":                              "strategy[0].weight: must be within 0..1000",
		"strategy: [{pool: od, weight: 1}, {pool: od, weight: 1}]":          `strategy[1].pool: "od" is already`,
		"strategy: [{pool: od, wieght: 1}]":                                 "wieght",
	} {
		_, err := Parse("f.yaml", []byte(pools+body+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}
