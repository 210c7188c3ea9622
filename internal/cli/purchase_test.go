package cli

import (
	"strings"
	"testing"
)

// decideOn runs `tide decide` on a pool config and a snapshot (file
// contents), with more arguments, and returns what it printed; a non-zero
// exit fails the test.
func decideOn(t *testing.T, pools, snapshot string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	cfg, snap := writeFile(t, dir, "pool.yaml", pools), writeFile(t, dir, "snap.json", snapshot)
	code, out, errs := run(t, "", append([]string{"decide", "--config", cfg, "--snapshot", snap}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	return out
}

// TestDecideShowsThePurchaseGap is issue 23's first reproduction through
// `tide decide`: an empty pool of one 64 CPU / 256 GiB / 4 GPU offering;
// tide buys 12 nodes (first fit decreasing needed 15) and says it is
// within 0.0 % of the proven bound.
func TestDecideShowsThePurchaseGap(t *testing.T) {
	pools := `pools:
  - name: gpu
    provider: {type: sim}
    nodes: [0, 100]
    offerings:
      - {type: g4, cpu: 64, memory: 256Gi, gpus: 4, price: 4.783}
    scaling: {policy: tide}
`
	snap := `{
  "time": "2026-01-01T00:01:00Z",
  "desired": 0,
  "state": {"pending_since": "2026-01-01T00:00:00Z"},
  "nodes": [],
  "pending": [
    {"requests": {"cpu": "17.25", "memory": "116.25Gi"}, "count": 12},
    {"requests": {"cpu": "14.25", "memory": "27.25Gi", "gpus": 1}, "count": 30},
    {"requests": {"cpu": "18.75", "memory": "84.75Gi", "gpus": 4}, "count": 2}
  ]
}`
	if out := decideOn(t, pools, snap); !strings.Contains(out, "buys 12 x g4/on-demand for $57.40/h, within 0.0 % of the bound") ||
		!strings.Contains(out, "launch") {
		t.Fatalf("output:\n%s", out)
	}
	if out := decideOn(t, pools, snap, "-o", "json"); !strings.Contains(out, `"launch"`) || !strings.Contains(out, `"bound_per_hour"`) {
		t.Fatalf("output:\n%s", out)
	}
}

// TestDecideSaysThePurchaseKeepsToTheFleet: a pool of a 4-core and a 16-core
// offering, 4 one-core tasks running on a c4 and 12 waiting. The 12 alone
// are cheapest on 3 c4 ($0.60/h), all 16 on one c16 ($0.70/h, 17 % more than
// the 3 c4): tide buys the c16 and says why.
func TestDecideSaysThePurchaseKeepsToTheFleet(t *testing.T) {
	out := decideOn(t, `pools:
  - name: cpu
    provider: {type: sim}
    nodes: [0, 20]
    offerings:
      - {type: c4, cpu: 4, memory: 16Gi, price: 0.20}
      - {type: c16, cpu: 16, memory: 64Gi, price: 0.70}
    scaling: {policy: tide}
`, `{
  "time": "2026-01-01T00:01:00Z",
  "desired": 1,
  "state": {"pending_since": "2026-01-01T00:00:00Z"},
  "nodes": [{"id": "n0", "resources": {"cpu": "4", "memory": "16Gi"}, "running": [{"requests": {"cpu": "4", "memory": "4Gi"}, "count": 4}]}],
  "pending": [{"requests": {"cpu": "1", "memory": "1Gi"}, "count": 12}]
}`)
	if !strings.Contains(out, "buys 1 x c16/on-demand for $0.70/h") ||
		!strings.Contains(out, "those of the cheapest fleet for all the pool's work") {
		t.Fatalf("output:\n%s", out)
	}
}
