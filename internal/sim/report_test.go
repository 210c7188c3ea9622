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
	"regexp"
	"slices"
	"strconv"
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
	want := "bound_ratio,consolidated_nodes,cost,disrupted,end_s,idle_node_hours,instances,interrupted,lost_work_instance_hours,machines,moved_instances,node_hours,outside_node_hours,policy,scale_events,unfinished,utilization,wait_mean_s,wait_p50_s,wait_p95_s,wait_p99_s"
	for _, p := range pols {
		if k := keys(p.(map[string]any)); k != want {
			t.Errorf("policy keys = %s, want %s", k, want)
		}
	}
}

// TestHTMLReport: the page is self-contained (no external reference), has
// the table, a chart per policy and a chart of waits with their data (one
// time axis, one vertical scale), and the configuration.
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
	if n := strings.Count(page, `<div class="chart-box" id="chart-`); n != len(policy.Names) {
		t.Errorf("%d chart boxes, want %d", n, len(policy.Names))
	}
	if !strings.Contains(page, `<div class="chart-box" id="waits">`) {
		t.Error("no chart of waits")
	}
	// The charts' data is embedded: one time axis, one vertical scale, and
	// for every policy its curves and its waits.
	i := strings.Index(page, `<script type="application/json" id="report-data">`)
	if i < 0 {
		t.Fatal("no embedded chart data")
	}
	raw := page[i+len(`<script type="application/json" id="report-data">`):]
	raw = raw[:strings.Index(raw, "</script>")]
	var data struct {
		Span     float64 `json:"span_s"`
		YMax     float64 `json:"y_max"`
		Policies []struct {
			Policy string    `json:"policy"`
			T      []float64 `json:"t"`
			Bound  []float64 `json:"bound"`
			Demand []float64 `json:"demand"`
			Billed []int     `json:"billed"`
			Waits  []float64 `json:"waits"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(raw), &data); err != nil {
		t.Fatalf("chart data: %v\n%.300s", err, raw)
	}
	if len(data.Policies) != len(policy.Names) || data.Span <= 0 {
		t.Fatalf("chart data has %d policies, span %v", len(data.Policies), data.Span)
	}
	top := 0.0
	for _, p := range data.Policies {
		if len(p.T) == 0 || len(p.T) != len(p.Bound) || len(p.T) != len(p.Demand) || len(p.T) != len(p.Billed) {
			t.Errorf("%s: curves of %d, %d, %d, %d points", p.Policy, len(p.T), len(p.Bound), len(p.Demand), len(p.Billed))
		}
		if len(p.Waits) != 101 || !slices.IsSorted(p.Waits) {
			t.Errorf("%s: %d wait percentiles, sorted %v", p.Policy, len(p.Waits), slices.IsSorted(p.Waits))
		}
		for k := range p.T {
			top = max(top, p.Bound[k], p.Demand[k], float64(p.Billed[k]))
		}
	}
	if data.YMax < top || data.YMax > top+1 {
		t.Errorf("shared y scale %v, want the largest value %v rounded up", data.YMax, top)
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
// DOM it builds holds the table and the charts (every policy's on one
// vertical scale, axes labelled, as wide as the page, and a chart of waits),
// and a screenshot shows the curves painted in their colours.
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
	dom := string(run("--window-size=1100,2400", "--dump-dom", "file://"+page))
	// Three curves per policy, and one curve of waits per policy.
	if n := strings.Count(dom, "<polyline"); n != 4*len(policy.Names) {
		t.Errorf("rendered DOM has %d curves, want %d", n, 4*len(policy.Names))
	}
	// One vertical scale for every policy's chart, labelled axes, and the
	// page's width.
	svgs := regexp.MustCompile(`<svg class="chart"[^>]*>`).FindAllString(dom, -1)
	if len(svgs) != len(policy.Names)+1 {
		t.Fatalf("rendered DOM has %d charts, want %d", len(svgs), len(policy.Names)+1)
	}
	ymax := regexp.MustCompile(`data-ymax="([^"]+)"`)
	width := regexp.MustCompile(` width="(\d+)"`)
	for i, s := range svgs {
		if m := ymax.FindStringSubmatch(s); i < len(policy.Names) && m[1] != ymax.FindStringSubmatch(svgs[0])[1] {
			t.Errorf("chart %d has y max %s, chart 0 %s: not one scale", i, m[1], ymax.FindStringSubmatch(svgs[0])[1])
		}
		if w, _ := strconv.Atoi(width.FindStringSubmatch(s)[1]); w < 900 {
			t.Errorf("chart %d is %d px wide in a 1100 px window: it does not use the page width", i, w)
		}
	}
	if n := strings.Count(dom, `class="axis-label`); n != 2*len(svgs) {
		t.Errorf("%d axis labels, want two per chart (%d)", n, 2*len(svgs))
	}
	for _, label := range []string{"nodes", "wait (seconds)", "percentile of instances", "time since the trace began"} {
		if !strings.Contains(dom, label) {
			t.Errorf("no axis labelled %q", label)
		}
	}
	if !strings.Contains(dom, `<table id="results">`) || strings.Count(dom, `<tr class="policy">`) != len(policy.Names) {
		t.Error("rendered DOM lacks the results table")
	}
	shotDir := dir
	if d := os.Getenv("TIDE_ARTEFACTS"); d != "" {
		shotDir = d // keep the screenshot as a test artefact
	}
	shot := filepath.Join(shotDir, "simulate-report.png")
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
	colours := map[string][3]int{"billed": {0x16, 0x80, 0x3c}, "demand": {0xc2, 0x41, 0x0c}}
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
