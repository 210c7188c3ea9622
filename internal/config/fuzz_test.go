package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/validate"
)

// FuzzConfig feeds arbitrary YAML to the config reader and checks more than
// "no panic": a refused file gets an error that names the file (and, from
// the reader's rules, the field), never an encoder's message such as
// "json: unsupported value: NaN"; an accepted file has pools whose policy and
// reconciler configs validate, whose prices and probabilities are finite and
// in range, whose counts fit validate.MaxNodes, and which encode back to
// JSON. The seed corpus in testdata/fuzz/FuzzConfig is replayed by go test.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(sketch))
	f.Add([]byte("pools: [{name: a, provider: {type: local}, nodes: [0, 2]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "fuzz.yaml: ") {
				t.Fatalf("error does not name the file: %q", msg)
			}
			for _, bad := range []string{"unsupported value", "goroutine ", "runtime error"} {
				if strings.Contains(msg, bad) {
					t.Fatalf("error %q contains %q", msg, bad)
				}
			}
			return
		}
		for _, p := range cfg.Pools {
			pc := p.PolicyConfig()
			if err := pc.Validate(); err != nil {
				t.Fatalf("accepted pool %q fails policy validation: %v", p.Name, err)
			}
			if err := p.ReconcileConfig().Validate(); err != nil {
				t.Fatalf("accepted pool %q fails reconciler validation: %v", p.Name, err)
			}
			if p.Nodes.Max > validate.MaxNodes || p.Scaling.Headroom > validate.MaxNodes || p.Scaling.SlotsPerNode > validate.MaxNodes {
				t.Fatalf("accepted pool %q with counts past %d: %+v", p.Name, validate.MaxNodes, p)
			}
			for i, o := range p.Offerings {
				if validate.Amount("price", o.PricePerHour) != nil || validate.Probability("p", o.InterruptionProbability) != nil ||
					validate.Amount("penalty", o.InterruptionPenalty) != nil || o.Resources.Negative() {
					t.Fatalf("accepted pool %q offerings[%d] %+v", p.Name, i, o)
				}
			}
		}
		if _, err := json.Marshal(cfg); err != nil {
			t.Fatalf("accepted config does not encode: %v", err)
		}
	})
}
