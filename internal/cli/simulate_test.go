package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// simPool is a pool of 8-GPU nodes booting in 100 s.
const simPool = `pools:
  - name: gpu
    provider: {type: sim, options: {boot: 100s, configure: 5s}}
    nodes: [0, 20]
    offerings: [{type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}]
    scaling: {policy: tide, slots_per_node: 8}
workload: {split_to_node: true}
`

// phillyCSV returns a philly-format trace of n jobs, one every 30 s.
func phillyCSV(n int) string {
	var b strings.Builder
	b.WriteString("job_id,submit_s,start_s,duration_s,gpus,cpus,mem_gb,vc\n")
	for i := range n {
		fmt.Fprintf(&b, "philly-%d,%d,,%d,%d,,,vc%d\n", i, 30*i, 600+97*(i%13), []int{1, 1, 2, 4, 8, 16}[i%6], i%3)
	}
	return b.String()
}

// TestSimulateJSON: --policy all prints one object with the lower bound and
// one entry per policy, in the shape, each with 0 disrupted.
func TestSimulateJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", simPool)
	tr := writeFile(t, dir, "philly_jobs.csv", phillyCSV(60))
	code, out, errs := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "all", "--seed", "3", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if errs != "" {
		t.Errorf("stderr not quiet off a terminal: %q", errs)
	}
	var rep struct {
		Trace      string `json:"trace"`
		Jobs       int    `json:"jobs"`
		Instances  int    `json:"instances"`
		LowerBound struct {
			NodeHours     float64 `json:"node_hours"`
			Cost          float64 `json:"cost"`
			WorkNodeHours float64 `json:"work_node_hours"`
			PeakNodes     int     `json:"peak_nodes"`
		} `json:"lower_bound"`
		Policies []struct {
			Policy    string  `json:"policy"`
			NodeHours float64 `json:"node_hours"`
			Cost      float64 `json:"cost"`
			P50       float64 `json:"wait_p50_s"`
			P95       float64 `json:"wait_p95_s"`
			P99       float64 `json:"wait_p99_s"`
			Util      float64 `json:"utilization"`
			Scale     int     `json:"scale_events"`
			Disrupted int     `json:"disrupted"`
			Ratio     float64 `json:"bound_ratio"`
			Mean      float64 `json:"wait_mean_s"`
			Machines  int     `json:"machines"`
			Interrupt int     `json:"interrupted"`
			Instances int     `json:"instances"`
			Unfinish  int     `json:"unfinished"`
			End       float64 `json:"end_s"`
			Consol    int     `json:"consolidated_nodes"`
			Moved     int     `json:"moved_instances"`
			LostWork  float64 `json:"lost_work_instance_hours"`
			Idle      float64 `json:"idle_node_hours"`
			Outside   float64 `json:"outside_node_hours"`
			Gangs     int     `json:"gangs"`
			GangP50   float64 `json:"gang_wait_p50_s"`
			GangP95   float64 `json:"gang_wait_p95_s"`
			Partial   float64 `json:"partial_gang_gpu_hours"`
		} `json:"policies"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Trace != tr || rep.LowerBound.NodeHours <= 0 || !near(rep.LowerBound.Cost, 10*rep.LowerBound.NodeHours) {
		t.Errorf("trace %q, bound %+v", rep.Trace, rep.LowerBound)
	}
	var names []string
	for _, p := range rep.Policies {
		names = append(names, p.Policy)
		if p.Disrupted != 0 || p.NodeHours <= 0 || p.Scale == 0 || p.Util <= 0 || p.Util > 1 || p.P50 > p.P95 || p.P95 > p.P99 ||
			p.Idle < 0 || p.Outside <= 0 || p.Idle+p.Outside >= p.NodeHours || p.GangP50 > p.GangP95 || p.Partial < 0 {
			t.Errorf("implausible figures: %+v", p)
		}
	}
	if got := strings.Join(names, ","); got != "tide,skyward,target-tracking,utilization,karpenter,cluster-autoscaler" {
		t.Errorf("policies = %s", got)
	}
	// Every figure of the table is in the JSON: machines, disrupted,
	// interrupted and unfinished end each row.
	_, table, _ := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "all", "--seed", "3")
	for _, p := range rep.Policies {
		want := fmt.Sprintf("%d %d %d %d", p.Machines, p.Disrupted, p.Interrupt, p.Unfinish)
		found := false
		for _, line := range strings.Split(table, "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && f[0] == p.Policy {
				found = strings.Join(f[len(f)-4:], " ") == want
			}
		}
		if !found || p.Machines == 0 || p.Instances != rep.Instances || rep.Jobs != 60 {
			t.Errorf("%s: JSON says machines, disrupted, interrupted, unfinished = %s; table:\n%s", p.Policy, want, table)
		}
	}
	// The same seed prints the same report.
	if _, again, _ := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "all", "--seed", "3", "-o", "json"); again != out {
		t.Error("two runs with the same seed printed different reports")
	}
}

func near(a, b float64) bool { return a-b < 1e-6*b+1e-9 && b-a < 1e-6*b+1e-9 }

// TestSimulateTableAndHTML: the default output is a table with the bound,
// and --html writes a self-contained page with a chart per policy.
func TestSimulateTableAndHTML(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", simPool)
	tr := writeFile(t, dir, "philly_jobs.csv", phillyCSV(40))
	page := filepath.Join(dir, "report.html")
	code, out, errs := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "skyward", "--html", page)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"policy", "skyward", "lower bound", "node-hours"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tide  ") {
		t.Errorf("table shows policies not asked for:\n%s", out)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// One chart per policy, drawn in the browser from the embedded data
	// (internal/sim's tests render it in Chromium).
	if n := strings.Count(string(html), `<div class="chart-box" id="chart-`); n != 1 || !strings.Contains(string(html), `"policy":"skyward","t":[0`) {
		t.Errorf("report has %d charts", n)
	}
}

// TestSimulateRestartable: --restartable adds the consolidation columns
// and says how much of the trace may move.
func TestSimulateRestartable(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", simPool)
	tr := writeFile(t, dir, "philly_jobs.csv", phillyCSV(40))
	code, out, errs := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "tide", "--restartable", "0.5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"consolidated", "moved", "lost inst-h", "restartable: 0.5 of the jobs may move"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestSimulateDefaultConfig: without --pool-config a pool is chosen from
// the trace's format.
func TestSimulateDefaultConfig(t *testing.T) {
	tr := writeFile(t, t.TempDir(), "philly_jobs.csv", phillyCSV(20))
	code, out, errs := run(t, "", "simulate", "--trace", tr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "tide") || !strings.Contains(out, "g8/on-demand") {
		t.Errorf("output:\n%s", out)
	}
	// The pool's max is sized from the trace and the choice printed: the
	// 20 jobs need at most a few nodes, not the 10,000 of the default.
	if !strings.Contains(errs, "default pool (no --pool-config): the trace's peak demand is") || !strings.Contains(errs, "nodes [0, ") {
		t.Errorf("no default pool line on stderr:\n%s", errs)
	}
	if strings.Contains(out, "10000") {
		t.Errorf("the default pool's max was not sized:\n%s", out)
	}
}

// TestSimulateCases: --cases runs the policy benchmark on generated
// cases of the traces found (here one made-up philly trace with the
// shipped config), writes a row per case and prints the summary; the
// same generator seed gives the same rows.
func TestSimulateCases(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "philly_jobs.csv", phillyCSV(400))
	var rows []string
	for i := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("rows%d.csv", i))
		code, out, errs := run(t, "", "simulate", "--cases", "3", "--seed", "5", "--seeds", "2", "--traces", dir,
			"--configs", filepath.Join("..", "..", "examples", "simulate"), "--rows", path)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		for _, want := range []string{"3 cases of generator seed 5, simulation seeds 1..2", "tide not dominated:", "tide against the lower bound", "karpenter"} {
			if !strings.Contains(out, want) {
				t.Errorf("summary does not say %q:\n%s", want, out)
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "case,trace,") || !strings.HasPrefix(lines[1], "5/0,philly_jobs.csv,") {
			t.Fatalf("rows:\n%s", b)
		}
		var kept []string
		for _, l := range lines {
			kept = append(kept, l[:strings.LastIndex(strings.TrimSuffix(l, ","), ",")]) // without the run time
		}
		rows = append(rows, strings.Join(kept, "\n"))
	}
	if rows[0] != rows[1] {
		t.Errorf("the same seed gave other rows:\n%s\n--\n%s", rows[0], rows[1])
	}
}

// TestSimulateBadInput: bad trace rows are errors naming the file, line
// and column (exit 2) unless --skip-bad-rows skips them and says how many;
// bad flags and configs exit 2 too.
func TestSimulateBadInput(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", simPool)
	bad := writeFile(t, dir, "bad.csv", phillyCSV(5)+"philly-9,400,,soon,1,,,vc0\n"+"philly-10,10,,60,1,,,vc0\n")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad value", []string{"--trace", bad, "--pool-config", cfg}, 2, "bad.csv:7: column 4 (duration_s)"},
		{"skip", []string{"--trace", bad, "--pool-config", cfg, "--skip-bad-rows"}, 0, "skipped 2 bad rows"},
		{"missing trace", []string{"--trace", filepath.Join(dir, "none.csv"), "--pool-config", cfg}, 2, "none.csv"},
		{"policy", []string{"--trace", bad, "--pool-config", cfg, "--policy", "fastest"}, 2, `--policy: unknown policy "fastest"`},
		{"output", []string{"--trace", bad, "--pool-config", cfg, "-o", "yaml"}, 2, "-o: want table or json"},
		{"config", []string{"--trace", bad, "--pool-config", writeFile(t, dir, "x.yaml", "pools: []\n")}, 2, "x.yaml"},
		{"no trace", []string{"--pool-config", cfg}, 2, "trace"},
		{"restartable", []string{"--trace", bad, "--pool-config", cfg, "--restartable", "1.5"}, 2, "--restartable: want a fraction within [0, 1], got 1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := run(t, "", append([]string{"simulate"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

// cpuPool is a pool of CPU-only nodes: the utilization policy (GPUs only)
// cannot serve it.
const cpuPool = `pools:
  - name: cpu
    provider: {type: sim, options: {boot: 60s}}
    nodes: [0, 20]
    offerings: [{type: c8, cpu: 8, memory: 32Gi, price: 0.4}]
    scaling: {policy: tide, slots_per_node: 8}
`

// TestSimulateNotApplicable: on a CPU pool the utilization policy is shown
// as not applicable with its reason, not as a row of zeros, and --policy
// all runs the others and says it skipped it.
func TestSimulateNotApplicable(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", cpuPool)
	var b strings.Builder
	b.WriteString("job_id,submit_s,duration_s,cpus,mem_gb\n")
	for i := range 30 {
		fmt.Fprintf(&b, "j%d,%d,%d,%d,4\n", i, 60*i, 300+60*(i%5), 1+i%4)
	}
	tr := writeFile(t, dir, "cpu_jobs.csv", b.String())
	code, out, errs := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "policy utilization not applicable") || !strings.Contains(errs, "GPUs alone") {
		t.Errorf("stderr does not say utilization was skipped: %q", errs)
	}
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && slices.Contains([]string{"tide", "skyward", "target-tracking", "utilization"}, f[0]) {
			rows = append(rows, strings.Join(f[:2], " "))
		}
	}
	if len(rows) != 4 || rows[3] != "utilization n/a" || strings.Contains(strings.Join(rows[:3], " "), "n/a") {
		t.Errorf("rows = %q\n%s", rows, out)
	}
	if !strings.Contains(out, "utilization: not applicable: it scales on GPUs alone") {
		t.Errorf("the notes do not give the reason:\n%s", out)
	}
	_, js, _ := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--policy", "all", "-o", "json")
	var rep struct {
		Policies []struct {
			Policy string `json:"policy"`
		} `json:"policies"`
		NA []struct {
			Policy, Reason string
		} `json:"not_applicable"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	// Every policy but utilization: tide, the seeds and the two peers.
	if len(rep.Policies) != 5 || len(rep.NA) != 1 || rep.NA[0].Policy != "utilization" || rep.NA[0].Reason == "" {
		t.Errorf("json: %+v", rep)
	}
}

// TestSimulateMissingBinsAndWindow: a series with missing bins is read (a
// missing bin of a rate is no demand), the report counts them, and
// --from/--to replay a window in trace time.
func TestSimulateMissingBinsAndWindow(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yaml", `pools:
  - name: gpu
    provider: {type: sim, options: {boot: 60s}}
    nodes: [0, 20]
    offerings: [{type: g8, cpu: 64, memory: 512Gi, gpus: 8, price: 10}]
workload:
  replicas: {per_replica: 1, shape: {gpus: 1}}
`)
	var b strings.Builder
	b.WriteString("t_s,requests\n")
	missing := 0
	for i := range 48 {
		if i%5 == 3 {
			missing++
			continue // a missing 60 s bin
		}
		fmt.Fprintf(&b, "%d,%d\n", 60*i, 60*(1+i%7))
	}
	tr := writeFile(t, dir, "rate.csv", b.String())
	code, out, errs := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Jobs        int `json:"jobs"`
		Instances   int `json:"instances"`
		MissingBins int `json:"missing_bins"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.MissingBins != missing || rep.Instances == 0 {
		t.Errorf("missing bins %d, want %d; %+v", rep.MissingBins, missing, rep)
	}
	_, table, _ := run(t, "", "simulate", "--trace", tr, "--pool-config", cfg)
	if !strings.Contains(table, fmt.Sprintf("%d bins missing from the series", missing)) {
		t.Errorf("table notes do not count the missing bins:\n%s", table)
	}

	code, out, errs = run(t, "", "simulate", "--trace", tr, "--pool-config", cfg, "--from", "20m", "--to", "1800", "-o", "json")
	if code != 0 {
		t.Fatalf("window: exit %d: %s", code, errs)
	}
	var win struct {
		Jobs      int `json:"jobs"`
		Instances int `json:"instances"`
		Policies  []struct {
			End float64 `json:"end_s"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &win); err != nil {
		t.Fatal(err)
	}
	if win.Instances == 0 || win.Instances >= rep.Instances || win.Policies[0].End > 600+3600+3600 {
		t.Errorf("window 20m..30m replayed %+v of %+v", win, rep)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "2h", "--to", "1h"}, "--to: must be after --from"},
		{[]string{"--from", "soon"}, "--from: want a trace time"},
		{[]string{"--from", "-5m"}, "--from: want a time from the trace's start"},
	} {
		code, _, errs := run(t, "", append([]string{"simulate", "--trace", tr, "--pool-config", cfg}, tt.args...)...)
		if code != 2 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, errs, tt.want)
		}
	}
}
