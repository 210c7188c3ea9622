package sim

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// Generate draws n cases of seed from bases (GenerateCase), each prepared:
// a draw whose pool cannot serve its window (a job that fits no offering,
// or a window without jobs) or that is too large for a quick benchmark
// (more than caseMaxInstances instances, or a lower bound of more than
// caseMaxPeak nodes at once) is drawn again (attempt 1, 2, ...), so the
// cases are a function of seed, n and the bases alone. Each case's
// workload and lower bound come with it.
func Generate(seed uint64, n int, bases []*CaseBase) ([]*Case, []*Workload, []trace.Bound, error) {
	cases := make([]*Case, n)
	ws := make([]*Workload, n)
	bounds := make([]trace.Bound, n)
	for i := range n {
		var err error
		for attempt := range 50 {
			c := GenerateCase(seed, i, attempt, bases)
			var w *Workload
			var b trace.Bound
			if w, b, err = c.Workload(); err == nil && (w.Instances > caseMaxInstances || b.PeakNodes > caseMaxPeak) {
				err = fmt.Errorf("%s: %d instances, a bound of %d nodes: too large", c.Describe(), w.Instances, b.PeakNodes)
			}
			if err == nil {
				cases[i], ws[i], bounds[i] = c, w, b
				break
			}
		}
		if cases[i] == nil {
			return nil, nil, nil, fmt.Errorf("case %d/%d: no draw in 50 serves its trace: %w", seed, i, err)
		}
	}
	return cases, ws, bounds, nil
}

// Workload prepares the case's workload from its base's trace (the jobs
// split to the pool's largest node when the config says so, the window
// kept), computes its lower bound, and sets the pool's max from it
// (SizeNodes).
func (c *Case) Workload() (*Workload, trace.Bound, error) {
	w, err := prepareSplit(c.Base.Read, c.Config)
	if err != nil {
		return nil, trace.Bound{}, err
	}
	b, err := w.Bound(c.Config, false)
	if err != nil {
		return nil, trace.Bound{}, err
	}
	c.Config.Pool.Nodes.Max = SizeNodes(b)
	return w, b, nil
}

// SizeNodes returns a pool max that can serve a workload of lower bound b:
// twice the bound's peak node count plus 4, the peak taken on the
// offering that needs the most nodes (the smallest), plus, when that one
// cannot host every job, the peak of the offering that needs the most
// among those that can. Packing, boots and spare nodes keep a real pool
// above the bound's perfect packing, and a pool may buy its smallest
// nodes for most of the work: twice that peak leaves every policy room,
// so that none is held at its max.
func SizeNodes(b trace.Bound) int {
	all, feasible, infeasible := 0, 0, false
	for _, o := range b.Offerings {
		all = max(all, o.PeakNodes)
		if o.Feasible() {
			feasible = max(feasible, o.PeakNodes)
		} else {
			infeasible = true
		}
	}
	peak := all
	if infeasible {
		peak += feasible
	}
	return 2*peak + 4
}

// PolicyRuns are one policy's figures on one case, one entry per seed.
type PolicyRuns struct {
	Policy                       string
	Cost, P50, P95, P99          []float64
	NodeHours                    []float64
	Disrupted, Interrupted, Left int
}

// MeanCost is the mean cost over the seeds.
func (p *PolicyRuns) MeanCost() float64 { return mean(p.Cost) }

// MeanP95 is the mean p95 wait over the seeds, in seconds.
func (p *PolicyRuns) MeanP95() float64 { return mean(p.P95) }

// Spread is the seed-to-seed spread of the cost: its sample standard
// deviation over the seeds relative to its mean (0 with one seed).
func (p *PolicyRuns) Spread() float64 {
	m := mean(p.Cost)
	if len(p.Cost) < 2 || m == 0 {
		return 0
	}
	ss := 0.0
	for _, c := range p.Cost {
		ss += (c - m) * (c - m)
	}
	return math.Sqrt(ss/float64(len(p.Cost)-1)) / m
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// CaseResult is one case run under every applicable policy on every seed.
type CaseResult struct {
	Case      *Case
	Instances int
	Bound     trace.Bound
	// Runs has one entry per policy run, in the order of policy.Names.
	Runs []*PolicyRuns
	// Err is the first run's error, if any (the case's figures are then
	// incomplete).
	Err error
	// RunTime is the summed wall time of the case's runs.
	RunTime time.Duration
}

// Verdict is what a case says of the tide policy, on the means over the
// seeds.
type Verdict struct {
	// DominatedBy names the policy that dominates tide most (cheaper by
	// more than the seed spread at an equal or shorter mean p95), "" when
	// none does; Margin is by how much it is cheaper (a fraction of tide's
	// cost) and Spread the seed spread it was judged against (the larger
	// of the two policies').
	DominatedBy    string
	Margin, Spread float64
	// BestOther is the cheapest other policy (whatever its waits) and
	// VsBestOther tide's mean cost against its, less 1.
	BestOther   string
	VsBestOther float64
	// VsBound is tide's mean cost over the lower bound's cost.
	VsBound float64
	// P95 is tide's mean p95 wait (s); Boot the pool's median boot (s).
	P95, Boot float64
}

// Tide returns the tide policy's runs, or nil.
func (r *CaseResult) Tide() *PolicyRuns {
	for _, p := range r.Runs {
		if p.Policy == policy.Tide {
			return p
		}
	}
	return nil
}

// Judge returns the case's verdict (see Verdict).
func (r *CaseResult) Judge() Verdict {
	t := r.Tide()
	v := Verdict{Boot: r.Case.Config.Cloud.Boot.Median.Seconds()}
	if t == nil {
		return v
	}
	tc, tp := t.MeanCost(), t.MeanP95()
	v.P95 = tp
	if r.Bound.Cost > 0 {
		v.VsBound = tc / r.Bound.Cost
	}
	best := math.Inf(1)
	for _, p := range r.Runs {
		if p == t {
			continue
		}
		pc := p.MeanCost()
		if pc < best {
			best, v.BestOther = pc, p.Policy
		}
		if margin, spread, ok := Dominates(p, t); ok && margin > v.Margin {
			v.DominatedBy, v.Margin, v.Spread = p.Policy, margin, spread
		}
	}
	if best > 0 && !math.IsInf(best, 0) {
		v.VsBestOther = tc/best - 1
	}
	return v
}

// Dominates reports whether p dominates t on the means over the seeds:
// p's mean p95 wait is equal to t's or shorter and p is cheaper by more
// than the seed spread (the larger of the two policies' Spread). margin is
// by how much p is cheaper, a fraction of t's mean cost.
func Dominates(p, t *PolicyRuns) (margin, spread float64, ok bool) {
	tc := t.MeanCost()
	if tc <= 0 {
		return 0, 0, false
	}
	spread = max(t.Spread(), p.Spread())
	margin = 1 - p.MeanCost()/tc
	return margin, spread, p.MeanP95() <= t.MeanP95()*(1+1e-9) && margin > spread+1e-9
}

// RunCases runs the named policies (those applicable) on every case on
// each seed, at most parallel runs at once (GOMAXPROCS when parallel <= 0); progress,
// when set, is called after each run with the runs done and their total.
func RunCases(ctx context.Context, cases []*Case, ws []*Workload, bounds []trace.Bound, names []string, seeds []uint64, parallel int,
	progress func(done, total int)) []*CaseResult {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	type task struct{ c, p, s int }
	out := make([]*CaseResult, len(cases))
	var tasks []task
	for i, c := range cases {
		out[i] = &CaseResult{Case: c, Instances: ws[i].Instances, Bound: bounds[i]}
		for _, name := range names {
			if Applicable(c.Config, ws[i], name) != "" {
				continue
			}
			p := len(out[i].Runs)
			out[i].Runs = append(out[i].Runs, &PolicyRuns{Policy: name, Cost: make([]float64, len(seeds)),
				P50: make([]float64, len(seeds)), P95: make([]float64, len(seeds)), P99: make([]float64, len(seeds)),
				NodeHours: make([]float64, len(seeds))})
			for s := range seeds {
				tasks = append(tasks, task{i, p, s})
			}
		}
	}
	var mu sync.Mutex
	done := 0
	ch := make(chan task)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range ch {
				cr := out[t.c]
				pr := cr.Runs[t.p]
				began := time.Now()
				res, err := Run(ctx, cr.Case.Config, ws[t.c], Options{Policy: pr.Policy, Seed: seeds[t.s]})
				mu.Lock()
				cr.RunTime += time.Since(began)
				if err != nil && cr.Err == nil {
					cr.Err = fmt.Errorf("%s, seed %d: %w", pr.Policy, seeds[t.s], err)
				}
				if res != nil {
					pr.Cost[t.s], pr.P50[t.s], pr.P95[t.s], pr.P99[t.s] = res.Cost, res.WaitP50, res.WaitP95, res.WaitP99
					pr.NodeHours[t.s] = res.NodeHours
					pr.Disrupted += res.Disrupted
					pr.Interrupted += res.Interrupted
					pr.Left += res.Unfinished
				}
				done++
				if progress != nil {
					progress(done, len(tasks))
				}
				mu.Unlock()
			}
		}()
	}
	for _, t := range tasks {
		if ctx.Err() != nil {
			break
		}
		ch <- t
	}
	close(ch)
	wg.Wait()
	return out
}

// WriteCasesCSV writes one row per case: the case, its pool and window,
// every policy's mean cost, cost spread and mean p95, and the verdict.
func WriteCasesCSV(w io.Writer, results []*CaseResult) error {
	cw := csv.NewWriter(w)
	head := []string{"case", "trace", "from_s", "to_s", "offerings", "boot_median_s", "instances", "bound_cost"}
	for _, p := range policy.Names {
		head = append(head, p+"_cost", p+"_spread_pct", p+"_p95_s")
	}
	head = append(head, "dominated_by", "margin_pct", "spread_pct", "best_other", "tide_vs_best_other_pct",
		"tide_vs_bound", "tide_p95_over_boot", "run_s", "error")
	if err := cw.Write(head); err != nil {
		return err
	}
	f := func(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	for _, r := range results {
		c := r.Case
		var offs []string
		for _, o := range c.Config.Pool.Offerings {
			offs = append(offs, fmt.Sprintf("%s %s $%g", o.Name(), o.Resources, o.PricePerHour))
		}
		row := []string{c.Name(), c.Base.Trace, f(time.Duration(c.Config.Workload.From).Seconds(), 0),
			f(time.Duration(c.Config.Workload.To).Seconds(), 0), strings.Join(offs, "; "),
			f(c.Config.Cloud.Boot.Median.Seconds(), 0), strconv.Itoa(r.Instances), f(r.Bound.Cost, 4)}
		for _, name := range policy.Names {
			i := slices.IndexFunc(r.Runs, func(p *PolicyRuns) bool { return p.Policy == name })
			if i < 0 {
				row = append(row, "", "", "")
				continue
			}
			p := r.Runs[i]
			row = append(row, f(p.MeanCost(), 4), f(100*p.Spread(), 3), f(p.MeanP95(), 1))
		}
		v := r.Judge()
		errS := ""
		if r.Err != nil {
			errS = r.Err.Error()
		}
		row = append(row, v.DominatedBy, f(100*v.Margin, 3), f(100*v.Spread, 3), v.BestOther, f(100*v.VsBestOther, 3),
			f(v.VsBound, 3), f(v.P95/max(v.Boot, 1), 2), f(r.RunTime.Seconds(), 1), errS)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// CaseSummary is the benchmark's totals over its cases.
type CaseSummary struct {
	Cases, Failed int
	// NotDominated counts the cases no policy dominates tide on;
	// WorstMargin is the largest margin of a domination (0 when none).
	NotDominated int
	WorstMargin  float64
	WorstCase    string
	// DominatedBy counts the dominations per policy.
	DominatedBy map[string]int
	// VsBestOther and VsBound are quantiles (p10, p50, p90, max) over
	// the cases of tide's cost against the cheapest other policy (less 1)
	// and against the lower bound; Cheapest counts the cases where tide
	// is the cheapest policy.
	VsBestOther, VsBound [4]float64
	Cheapest             int
	// P95OverBoot is, per policy, the quantiles (p10, p50, p90, max) over
	// the cases of the mean p95 wait over the median boot.
	P95OverBoot map[string][4]float64
	// CostVsTide is, per policy, the median over the cases of its mean
	// cost over tide's; Runs the cases it ran on.
	CostVsTide map[string]float64
	Runs       map[string]int
}

// Summarize totals the results.
func Summarize(results []*CaseResult) CaseSummary {
	s := CaseSummary{Cases: len(results), DominatedBy: map[string]int{}, P95OverBoot: map[string][4]float64{},
		CostVsTide: map[string]float64{}, Runs: map[string]int{}}
	var vsBest, vsBound []float64
	p95s := map[string][]float64{}
	ratios := map[string][]float64{}
	for _, r := range results {
		if r.Err != nil || r.Tide() == nil {
			s.Failed++
			continue
		}
		v := r.Judge()
		if v.DominatedBy == "" {
			s.NotDominated++
		} else {
			s.DominatedBy[v.DominatedBy]++
			if v.Margin > s.WorstMargin {
				s.WorstMargin, s.WorstCase = v.Margin, r.Case.Name()+" "+r.Case.Base.Trace
			}
		}
		vsBest = append(vsBest, v.VsBestOther)
		vsBound = append(vsBound, v.VsBound)
		if v.VsBestOther <= 0 {
			s.Cheapest++
		}
		tc := r.Tide().MeanCost()
		for _, p := range r.Runs {
			s.Runs[p.Policy]++
			p95s[p.Policy] = append(p95s[p.Policy], p.MeanP95()/max(v.Boot, 1))
			if tc > 0 {
				ratios[p.Policy] = append(ratios[p.Policy], p.MeanCost()/tc)
			}
		}
	}
	s.VsBestOther, s.VsBound = quantiles(vsBest), quantiles(vsBound)
	for p, xs := range p95s {
		s.P95OverBoot[p] = quantiles(xs)
	}
	for p, xs := range ratios {
		s.CostVsTide[p] = quantiles(xs)[1]
	}
	return s
}

// quantiles returns the p10, p50, p90 and maximum of xs (nearest rank).
func quantiles(xs []float64) [4]float64 {
	if len(xs) == 0 {
		return [4]float64{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(int(math.Ceil(q*float64(len(s))))-1+boolInt(q == 0), len(s)-1)] }
	return [4]float64{at(0.10), at(0.50), at(0.90), s[len(s)-1]}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteSummary prints the summary as a short table.
func (s CaseSummary) WriteSummary(w io.Writer) error {
	n := s.Cases - s.Failed
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	fmt.Fprintf(w, "cases: %d (%d failed)\n", s.Cases, s.Failed)
	fmt.Fprintf(w, "tide not dominated: %d of %d (%.1f %%)", s.NotDominated, n, pct(s.NotDominated, n))
	if s.WorstMargin > 0 {
		fmt.Fprintf(w, "; worst: %.2f %% cheaper at an equal or shorter p95 (case %s)", 100*s.WorstMargin, s.WorstCase)
	}
	fmt.Fprintln(w)
	if len(s.DominatedBy) > 0 {
		var by []string
		for _, p := range policy.Names {
			if c := s.DominatedBy[p]; c > 0 {
				by = append(by, fmt.Sprintf("%s %d", p, c))
			}
		}
		fmt.Fprintf(w, "dominated by: %s\n", strings.Join(by, ", "))
	}
	fmt.Fprintf(w, "tide the cheapest policy: %d of %d\n", s.Cheapest, n)
	fmt.Fprintf(w, "tide against the cheapest other policy: p10 %+.2f %%, median %+.2f %%, p90 %+.2f %%, max %+.2f %%\n",
		100*s.VsBestOther[0], 100*s.VsBestOther[1], 100*s.VsBestOther[2], 100*s.VsBestOther[3])
	fmt.Fprintf(w, "tide against the lower bound: p10 %.3f, median %.3f, p90 %.3f, max %.3f\n",
		s.VsBound[0], s.VsBound[1], s.VsBound[2], s.VsBound[3])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tcases\tcost / tide's (median)\tp95 / boot p10\tp50\tp90\tmax\tdominates tide\t")
	for _, p := range policy.Names {
		q, ok := s.P95OverBoot[p]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n", p, s.Runs[p], s.CostVsTide[p], q[0], q[1], q[2], q[3], s.DominatedBy[p])
	}
	return tw.Flush()
}

// Describe is one line naming the case's pool and window, for logs.
func (c *Case) Describe() string {
	var offs []string
	for _, o := range c.Config.Pool.Offerings {
		offs = append(offs, o.Name())
	}
	return fmt.Sprintf("%s %s window %s boot %s pool [0, %d] %s", c.Name(), c.Base.Trace,
		windowString(time.Duration(c.Config.Workload.From), time.Duration(c.Config.Workload.To)), c.Config.Cloud.Boot,
		c.Config.Pool.Nodes.Max, strings.Join(offs, ", "))
}
