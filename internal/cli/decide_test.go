package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const skywardPool = `pools:
  - name: batch
    provider: {type: sim}
    nodes: [2, 6]
    scaling: {policy: skyward, slots_per_node: 2, cooldown: 30s, idle_timeout: 60s}
`

// seedSnapshot is seed 000's pressure report: 4 nodes of 2 slots, 4 running, 12 queued.
const seedSnapshot = `{
  "time": "2026-01-01T00:00:00Z",
  "desired": 4,
  "nodes": [
    {"id": "n0", "ordinal": 0, "resources": {"cpu": "2"}, "running": [{"requests": {"cpu": "1"}}]},
    {"id": "n1", "ordinal": 1, "resources": {"cpu": "2"}, "running": [{"requests": {"cpu": "1"}}]},
    {"id": "n2", "ordinal": 2, "resources": {"cpu": "2"}, "running": [{"requests": {"cpu": "1"}}]},
    {"id": "n3", "ordinal": 3, "resources": {"cpu": "2"}, "running": [{"requests": {"cpu": "1"}}]}
  ],
  "pending": [{"requests": {"cpu": "1"}, "count": 12}]
}`

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, Streams{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecideSeedSequence(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", skywardPool)
	snap := writeFile(t, dir, "snap.json", seedSnapshot)

	code, out, errs := run(t, "", "decide", "--config", cfg, "--snapshot", snap, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Desired, Previous int
		Changed           bool
		Code              string `json:"reason_code"`
		Reason            string
		State             json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if res.Desired != 6 || res.Previous != 4 || !res.Changed || res.Code != "at-max" {
		t.Fatalf("got %+v, want 4 -> 6 capped at max", res)
	}

	// Table output, from standard input.
	code, out, errs = run(t, seedSnapshot, "decide", "--config", cfg, "--snapshot", "-")
	if code != 0 || !strings.Contains(out, "4 -> 6 (changed)") || !strings.Contains(out, "reason") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestDecideBadInputExits2NamingTheField(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", skywardPool)
	snapWith := func(old, repl string) string {
		if !strings.Contains(seedSnapshot, old) {
			t.Fatalf("%q not in the seed snapshot", old)
		}
		return writeFile(t, t.TempDir(), "s.json", strings.Replace(seedSnapshot, old, repl, 1))
	}
	good := writeFile(t, dir, "good.json", seedSnapshot)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown policy", []string{"--config", writeFile(t, dir, "p1.yaml", strings.Replace(skywardPool, "skyward", "astrology", 1)), "--snapshot", good}, `scaling.policy: unknown policy "astrology"`},
		{"negative count", []string{"--config", cfg, "--snapshot", snapWith(`"count": 12`, `"count": -3`)}, "pending[0].count: must not be negative"},
		{"negative desired", []string{"--config", cfg, "--snapshot", snapWith(`"desired": 4`, `"desired": -1`)}, "desired: must not be negative"},
		{"malformed quantity", []string{"--config", cfg, "--snapshot", snapWith(`{"cpu": "1"}, "count"`, `{"cpu": "one"}, "count"`)}, `pending[0].requests.cpu: invalid quantity "one"`},
		{"unknown field", []string{"--config", cfg, "--snapshot", snapWith(`"desired": 4`, `"desired": 4, "wanted": 5`)}, "wanted: unknown field"},
		{"unknown nested field", []string{"--config", cfg, "--snapshot", snapWith(`"ordinal": 0`, `"ordinal": 0, "zone": "a"`)}, "nodes[0].zone: unknown field"},
		{"bad time", []string{"--config", cfg, "--snapshot", snapWith(`2026-01-01T00:00:00Z`, `yesterday`)}, "time"},
		{"missing time", []string{"--config", cfg, "--snapshot", snapWith(`"time": "2026-01-01T00:00:00Z",`, ``)}, "time: must be set"},
		{"over capacity", []string{"--config", cfg, "--snapshot", snapWith(`"running": [{"requests": {"cpu": "1"}}]}`, `"running": [{"requests": {"cpu": "3"}}]}`)}, "nodes[0].running: requests"},
		{"not json", []string{"--config", cfg, "--snapshot", writeFile(t, dir, "bad.json", "{")}, "snapshot"},
		{"empty snapshot", []string{"--config", cfg, "--snapshot", writeFile(t, dir, "empty.json", " \n")}, "empty.json: is empty"},
		{"empty config", []string{"--config", writeFile(t, dir, "empty.yaml", ""), "--snapshot", good}, "empty.yaml: is empty"},
		{"nan price", []string{"--config", writeFile(t, dir, "nan.yaml", "pools:\n  - name: a\n    provider: {type: sim}\n    nodes: [0, 4]\n    offerings: [{type: c8, cpu: 8, price: .nan}]\n"), "--snapshot", good}, "nan.yaml: pools[0].offerings[0].price: must be a finite number, got .nan"},
		{"count past int", []string{"--config", cfg, "--snapshot", snapWith(`"count": 12`, `"count": 1e30`)}, "pending[0].count: want int, got number 1e30"},
		{"bad machine state", []string{"--config", cfg, "--snapshot", snapWith(`"desired": 4`, `"desired": 4, "controller": {"machines": [{"ordinal": 0, "state": "up"}]}`)}, "controller.machines[0].state: want one of"},
		{"empty steps", []string{"--config", cfg, "--steps", writeFile(t, dir, "steps.json", "[]")}, "steps.json: holds no steps"},
		{"both inputs", []string{"--config", cfg, "--snapshot", good, "--steps", good}, "give exactly one of --snapshot and --steps"},
		{"missing snapshot file", []string{"--config", cfg, "--snapshot", filepath.Join(dir, "nope.json")}, "reading snapshot"},
		{"missing config file", []string{"--config", filepath.Join(dir, "nope.yaml"), "--snapshot", good}, "reading config"},
		{"bad output", []string{"--config", cfg, "--snapshot", good, "-o", "xml"}, "-o: want table or json"},
		{"unknown pool", []string{"--config", cfg, "--snapshot", good, "--pool", "gpu"}, `--pool: ` + cfg + ` has no pool "gpu"`},
		{"missing flags", nil, `required flag(s) "config" not set`},
		{"no snapshot", []string{"--config", "x.yaml"}, "give exactly one of --snapshot and --steps"},
		{"unknown flag", []string{"--colour"}, "unknown flag: --colour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, "", append([]string{"decide"}, tt.args...)...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, ExitUsage, out, errs)
			}
			if !strings.Contains(errs, tt.want) {
				t.Fatalf("stderr %q does not contain %q", errs, tt.want)
			}
			if out != "" {
				t.Fatalf("stdout not empty on error: %q", out)
			}
		})
	}
}

func TestUnknownCommandExits2(t *testing.T) {
	if code, _, errs := run(t, "", "frobnicate"); code != ExitUsage || !strings.Contains(errs, "unknown command") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestDecideBugIsOneLine: a panic while deciding is a bug in tide, reported
// in one line with exit 1, never a stack trace.
func TestDecideBugIsOneLine(t *testing.T) {
	err := func() (err error) {
		defer recoverBug(&err)
		panic("boom")
	}()
	err = decideError(err)
	var ie inputError
	if err == nil || errors.As(err, &ie) || !strings.Contains(err.Error(), "internal error while deciding") || strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("err = %v", err)
	}
}
