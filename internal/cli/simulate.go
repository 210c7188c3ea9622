package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/sim"
	"github.com/tide-project/tide/internal/trace"
)

// htmlBuckets is the number of points per chart of the HTML report.
const htmlBuckets = 600

func newSimulateCmd(s Streams) *cobra.Command {
	var tracePath, cfgPath, pol, prefer, output, htmlPath, fromS, toS, routingMode string
	var seed uint64
	var skipBad bool
	var restartableF float64
	var gangs bool
	var cb casesFlags
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE [--pool-config F] [--policy NAME|all] | --cases N [--seed S] [--seeds K]",
		Short: "Replay a workload trace against a simulated cloud under one or all scaling policies",
		Long: `Replay a workload trace (a job trace, or a request-rate or demand series) on
virtual time against a simulated cloud with boot latency, prices and spot
interruptions, under one scaling policy or all of them, and report for each:
node-hours and cost (from the cloud's billing ledger), queue wait percentiles
(submit to running, per instance), utilization, scale events and instances
disrupted by scale-down, beside the offline lower bound (capacity that follows
demand exactly, with no boot delay).

The pool config is tide's configuration with one pool of provider type sim;
its provider options set the cloud's latencies, and the top-level workload and
scheduler sections say how the trace becomes instances. Without --pool-config
a default pool is chosen from the trace's format, its max sized from the
trace (twice its peak demand in nodes, plus 4; the choice is printed).
examples/simulate/ holds one config per shipped trace.

--from and --to replay a window of the trace, in trace time ("24h", "36h30m"
or seconds): the jobs submitted in it, with those already running at --from as
the initial load; what still runs at --to ends there. --restartable F marks a
fraction F of the jobs (by a hash of the job id) restartable: consolidation may
move them (the moves and the work they lost are reported). --gangs replays the
jobs split_to_node splits (multi-node jobs) as gangs, started whole or not at
all; with or without it, their waits and the GPU-hours parts held while others
of their job waited are reported. A series that skips bins is read with each missing bin as no
demand (a rate) or no change (a level); the report says how many were missing.

--policy all runs the policies side by side (as many at once as GOMAXPROCS
allows), each on its own simulated cloud with the same seed: the report is
the same as running them one by one. A policy that cannot serve the trace
(the utilization policy on a pool or trace without GPUs) is not run; the
report says why.

Bad trace input is an error naming the file, line and column (exit code 2);
--skip-bad-rows skips such rows instead and says how many. A run that breaks
an invariant (a node over capacity, work disrupted by scale-down) prints its
figures and fails (exit code 1).

--cases N is the policy benchmark: it draws N cases (a window of a shipped
trace, a pool of 1 to 4 offerings of different sizes, CPU-only or with GPUs,
on demand and spot, a boot time of 30 s to 5 min) from the generator seed
--seed, runs every policy on each case over the simulation seeds 1..--seeds,
and reports per case (--rows FILE, CSV) and in total whether any policy
dominates tide (cheaper by more than the seed spread at an equal or shorter
mean p95 wait), tide's cost against the cheapest other policy and the lower
bound, and each policy's p95 wait against the boot time. The traces come
from --traces, their configs from --configs (examples/simulate). --policy
NAME runs that policy alone (every policy by default).

--routing tide|first|both replays a config of several pools (each of
provider type sim, an optional strategy beside them) together: each job is
routed at its submission as the head routes an instance (internal/routing:
weight, effective cost, a pool at its max overflowing, the strategy's split)
or to the first pool that fits (first-match, tide's routing before weights
and costs), then every pool runs its share on its own simulated cloud; the
report gives the cluster's cost and waits and each pool's share.
examples/simulate/pools/two-pools.yaml is an on-demand and a spot pool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prefer != "" && prefer != policy.PreferBalanced && prefer != policy.PreferCost && prefer != policy.PreferLatency {
				return badInput(fmt.Errorf("--prefer: want %s, %s or %s, got %q", policy.PreferBalanced, policy.PreferCost, policy.PreferLatency, prefer))
			}
			cb.prefer = prefer
			if cb.cases > 0 {
				return runCases(cmd, s, cb, seed, pol)
			}
			if tracePath == "" {
				return badInput(errors.New("--trace is required (or --cases N for the policy benchmark)"))
			}
			if output != "table" && output != "json" {
				return badInput(fmt.Errorf("-o: want table or json, got %q", output))
			}
			defer simGC()()
			if routingMode != "" {
				return runPoolsSim(cmd, s, tracePath, cfgPath, pol, routingMode, output, seed, skipBad)
			}
			cfg, err := simConfig(cfgPath, tracePath)
			if err != nil {
				return badInput(err)
			}
			if err := simWindow(cfg, fromS, toS); err != nil {
				return badInput(err)
			}
			if cmd.Flags().Changed("restartable") {
				if !(restartableF >= 0 && restartableF <= 1) {
					return badInput(fmt.Errorf("--restartable: want a fraction within [0, 1], got %v", restartableF))
				}
				cfg.Workload.Restartable = restartableF
			}
			if cmd.Flags().Changed("gangs") {
				cfg.Workload.Gangs = gangs
			}
			if prefer != "" {
				cfg.Pool.Scaling.Prefer = prefer
			}
			names, err := simPolicies(pol, cfg)
			if err != nil {
				return badInput(err)
			}
			w, err := sim.ReadWorkload(tracePath, cfg, skipBad)
			if err != nil {
				return badInput(err)
			}
			if w.Read.Skipped > 0 {
				fmt.Fprintf(s.Err, "tide: %s: skipped %d bad rows (--skip-bad-rows): %s\n", tracePath, w.Read.Skipped, w.Read)
			}
			bound, err := w.Bound(cfg, htmlPath != "")
			if err != nil {
				return badInput(fmt.Errorf("%s: %w", tracePath, err))
			}
			if cfgPath == "" {
				fmt.Fprintf(s.Err, "tide: %s\n", sim.SizeDefaultPool(cfg, bound))
			}
			rep := &sim.Report{Trace: tracePath, Config: cfg, Workload: w, Bound: bound}
			var run []string
			for _, name := range names {
				if why := sim.Applicable(cfg, w, name); why != "" {
					rep.Skipped = append(rep.Skipped, sim.Skipped{Policy: name, Reason: why})
					continue
				}
				run = append(run, name)
			}
			for _, sk := range rep.Skipped {
				fmt.Fprintf(s.Err, "tide: %s: policy %s not applicable, not run: %s\n", tracePath, sk.Policy, sk.Reason)
			}
			bar := newProgress(s.Err)
			buckets := 0
			if htmlPath != "" {
				buckets = htmlBuckets
			}
			results, errs := sim.RunAll(cmd.Context(), cfg, w, run, sim.Options{Seed: seed, Buckets: buckets}, 0,
				func(f float64) { bar.show(f, strings.Join(run, ", ")) })
			var runErr error
			for i, name := range run {
				if results[i] == nil {
					bar.clear()
					return fmt.Errorf("simulate %s: %w", name, errs[i])
				}
				if errs[i] != nil && runErr == nil {
					runErr = fmt.Errorf("simulate %s: %w", name, errs[i])
				}
				rep.Results = append(rep.Results, results[i])
			}
			bar.clear()
			if htmlPath != "" {
				if err := writeHTMLReport(htmlPath, rep); err != nil {
					return err
				}
			}
			if output == "json" {
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep.JSON()); err != nil {
					return err
				}
			} else if err := rep.WriteTable(s.Out); err != nil {
				return err
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "trace file (CSV) to replay")
	f.StringVar(&cfgPath, "pool-config", "", "simulation config (YAML): one pool of provider type sim, plus workload and scheduler sections")
	f.StringVar(&routingMode, "routing", "", "replay a config of several pools together, each job routed at submission: tide (weight, cost, overflow, strategy: as the head), first (the first pool that fits) or both")
	f.StringVar(&prefer, "prefer", "", "the tide policy's prefer (balanced, cost or latency) for the pool, or for every case with --cases (default: the config's)")
	f.StringVar(&pol, "policy", "", "policy to run: "+strings.Join(policy.Names, ", ")+", or all (default: the pool's)")
	f.Uint64Var(&seed, "seed", 1, "seed of the simulated cloud's randomness (boot latencies, spot interruptions)")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.StringVar(&htmlPath, "html", "", "also write a self-contained HTML report (charts, table, configuration) to this file")
	f.StringVar(&fromS, "from", "", "replay the trace from this trace time on (a duration such as 24h, or seconds)")
	f.StringVar(&toS, "to", "", "replay the trace up to this trace time (a duration such as 48h, or seconds)")
	f.BoolVar(&gangs, "gangs", false, "replay multi-node jobs (split by split_to_node) as gangs: all parts start together (default: the config's workload.gangs)")
	f.Float64Var(&restartableF, "restartable", -1, "fraction of the trace's jobs (by a hash of the job id) that consolidation may move, 0..1 (default: the config's workload.restartable, else 0)")
	f.BoolVar(&skipBad, "skip-bad-rows", false, "skip malformed trace rows (and say how many) instead of failing")
	f.IntVar(&cb.cases, "cases", 0, "run the policy benchmark on this many generated cases (--seed seeds the generator)")
	f.IntVar(&cb.seeds, "seeds", 3, "with --cases: the simulation seeds 1..K each case runs on")
	f.StringVar(&cb.traces, "traces", filepath.Join("..", "shared", "traces"), "with --cases: the folder of the shared traces")
	f.StringVar(&cb.configs, "configs", filepath.Join("examples", "simulate"), "with --cases: the folder of the shipped configs")
	f.StringVar(&cb.rows, "rows", "", "with --cases: write one CSV row per case to this file")
	return cmd
}

// simConfig loads the pool config, or picks the default for the trace's
// format.
func simConfig(cfgPath, tracePath string) (*sim.Config, error) {
	if cfgPath != "" {
		return sim.LoadConfig(cfgPath)
	}
	r, err := trace.Open(tracePath, trace.Options{IgnoreNormalized: true})
	if err != nil {
		return nil, err
	}
	f := r.Format()
	if err := r.Close(); err != nil {
		return nil, err
	}
	return sim.DefaultConfig(f), nil
}

// simWindow applies --from and --to to the workload section.
func simWindow(cfg *sim.Config, fromS, toS string) error {
	for _, f := range []struct {
		flag, v string
		dst     *config.Duration
	}{{"--from", fromS, &cfg.Workload.From}, {"--to", toS, &cfg.Workload.To}} {
		if f.v == "" {
			continue
		}
		d, err := parseTraceTime(f.v)
		if err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.dst = config.Duration(d)
	}
	if from, to := cfg.Workload.From, cfg.Workload.To; to != 0 && to <= from {
		return fmt.Errorf("--to: must be after --from (%s), got %s", time.Duration(from), time.Duration(to))
	}
	return nil
}

// parseTraceTime reads a trace time: a Go duration ("36h") or seconds.
func parseTraceTime(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return 0, fmt.Errorf("want a time from the trace's start, got %s", v)
		}
		return d, nil
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil || !(sec >= 0) || sec > 1e12 {
		return 0, fmt.Errorf("want a trace time such as 24h, 90m or 3600 (seconds), got %q", v)
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// simPolicies resolves --policy: one name, all, or the pool's own.
func simPolicies(name string, cfg *sim.Config) ([]string, error) {
	switch {
	case name == "all":
		return slices.Clone(policy.Names), nil
	case name == "":
		pc, err := cfg.PolicyConfig("")
		if err != nil {
			return nil, err
		}
		return []string{pc.Policy}, nil
	case slices.Contains(policy.Names, name):
		return []string{name}, nil
	}
	return nil, fmt.Errorf("--policy: unknown policy %q (want %s or all)", name, strings.Join(policy.Names, ", "))
}

func writeHTMLReport(path string, rep *sim.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	if err := rep.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("--html: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--html: writing %s: %w", path, err)
	}
	return nil
}

// progress draws a progress bar on a terminal once a run has taken more
// than a second; elsewhere (a pipe, a file, a test) it draws nothing.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	shown bool
	last  int
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, on: isTerminal(w), start: time.Now(), last: -1}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const barWidth = 30

// show draws the bar at fraction f (0..1) with a label.
func (p *progress) show(f float64, label string) {
	if !p.on || time.Since(p.start) < time.Second {
		return
	}
	pct := int(f * 100)
	if pct == p.last {
		return
	}
	p.last = pct
	p.shown = true
	n := min(max(int(f*barWidth), 0), barWidth)
	fmt.Fprintf(p.w, "\r[%s%s] %3d%% %s\x1b[K", strings.Repeat("=", n), strings.Repeat(" ", barWidth-n), pct, label)
}

// clear erases the bar.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
