package sim

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tide-project/tide/internal/trace"
	"github.com/tide-project/tide/internal/webui"
)

// WriteTable writes the report as a text table: one row per policy, the
// lower bound beside them, and what the workload was.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Consolidation's columns appear when the workload has restartable work.
	moves := r.Config != nil && r.Config.Workload.Restartable > 0
	head := "policy\tnode-hours\t× bound\tcost $\twait p50 s\tp95 s\tp99 s\tutilization\tscale events\tmachines\tdisrupted\tinterrupted\tunfinished\t"
	if moves {
		head += "consolidated\tmoved\tlost inst-h\t"
	}
	fmt.Fprintln(tw, head)
	for _, p := range r.Results {
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.2f\t%.0f\t%.0f\t%.0f\t%.1f%%\t%d\t%d\t%d\t%d\t%d\t", p.Policy, p.NodeHours,
			ratio(p.NodeHours, r.Bound.NodeHours), p.Cost, p.WaitP50, p.WaitP95, p.WaitP99, 100*p.Utilization,
			p.ScaleEvents, p.Machines, p.Disrupted, p.Interrupted, p.Unfinished)
		if moves {
			fmt.Fprintf(tw, "%d\t%d\t%.1f\t", p.Consolidated, p.Moved, p.LostWorkHours)
		}
		fmt.Fprintln(tw)
	}
	for _, sk := range r.Skipped {
		fmt.Fprintf(tw, "%s\tn/a\t\t\t\t\t\t\t\t\t\t\t\t\n", sk.Policy)
	}
	fmt.Fprintf(tw, "lower bound\t%.1f\t1.000\t%.2f\t0\t0\t0\t%.1f%%\t\t\t\t\t\t\n", r.Bound.NodeHours, r.Bound.Cost,
		100*ratio(r.Bound.WorkNodeHours, r.Bound.NodeHours))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(r.Notes(), "\n"))
	return err
}

// Notes are the lines that say what the figures are about: the workload,
// the bound, the configuration.
func (r *Report) Notes() []string {
	wl := r.Workload
	b := r.Bound
	out := []string{
		fmt.Sprintf("trace %s (%s): %d jobs, %d instances replayed; read: %s", r.Trace, wl.Format.Name, len(wl.Jobs), wl.Instances, wl.Read),
	}
	var dropped []string
	if wl.SampledOut > 0 {
		dropped = append(dropped, fmt.Sprintf("%d sampled out", wl.SampledOut))
	}
	if wl.Empty > 0 {
		dropped = append(dropped, fmt.Sprintf("%d of zero length", wl.Empty))
	}
	if wl.NoRequest > 0 {
		dropped = append(dropped, fmt.Sprintf("%d requesting nothing", wl.NoRequest))
	}
	if wl.Read.Skipped > 0 {
		dropped = append(dropped, fmt.Sprintf("%d bad rows skipped (--skip-bad-rows)", wl.Read.Skipped))
	}
	if len(dropped) > 0 {
		out = append(out, "jobs not replayed: "+strings.Join(dropped, ", "))
	}
	if wl.Read.MissingBins > 0 {
		out = append(out, fmt.Sprintf("%d bins missing from the series: read as no demand (a rate) or no change (a level)", wl.Read.MissingBins))
	}
	if wl.From > 0 || wl.To > 0 {
		out = append(out, "window "+wl.windowString()+" of the trace (--from/--to): times are from its start")
	}
	for _, sk := range r.Skipped {
		out = append(out, fmt.Sprintf("%s: not applicable: %s", sk.Policy, sk.Reason))
	}
	if wl.Preexisting > 0 {
		out = append(out, fmt.Sprintf("%d jobs ran before the trace began: started on a pool warmed up before it; an instance of theirs still queued at the start waits from then on", wl.Preexisting))
	}
	out = append(out, fmt.Sprintf("lower bound (%s): capacity following demand exactly, no boot delay, jobs starting at submit, perfectly packed at every moment: %.1f node-hours, $%.2f, peak %d nodes; work alone needs %.1f node-hours (a bound for any schedule)",
		b.Offering.Name(), b.NodeHours, b.Cost, b.PeakNodes, b.WorkNodeHours))
	out = append(out, "waits: per instance, submit to first start; utilization: requested over billed, in the busiest dimension")
	if r.Config != nil && r.Config.Workload.Restartable > 0 {
		out = append(out, fmt.Sprintf("restartable: %.4g of the jobs may move; consolidated: nodes emptied by consolidation (tide, and karpenter by its own rule; the others do not consolidate), moved: instances restarted elsewhere, lost inst-h: the run time they lost", r.Config.Workload.Restartable))
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// chartData is what the report's charts draw, embedded in the page as
// JSON and drawn by the dashboard's chart renderer (webui.ChartJS): one
// chart per policy of demand, billed machines and the bound over time, all
// on one time axis and one vertical scale, and one chart of queue waits.
type chartData struct {
	// Span is the shared time axis, in seconds from the trace's origin.
	Span float64 `json:"span_s"`
	// YMax is the shared vertical scale, in nodes.
	YMax     float64        `json:"y_max"`
	Policies []policySeries `json:"policies"`
}

// policySeries is one policy's curves: times in seconds, values in nodes,
// and its wait at each whole percentile.
type policySeries struct {
	Policy string    `json:"policy"`
	Times  []float64 `json:"t"`
	Bound  []float64 `json:"bound"`
	Demand []float64 `json:"demand"`
	Billed []int     `json:"billed"`
	Waits  []float64 `json:"waits"`
}

type htmlChart struct {
	Index     int
	Policy    string
	NodeHours string
}

type htmlRow struct {
	Policy, NodeHours, Ratio, Cost, P50, P95, P99, Util string
	Scale, Machines, Disrupted, Interrupted, Unfinished int
}

type htmlPage struct {
	Title   string
	Rows    []htmlRow
	Bound   htmlRow
	Charts  []htmlChart
	Notes   []string
	Config  []string
	Data    chartData
	ChartJS template.JS
	Draw    template.JS
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em 2em;color:#1a1a1a}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
tr.bound td{font-style:italic;background:#f6f6f6}
.chart-box{width:100%;margin:0.3em 0 1.2em}
svg.chart{display:block;max-width:100%;height:auto}
pre{background:#f6f6f6;padding:1em;overflow-x:auto}
</style></head><body>
<h1>{{.Title}}</h1>
<h2>Results</h2>
<table id="results"><thead><tr><th>policy</th><th>node-hours</th><th>× bound</th><th>cost $</th><th>wait p50 s</th><th>p95 s</th><th>p99 s</th><th>utilization</th><th>scale events</th><th>machines</th><th>disrupted</th><th>interrupted</th><th>unfinished</th></tr></thead>
<tbody>{{range .Rows}}<tr class="policy"><td>{{.Policy}}</td><td>{{.NodeHours}}</td><td>{{.Ratio}}</td><td>{{.Cost}}</td><td>{{.P50}}</td><td>{{.P95}}</td><td>{{.P99}}</td><td>{{.Util}}</td><td>{{.Scale}}</td><td>{{.Machines}}</td><td>{{.Disrupted}}</td><td>{{.Interrupted}}</td><td>{{.Unfinished}}</td></tr>
{{end}}<tr class="bound"><td>lower bound</td><td>{{.Bound.NodeHours}}</td><td>1.000</td><td>{{.Bound.Cost}}</td><td>0</td><td>0</td><td>0</td><td>{{.Bound.Util}}</td><td></td><td></td><td></td><td></td><td></td></tr></tbody></table>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
<h2>Demand and capacity over time</h2>
<p>Every chart shares one time axis and one vertical scale, so the policies compare at a glance. Demand is running and queued work in nodes of the pool's largest shape; machines billed include booting and leaving ones.</p>
<noscript><p>The charts need JavaScript.</p></noscript>
{{range .Charts}}<h3>{{.Policy}} <small>({{.NodeHours}})</small></h3>
<div class="chart-box" id="chart-{{.Index}}"></div>
{{end}}<h2>Queue waits</h2>
<p>Each instance's wait from its job's submit to its first start, by percentile of instances (an instance that never started waits until the run's end).</p>
<div class="chart-box" id="waits"></div>
<h2>Configuration</h2>
<pre>{{range .Config}}{{.}}
{{end}}</pre>
<script type="application/json" id="report-data">{{.Data}}</script>
<script>{{.ChartJS}}</script>
<script>{{.Draw}}</script>
</body></html>
`))

// drawJS draws the report's charts from its embedded data.
const drawJS = `(function () {
  var d = JSON.parse(document.getElementById("report-data").textContent);
  var unit = 3600, name = "h";
  if (d.span_s > 72 * 3600) { unit = 86400; name = "days"; } else if (d.span_s < 3 * 3600) { unit = 60; name = "min"; }
  var colours = ["#1b63b5", "#c2410c", "#16803c", "#7a3db8", "#a16207", "#0e7490"];
  function draw() {
    d.policies.forEach(function (p, i) {
      var box = document.getElementById("chart-" + i);
      var pts = function (ys) {
        var out = [];
        for (var k = 0; k < p.t.length; k++) out.push([p.t[k] / unit, ys[k]]);
        return out;
      };
      tideChart.render(box, {label: p.policy + ": demand and capacity over time", height: 280,
        x: {label: "time since the trace began (" + name + ")", min: 0, max: d.span_s / unit},
        y: {label: "nodes", max: d.y_max},
        series: [
          {name: "lower bound (nodes)", cls: "bound", color: "#6b6b6b", step: true, points: pts(p.bound), width: 1},
          {name: "demand: running and queued work, in nodes", cls: "demand", color: "#c2410c", step: true, points: pts(p.demand), width: 1},
          {name: "machines billed", cls: "billed", color: "#16803c", step: true, points: pts(p.billed), width: 1.5},
        ]});
    });
    tideChart.render(document.getElementById("waits"), {label: "queue waits by percentile of instances, every policy",
      height: 320, x: {label: "percentile of instances", min: 0, max: 100}, y: {label: "wait (seconds)"},
      series: d.policies.map(function (p, i) {
        return {name: p.policy, cls: "waits", color: colours[i % colours.length],
          points: (p.waits || []).map(function (w, k) { return [k, w]; }), width: 1.8};
      })});
  }
  draw();
  var last = window.innerWidth;
  window.addEventListener("resize", function () { if (window.innerWidth !== last) { last = window.innerWidth; draw(); } });
})();`

// WriteHTML writes the report as one self-contained page: the table, a
// chart per policy of demand, billed machines and the lower bound over time
// (the results need Options.Buckets and the bound its curve) on one shared
// time axis and vertical scale, a chart of every policy's queue waits, and
// the configuration. The charts are drawn in the browser by the dashboard's
// SVG renderer, inlined with the data: the page loads nothing else.
func (r *Report) WriteHTML(w io.Writer) error {
	p := htmlPage{ChartJS: template.JS(webui.ChartJS), Draw: template.JS(drawJS)}
	p.Title = "tide simulate: " + r.Trace
	for _, res := range r.Results {
		p.Rows = append(p.Rows, htmlRow{Policy: res.Policy, NodeHours: fmt.Sprintf("%.1f", res.NodeHours),
			Ratio: fmt.Sprintf("%.3f", ratio(res.NodeHours, r.Bound.NodeHours)), Cost: fmt.Sprintf("%.2f", res.Cost),
			P50: fmt.Sprintf("%.0f", res.WaitP50), P95: fmt.Sprintf("%.0f", res.WaitP95), P99: fmt.Sprintf("%.0f", res.WaitP99),
			Util: fmt.Sprintf("%.1f%%", 100*res.Utilization), Scale: res.ScaleEvents, Machines: res.Machines,
			Disrupted: res.Disrupted, Interrupted: res.Interrupted, Unfinished: res.Unfinished})
	}
	p.Bound = htmlRow{NodeHours: fmt.Sprintf("%.1f", r.Bound.NodeHours), Cost: fmt.Sprintf("%.2f", r.Bound.Cost),
		Util: fmt.Sprintf("%.1f%%", 100*ratio(r.Bound.WorkNodeHours, r.Bound.NodeHours))}
	p.Notes = r.Notes()
	p.Config = r.Config.Describe()
	p.Data = r.chartData()
	for i, res := range r.Results {
		p.Charts = append(p.Charts, htmlChart{Index: i, Policy: res.Policy,
			NodeHours: fmt.Sprintf("%.1f node-hours, %.3f× the bound", res.NodeHours, ratio(res.NodeHours, r.Bound.NodeHours))})
	}
	return page.Execute(w, p)
}

// chartData gathers every policy's curves on one time axis (the longest
// run's) and one vertical scale (the largest value of any curve).
func (r *Report) chartData() chartData {
	d := chartData{YMax: 1, Policies: []policySeries{}}
	var span time.Duration
	for _, res := range r.Results {
		if n := len(res.Series); n > 0 {
			span = max(span, res.Series[n-1].At+bucketWidth(res.Series))
		}
	}
	d.Span = span.Seconds()
	for _, res := range r.Results {
		ps := policySeries{Policy: res.Policy, Waits: res.WaitCurve, Times: []float64{}, Bound: []float64{},
			Demand: []float64{}, Billed: []int{}}
		if ps.Waits == nil {
			ps.Waits = []float64{}
		}
		pts := res.Series
		if len(pts) > 0 {
			width := bucketWidth(pts)
			bound := boundBuckets(r.Bound.Curve, width, len(pts))
			for i, pt := range pts {
				ps.Times = append(ps.Times, pt.At.Seconds())
				ps.Bound = append(ps.Bound, bound[i])
				ps.Demand = append(ps.Demand, math.Round(pt.Demand*1000)/1000)
				ps.Billed = append(ps.Billed, pt.Billed)
				d.YMax = max(d.YMax, pt.Demand, float64(pt.Billed), bound[i])
			}
		}
		d.Policies = append(d.Policies, ps)
	}
	d.YMax = math.Ceil(d.YMax)
	return d
}

// bucketWidth returns the width of a series' buckets.
func bucketWidth(pts []Point) time.Duration {
	if len(pts) > 1 {
		return pts[1].At - pts[0].At
	}
	return time.Second
}

// boundBuckets folds a node-count curve into n buckets of the given width:
// the largest count in each.
func boundBuckets(curve []trace.Step, width time.Duration, n int) []float64 {
	out := make([]float64, n)
	cur, k := 0, 0
	for i := range out {
		end := time.Duration(i+1) * width
		best := cur
		for k < len(curve) && curve[k].At < end {
			cur = curve[k].Nodes
			best = max(best, cur)
			k++
		}
		out[i] = float64(best)
	}
	return out
}
