package config

import (
	"strings"
	"testing"
	"time"
)

func TestDisruptionSection(t *testing.T) {
	base := "pools:\n  - name: gpu\n    provider: {type: local}\n    nodes: [0, 4]\n    offerings: [{type: c4, cpu: 4, price: 1}]\n"
	f, err := Parse("t.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Pools[0].Consolidation()
	if err != nil || !c.Enabled || c.MaxUtilization != 50 || c.Horizon != 15*time.Minute || c.Every != time.Minute ||
		len(c.Budgets) != 1 || c.Budgets[0].String() != "10%" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	f, err = Parse("t.yaml", []byte(base+`    disruption:
      consolidation: true
      max_utilization: 30
      horizon: 2h
      every: 30s
      budgets:
        - nodes: "20%"
        - nodes: 1
          windows: [{start: "22:00", duration: 8h}]
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err = f.Pools[0].Consolidation()
	if err != nil || c.MaxUtilization != 30 || c.Horizon != 2*time.Hour || c.Every != 30*time.Second ||
		len(c.Budgets) != 2 || c.Budgets[0].String() != "20%" || c.Budgets[1].String() != "1 in 22:00+8h0m0s" {
		t.Fatalf("parsed: %+v, %v", c, err)
	}
	f, _ = Parse("t.yaml", []byte(base+"    disruption: {consolidation: false}\n"))
	if c, _ := f.Pools[0].Consolidation(); c.Enabled {
		t.Fatal("consolidation: false left it on")
	}
	for _, tc := range []struct{ yaml, want string }{
		{"{max_utilization: 0.5}", "max_utilization"},
		{"{max_utilization: 200}", `pool "gpu": disruption.max_utilization: must be within 1..100`},
		{"{budgets: [{nodes: lots}]}", `disruption.budgets[0].nodes: want a count of nodes or a percentage`},
		{"{budgets: [{nodes: \"150%\"}]}", `disruption.budgets[0].nodes: want a percentage`},
		{"{budgets: [{nodes: 1, windows: [{start: \"25:00\", duration: 1h}]}]}", `disruption.budgets[0].windows[0].start`},
		{"{budgets: [{nodes: 1, windows: [{start: \"01:00\", duration: 25h}]}]}", `disruption.budgets[0].windows[0].duration`},
		{"{budget: 1}", "budget: unknown field"},
	} {
		_, err := Parse("t.yaml", []byte(base+"    disruption: "+tc.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.yaml, err, tc.want)
		}
	}
}
