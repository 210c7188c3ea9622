package sim

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tide-project/tide/internal/trace"
)

// WriteTable writes the report as a text table: one row per policy, the
// lower bound beside them, and what the workload was.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tnode-hours\t× bound\tcost $\twait p50 s\tp95 s\tp99 s\tutilization\tscale events\tmachines\tdisrupted\tinterrupted\tunfinished\t")
	for _, p := range r.Results {
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.2f\t%.0f\t%.0f\t%.0f\t%.1f%%\t%d\t%d\t%d\t%d\t%d\t\n", p.Policy, p.NodeHours,
			ratio(p.NodeHours, r.Bound.NodeHours), p.Cost, p.WaitP50, p.WaitP95, p.WaitP99, 100*p.Utilization,
			p.ScaleEvents, p.Machines, p.Disrupted, p.Interrupted, p.Unfinished)
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
		out = append(out, fmt.Sprintf("%d jobs ran before the trace began: started on a warm pool, not counted in waits", wl.Preexisting))
	}
	out = append(out, fmt.Sprintf("lower bound (%s): capacity following demand exactly, no boot delay, jobs starting at submit, perfectly packed at every moment: %.1f node-hours, $%.2f, peak %d nodes; work alone needs %.1f node-hours (a bound for any schedule)",
		b.Offering.Name(), b.NodeHours, b.Cost, b.PeakNodes, b.WorkNodeHours))
	out = append(out, "waits: per instance, submit to first start; utilization: requested over billed, in the busiest dimension")
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// chart is one policy's SVG chart.
type chart struct {
	Policy                string
	Bound, Demand, Billed string // polyline points
	Width, Height, Plot   int
	YMax                  int
	XTicks, YTicks        []tick
	NodeHours             string
}

type tick struct {
	Pos   float64
	Label string
}

type htmlRow struct {
	Policy, NodeHours, Ratio, Cost, P50, P95, P99, Util string
	Scale, Machines, Disrupted, Interrupted, Unfinished int
}

type htmlPage struct {
	Title  string
	Rows   []htmlRow
	Bound  htmlRow
	Charts []chart
	Notes  []string
	Config []string
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
tr.bound td{font-style:italic;background:#f6f6f6}
svg{display:block;margin:0.5em 0 1.5em}
.legend span{margin-right:1.5em}
.sw{display:inline-block;width:1.2em;height:0.3em;vertical-align:middle;margin-right:0.3em}
pre{background:#f6f6f6;padding:1em;overflow-x:auto}
</style></head><body>
<h1>{{.Title}}</h1>
<h2>Results</h2>
<table id="results"><thead><tr><th>policy</th><th>node-hours</th><th>× bound</th><th>cost $</th><th>wait p50 s</th><th>p95 s</th><th>p99 s</th><th>utilization</th><th>scale events</th><th>machines</th><th>disrupted</th><th>interrupted</th><th>unfinished</th></tr></thead>
<tbody>{{range .Rows}}<tr class="policy"><td>{{.Policy}}</td><td>{{.NodeHours}}</td><td>{{.Ratio}}</td><td>{{.Cost}}</td><td>{{.P50}}</td><td>{{.P95}}</td><td>{{.P99}}</td><td>{{.Util}}</td><td>{{.Scale}}</td><td>{{.Machines}}</td><td>{{.Disrupted}}</td><td>{{.Interrupted}}</td><td>{{.Unfinished}}</td></tr>
{{end}}<tr class="bound"><td>lower bound</td><td>{{.Bound.NodeHours}}</td><td>1.000</td><td>{{.Bound.Cost}}</td><td>0</td><td>0</td><td>0</td><td>{{.Bound.Util}}</td><td></td><td></td><td></td><td></td><td></td></tr></tbody></table>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
<h2>Demand and capacity over time</h2>
<p class="legend"><span><i class="sw" style="background:#999"></i>lower bound (nodes)</span><span><i class="sw" style="background:#d95f02"></i>demand: running and queued work, in nodes</span><span><i class="sw" style="background:#1b9e77"></i>machines billed</span></p>
{{range .Charts}}<h3>{{.Policy}} <small>({{.NodeHours}})</small></h3>
<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Policy}}: demand and capacity over time">
<rect x="50" y="10" width="{{.Plot}}" height="{{$.ChartPlotH}}" fill="none" stroke="#ccc"/>
{{range .YTicks}}<line x1="46" x2="50" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#666"/><text x="44" y="{{.Pos}}" font-size="10" text-anchor="end" dominant-baseline="middle">{{.Label}}</text>
{{end}}{{range .XTicks}}<line x1="{{.Pos}}" x2="{{.Pos}}" y1="{{$.ChartBottom}}" y2="{{$.ChartTickEnd}}" stroke="#666"/><text x="{{.Pos}}" y="{{$.ChartLabelY}}" font-size="10" text-anchor="middle">{{.Label}}</text>
{{end}}<polyline class="bound" fill="none" stroke="#999" stroke-width="1" points="{{.Bound}}"/>
<polyline class="demand" fill="none" stroke="#d95f02" stroke-width="1" points="{{.Demand}}"/>
<polyline class="billed" fill="none" stroke="#1b9e77" stroke-width="1.2" points="{{.Billed}}"/>
</svg>
{{end}}<h2>Configuration</h2>
<pre>{{range .Config}}{{.}}
{{end}}</pre>
</body></html>
`))

// Chart geometry.
const (
	chartW, chartH = 960, 240
	plotX, plotY   = 50, 10
	plotW, plotH   = chartW - plotX - 20, chartH - plotY - 30
)

// WriteHTML writes the report as one self-contained page: the table, an
// inline SVG chart per policy of demand, billed machines and the lower
// bound over time (the results need Options.Buckets and the bound its
// curve), and the configuration.
func (r *Report) WriteHTML(w io.Writer) error {
	p := struct {
		htmlPage
		ChartPlotH, ChartBottom, ChartTickEnd, ChartLabelY int
	}{ChartPlotH: plotH, ChartBottom: plotY + plotH, ChartTickEnd: plotY + plotH + 4, ChartLabelY: plotY + plotH + 16}
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
	// One time axis for every chart: the longest run's.
	var span time.Duration
	for _, res := range r.Results {
		if n := len(res.Series); n > 0 {
			span = max(span, res.Series[n-1].At+bucketWidth(res.Series))
		}
	}
	for _, res := range r.Results {
		p.Charts = append(p.Charts, r.chart(res, span))
	}
	return page.Execute(w, p)
}

// bucketWidth returns the width of a series' buckets.
func bucketWidth(pts []Point) time.Duration {
	if len(pts) > 1 {
		return pts[1].At - pts[0].At
	}
	return time.Second
}

// chart draws one policy's series beside the bound's curve, on a time
// axis of the given span.
func (r *Report) chart(res *Result, span time.Duration) chart {
	c := chart{Policy: res.Policy, Width: chartW, Height: chartH, Plot: plotW,
		NodeHours: fmt.Sprintf("%.1f node-hours, %.3f× the bound", res.NodeHours, ratio(res.NodeHours, r.Bound.NodeHours))}
	pts := res.Series
	if len(pts) == 0 {
		return c
	}
	width := bucketWidth(pts)
	span = max(span, pts[len(pts)-1].At+width)
	bound := boundBuckets(r.Bound.Curve, width, len(pts))
	ymax := 1.0
	for i, p := range pts {
		ymax = max(ymax, p.Demand, float64(p.Billed), bound[i])
	}
	c.YMax = int(math.Ceil(ymax))
	x := func(t time.Duration) float64 { return plotX + float64(plotW)*float64(t)/float64(span) }
	y := func(v float64) float64 { return plotY + float64(plotH)*(1-v/float64(c.YMax)) }
	var b, d, m strings.Builder
	for i, p := range pts {
		for k, t := range []time.Duration{p.At, p.At + width} {
			sep := " "
			if i == 0 && k == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s%.1f,%.1f", sep, x(t), y(bound[i]))
			fmt.Fprintf(&d, "%s%.1f,%.1f", sep, x(t), y(p.Demand))
			fmt.Fprintf(&m, "%s%.1f,%.1f", sep, x(t), y(float64(p.Billed)))
		}
	}
	c.Bound, c.Demand, c.Billed = b.String(), d.String(), m.String()
	for _, v := range niceTicks(float64(c.YMax), 5) {
		c.YTicks = append(c.YTicks, tick{Pos: y(v), Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	unit, name := time.Hour, "h"
	if span > 72*time.Hour {
		unit, name = 24*time.Hour, "d"
	} else if span < 3*time.Hour {
		unit, name = time.Minute, "min"
	}
	for _, v := range niceTicks(float64(span)/float64(unit), 8) {
		c.XTicks = append(c.XTicks, tick{Pos: x(time.Duration(v * float64(unit))), Label: strconv.FormatFloat(v, 'f', -1, 64) + name})
	}
	return c
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

// niceTicks returns up to about n round values from 0 to hi.
func niceTicks(hi float64, n int) []float64 {
	if hi <= 0 {
		return []float64{0}
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, f := range []float64{1, 2, 5, 10} {
		if f*mag >= raw {
			step = f * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v <= hi+step/1e9; v += step {
		out = append(out, math.Round(v*1e9)/1e9)
	}
	return out
}
