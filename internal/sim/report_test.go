package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// smallReport runs every policy on a small random trace, with series for
// the charts and the bound's curve.
func smallReport(t *testing.T) *Report {
	t.Helper()
	cfg := mustConfig(t, gpuPool)
	w := jobsWorkload(t, cfg, randomJobs(5, 80, 12*time.Hour))
	b, err := w.Bound(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Trace: "random.csv", Config: cfg, Workload: w, Bound: b}
	for _, pol := range policy.Names {
		r, err := Run(context.Background(), cfg, w, Options{Policy: pol, Seed: 1, Buckets: 200})
		if err != nil {
			t.Fatal(err)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

// TestJSONShape: -o json prints exactly these keys: every figure of the
// table (issue 15 asked for machines, interrupted and unfinished).
func TestJSONShape(t *testing.T) {
	rep := smallReport(t)
	data, err := json.Marshal(rep.JSON())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) string {
		return strings.Join(slices.Sorted(maps.Keys(m)), ",")
	}
	if k := keys(got); k != "instances,jobs,lower_bound,policies,trace" {
		t.Errorf("top-level keys = %s", k)
	}
	if k := keys(got["lower_bound"].(map[string]any)); k != "cost,node_hours,peak_nodes,work_node_hours" {
		t.Errorf("lower_bound keys = %s", k)
	}
	pols := got["policies"].([]any)
	if len(pols) != len(policy.Names) {
		t.Fatalf("%d policies, want %d", len(pols), len(policy.Names))
	}
	want := "bound_ratio,cost,disrupted,end_s,instances,interrupted,machines,node_hours,policy,scale_events,unfinished,utilization,wait_mean_s,wait_p50_s,wait_p95_s,wait_p99_s"
	for _, p := range pols {
		if k := keys(p.(map[string]any)); k != want {
			t.Errorf("policy keys = %s, want %s", k, want)
		}
	}
}

// TestHTMLReport: the page is self-contained (no external reference), has
// the table, one SVG chart per policy with its three curves, and the
// configuration.
func TestHTMLReport(t *testing.T) {
	rep := smallReport(t)
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"src=", "href=", "<link", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("page refers to something outside it: %q", bad)
		}
	}
	if n := strings.Count(page, `<svg class="chart"`); n != len(policy.Names) {
		t.Errorf("%d charts, want %d", n, len(policy.Names))
	}
	for _, class := range []string{"bound", "demand", "billed"} {
		if n := strings.Count(page, `<polyline class="`+class+`" fill="none" stroke="`); n != len(policy.Names) {
			t.Errorf("%d %s curves, want %d", n, class, len(policy.Names))
		}
	}
	if strings.Contains(page, `points=""`) {
		t.Error("an empty curve")
	}
	if n := strings.Count(page, `<tr class="policy">`); n != len(policy.Names) {
		t.Errorf("%d table rows, want %d", n, len(policy.Names))
	}
	for _, want := range []string{"lower bound", "offering: g8/on-demand", "boot: 1m40s"} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not show %q", want)
		}
	}
}

// chromium finds a headless-capable Chromium: $TIDE_CHROMIUM, or chromium
// (Debian's package), chromium-browser or google-chrome on the PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TIDE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TIDE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("TIDE_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)")
	}
	t.Skip("no chromium installed: the HTML report is not rendered (set TIDE_REQUIRE_CHROMIUM=1 to make this fail)")
	return ""
}

// TestHTMLRendersInChromium opens the report in headless Chromium: the
// DOM it builds holds the table and the charts, and a screenshot shows the
// curves painted in their colours.
func TestHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	rep := smallReport(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--user-data-dir=" + filepath.Join(dir, "profile")}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom", "file://"+page))
	if n := strings.Count(dom, "<polyline"); n != 3*len(policy.Names) {
		t.Errorf("rendered DOM has %d curves, want %d", n, 3*len(policy.Names))
	}
	if !strings.Contains(dom, `<table id="results">`) || strings.Count(dom, `<tr class="policy">`) != len(policy.Names) {
		t.Error("rendered DOM lacks the results table")
	}
	shot := filepath.Join(dir, "shot.png")
	run("--screenshot="+shot, "--window-size=1100,2400", "--hide-scrollbars", "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Count pixels near each curve's colour (anti-aliasing blends edges).
	colours := map[string][3]int{"billed": {0x1b, 0x9e, 0x77}, "demand": {0xd9, 0x5f, 0x02}}
	for name, c := range colours {
		n := 0
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if abs(int(r>>8)-c[0]) < 40 && abs(int(g>>8)-c[1]) < 40 && abs(int(bl>>8)-c[2]) < 40 {
					n++
				}
			}
		}
		if n < 200 {
			t.Errorf("screenshot shows %d pixels of the %s curve's colour, want a drawn curve", n, name)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestBoundBuckets folds a curve into buckets by their maxima.
func TestBoundBuckets(t *testing.T) {
	curve := []trace.Step{{At: 0, Nodes: 1}, {At: 5 * time.Second, Nodes: 4}, {At: 7 * time.Second, Nodes: 2}, {At: 25 * time.Second, Nodes: 0}}
	got := boundBuckets(curve, 10*time.Second, 4)
	want := []float64{4, 2, 2, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("buckets = %v, want %v", got, want)
		}
	}
}
