package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedExamples runs every example of examples/decide (the README's
// first command among them) and checks the decision each one documents.
func TestShippedExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "decide")
	tests := []struct {
		config, snapshot string
		desired          int
		check            func(t *testing.T, res map[string]any)
	}{
		// A burst of 40 instances of 2 CPUs: one fits the free space of
		// batch-1; a new 8-CPU node also runs the pool's 100m daemon, so it
		// holds three, and the other 39 need thirteen nodes, all spot because
		// its effective cost (0.12 + 0.05 × 2 = 0.22) is below on-demand's 0.40.
		{"pool.yaml", "burst.json", 15, func(t *testing.T, res map[string]any) {
			tide, _ := res["tide"].(map[string]any)
			mix, _ := tide["mix"].([]any)
			if len(mix) != 1 || mix[0].(map[string]any)["offering"] != "c8/spot" || mix[0].(map[string]any)["count"] != 13.0 {
				t.Errorf("mix = %v, want 13 × c8/spot", tide["mix"])
			}
		}},
		// The same burst on a file of two pools that fit (od, spot) and a
		// GPU pool that does not: the routing says spot is the cheaper and
		// the strategy splits the 40 instances 2 + 10 on od, 28 on spot.
		{"two-pools.yaml", "burst.json", 15, func(t *testing.T, res map[string]any) {
			rt, _ := res["routing"].([]any)
			if len(rt) != 1 {
				t.Fatalf("routing = %v, want one group", res["routing"])
			}
			r := rt[0].(map[string]any)
			cands, _ := r["candidates"].([]any)
			split, _ := r["split"].(map[string]any)
			if len(cands) != 2 || cands[0].(map[string]any)["Pool"] != "spot" || cands[1].(map[string]any)["Pool"] != "od" ||
				split["od"] != 11.0 || split["spot"] != 29.0 || !strings.Contains(r["why"].(string), "by strategy: base 2 of od") {
				t.Errorf("routing = %v, want candidates spot then od, split od 11 spot 29", r)
			}
		}},
		// Seed 000: queued=12, inflight=4, capacity=8 → 6 nodes.
		{"skyward.yaml", "skyward.json", 6, nil},
		// Seed 002, "Scaling out" step 2: M = 4, N = 3, reservation 133.
		{"target-tracking.yaml", "target-tracking.json", 4, func(t *testing.T, res map[string]any) {
			tt, _ := res["target_tracking"].(map[string]any)
			if tt["m"] != 4.0 || tt["n"] != 3.0 || int(tt["capacity_provider_reservation"].(float64)) != 133 {
				t.Errorf("figures = %v, want M=4 N=3 reservation 133", tt)
			}
		}},
		// Seed 001: 6 of 10 GPU nodes used, minimum 80 % → target 8, mark 2.
		{"utilization.yaml", "utilization.json", 8, func(t *testing.T, res map[string]any) {
			u, _ := res["utilization"].(map[string]any)
			if m, _ := u["mark"].([]any); len(m) != 2 || m[0] != "gpu-9" || m[1] != "gpu-8" {
				t.Errorf("mark = %v, want [gpu-9 gpu-8]", u["mark"])
			}
		}},
	}
	argsFor := map[string][]string{"two-pools.yaml": {"--pool", "od"}}
	for _, tt := range tests {
		t.Run(tt.config+"/"+tt.snapshot, func(t *testing.T) {
			code, out, errs := run(t, "", append([]string{"decide", "--config", filepath.Join(dir, tt.config),
				"--snapshot", filepath.Join(dir, tt.snapshot), "-o", "json"}, argsFor[tt.config]...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			if res["desired"] != float64(tt.desired) {
				t.Fatalf("desired = %v (%v), want %d", res["desired"], res["reason"], tt.desired)
			}
			if tt.check != nil {
				tt.check(t, res)
			}
			// The table form works too.
			code, table, errs := run(t, "", append([]string{"decide", "--config", filepath.Join(dir, tt.config),
				"--snapshot", filepath.Join(dir, tt.snapshot)}, argsFor[tt.config]...)...)
			if code != 0 {
				t.Fatalf("table: exit %d: %s", code, errs)
			}
			if _, ok := res["routing"]; ok && !strings.Contains(table, "could serve: spot $0.22/h weight 0, od $0.40/h weight 0") {
				t.Errorf("the table does not show the routing:\n%s", table)
			}
		})
	}
}

// TestShippedWalkthroughs replays every walkthrough of examples/decide/steps
// (seed 000's sequence and reconciler rules, seed 001's scenarios A, B and C,
// seed 002's scale-out and scale-in) with tide decide --steps. Every step
// states its expected desired count, controller state and actions, which
// decide checks (a mismatch exits 1); the config of X-Y.json is the longest
// such prefix with a .yaml file.
func TestShippedWalkthroughs(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "decide", "steps")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < 7 {
		t.Fatalf("walkthroughs: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg := walkthroughConfig(t, f)
			code, out, errs := run(t, "", "decide", "--config", cfg, "--steps", f, "-o", "json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var res []map[string]any
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var steps []map[string]any
			if err := json.Unmarshal(data, &steps); err != nil {
				t.Fatal(err)
			}
			if len(res) != len(steps) {
				t.Fatalf("%d results for %d steps", len(res), len(steps))
			}
			for i, st := range steps {
				exp, _ := st["expect"].(map[string]any)
				if exp == nil || exp["actions"] == nil || exp["desired"] == nil {
					t.Errorf("steps[%d] states no expected desired count and actions", i)
				}
			}
			if code, _, errs := run(t, "", "decide", "--config", cfg, "--steps", f); code != 0 {
				t.Fatalf("table: exit %d: %s", code, errs)
			}
		})
	}
}

// TestWalkthroughMismatchFails makes sure a walkthrough can fail: a wrong
// expectation exits 1 and names the step and what differs.
func TestWalkthroughMismatchFails(t *testing.T) {
	src := filepath.Join("..", "..", "examples", "decide", "steps", "seed000-sequence.json")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), `"drain 5 4 3 2"`, `"drain 2 3 4 5"`, 1)
	if bad == string(data) {
		t.Fatal("the walkthrough no longer drains 5 4 3 2")
	}
	f := writeFile(t, t.TempDir(), "seq.json", bad)
	code, _, errs := run(t, "", "decide", "--config", walkthroughConfig(t, src), "--steps", f)
	if code != ExitError || !strings.Contains(errs, "steps[4]: expect: actions: got") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

func walkthroughConfig(t *testing.T, f string) string {
	t.Helper()
	base := strings.TrimSuffix(f, ".json")
	for {
		if _, err := os.Stat(base + ".yaml"); err == nil {
			return base + ".yaml"
		}
		i := strings.LastIndex(base, "-")
		if i < 0 {
			t.Fatalf("no config for %s", f)
		}
		base = base[:i]
	}
}

// TestStepsDirectory replays a walkthrough split into one file per step
// (--steps DIR, files in name order) and gets the same decisions as the
// single file.
func TestStepsDirectory(t *testing.T) {
	src := filepath.Join("..", "..", "examples", "decide", "steps", "seed000-fixed.json")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var steps []json.RawMessage
	if err := json.Unmarshal(data, &steps); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, st := range steps {
		writeFile(t, dir, fmt.Sprintf("%02d.json", i), string(st))
	}
	cfg := walkthroughConfig(t, src)
	code, fromDir, errs := run(t, "", "decide", "--config", cfg, "--steps", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	_, fromFile, _ := run(t, "", "decide", "--config", cfg, "--steps", src, "-o", "json")
	var a, b []map[string]any
	if json.Unmarshal([]byte(fromDir), &a) != nil || json.Unmarshal([]byte(fromFile), &b) != nil || len(a) != len(steps) {
		t.Fatalf("outputs: %s / %s", fromDir, fromFile)
	}
	for i := range a {
		ca, _ := json.Marshal(a[i]["controller"])
		cb, _ := json.Marshal(b[i]["controller"])
		if string(ca) != string(cb) || a[i]["desired"] != b[i]["desired"] {
			t.Errorf("step %d differs:\n%s\n%s", i, ca, cb)
		}
	}
	if code, _, errs := run(t, "", "decide", "--config", cfg, "--steps", t.TempDir()); code != ExitUsage || !strings.Contains(errs, "holds no *.json snapshot") {
		t.Errorf("empty dir: exit %d, %s", code, errs)
	}
}

// TestDocsDecideExamples runs the two examples of docs/decide.md so that the
// document cannot drift from the code: the one-step snapshot (its printed
// actions must appear in the document) and the steps file (its expect holds).
func TestDocsDecideExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "decide.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := string(doc); ; {
		_, after, ok := strings.Cut(rest, "```json\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		blocks, rest = append(blocks, block), tail
	}
	if len(blocks) != 2 {
		t.Fatalf("docs/decide.md has %d JSON examples, want 2", len(blocks))
	}
	steps := filepath.Join("..", "..", "examples", "decide", "steps")
	dir := t.TempDir()
	code, out, errs := run(t, "", "decide", "--config", filepath.Join(steps, "seed000-rules.yaml"),
		"--snapshot", writeFile(t, dir, "one.json", blocks[0]))
	if code != 0 {
		t.Fatalf("one step: exit %d: %s", code, errs)
	}
	_, actions, _ := strings.Cut(out, "actions:\n")
	if actions == "" || !strings.Contains(string(doc), actions) {
		t.Errorf("docs/decide.md does not show the actions the example prints:\n%s", actions)
	}
	if code, _, errs := run(t, "", "decide", "--config", filepath.Join(steps, "seed000-fixed.yaml"),
		"--steps", writeFile(t, dir, "steps.json", blocks[1])); code != 0 {
		t.Fatalf("steps: exit %d: %s", code, errs)
	}
}
