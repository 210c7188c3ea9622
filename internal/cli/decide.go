package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/decide"
)

func newDecide(s Streams) *cobra.Command {
	var cfgPath, snapPath, stepsPath, pool, output string
	cmd := &cobra.Command{
		Use:   "decide --config pool.yaml (--snapshot snapshot.json | --steps FILE|DIR)",
		Short: "Evaluate one pool's policy and controller step on a snapshot (what-if, no side effects)",
		Long: `Evaluate one pool's scaling policy on a snapshot and print the decision:
the new desired node count, the reason in words, the policy's own figures and
the new policy state. Nothing is started, stopped or changed.

The snapshot (JSON) holds the time, the current desired count, the pool's nodes
with what runs on them, the pending instances, and optionally the "state" of a
previous result, so decisions can be chained. When it also holds a "controller"
view (machines and their states, the provision call in flight and its outcome,
the last tick), decide prints the actions one controller step takes after the
policy, with the reason for each, computed by the live pool's reconciler.

--steps FILE (a JSON array of snapshots) or --steps DIR (one snapshot per
*.json file, in name order) replays a sequence: each step starts from what the
previous one left (policy state, desired, machines, the provision in flight)
and states only what changed. A step's "expect" is checked: a mismatch exits 1.
See docs/decide.md for the format. Use --snapshot - to read standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return badInput(fmt.Errorf("-o: want table or json, got %q", output))
			}
			if (snapPath == "") == (stepsPath == "") {
				return badInput(errors.New("give exactly one of --snapshot and --steps"))
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return badInput(err)
			}
			p, err := pickPool(cfg, pool, cfgPath)
			if err != nil {
				return badInput(err)
			}
			lc, _, _, err := p.LifecycleConfig()
			if err != nil {
				return badInput(err)
			}
			in := decide.Input{Pool: p.Name, Policy: p.PolicyConfig(), Reconcile: p.ReconcileConfig(), Interval: p.ReconcileEvery(), Lifecycle: lc,
				Routes: config.Routes(cfg.Pools), Strategy: cfg.Strategy}
			if stepsPath != "" {
				return runSteps(s, in, cfgPath, stepsPath, output)
			}
			data, err := readInput(s.In, snapPath)
			if err != nil {
				return badInput(err)
			}
			snap, err := decide.Parse(data)
			if err != nil {
				return badInput(fmt.Errorf("%s: %w", snapPath, err))
			}
			res, err := safeDecide(in, snap)
			if err != nil {
				return decideError(fmt.Errorf("%s: pool %q: %w", cfgPath, p.Name, err))
			}
			if output == "json" {
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return printDecision(s.Out, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "tide configuration file (YAML) with the pool")
	f.StringVar(&snapPath, "snapshot", "", "snapshot file (JSON), or - for standard input")
	f.StringVar(&stepsPath, "steps", "", "a JSON array of snapshots, or a directory of snapshot files, replayed in order")
	f.StringVar(&pool, "pool", "", "pool to evaluate (default: the only pool in the config)")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// safeDecide is decide.Decide with a guard: whatever the input, a person
// sees one line naming the bug, never a stack trace.
func safeDecide(in decide.Input, s decide.Snapshot) (res decide.Result, err error) {
	defer recoverBug(&err)
	return decide.Decide(in, s)
}

// safeSteps is decide.RunSteps with the same guard.
func safeSteps(in decide.Input, steps []decide.Step) (res []decide.StepResult, err error) {
	defer recoverBug(&err)
	return decide.RunSteps(in, steps)
}

// bugError is a panic turned into an error: not the input's fault (exit 1).
type bugError struct{ v any }

func (e bugError) Error() string {
	return fmt.Sprintf("internal error while deciding (a bug in tide; please report it with the snapshot): %v", e.v)
}

func recoverBug(err *error) {
	if r := recover(); r != nil {
		*err = bugError{r}
	}
}

// decideError is an input error (exit 2) unless err is a bug (exit 1).
func decideError(err error) error {
	var b bugError
	if errors.As(err, &b) {
		return b
	}
	return badInput(err)
}

// runSteps replays a steps file or directory and prints every decision.
func runSteps(s Streams, in decide.Input, cfgPath, path, output string) error {
	steps, err := readSteps(path)
	if err != nil {
		return badInput(err)
	}
	res, err := safeSteps(in, steps)
	if err != nil {
		return decideError(fmt.Errorf("%s: pool %q: %w", cfgPath, in.Pool, err))
	}
	if output == "json" {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		for i, r := range res {
			if i > 0 {
				fmt.Fprintln(s.Out)
			}
			fmt.Fprintf(s.Out, "== %s\n", r.Name)
			if r.Comment != "" {
				fmt.Fprintf(s.Out, "%s\n", r.Comment)
			}
			if err := printDecision(s.Out, r.Result); err != nil {
				return err
			}
		}
	}
	var bad []string
	for _, r := range res {
		for _, m := range r.Mismatches {
			bad = append(bad, r.Name+": expect: "+m)
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

// readSteps reads a steps file, or every *.json file of a directory in name order.
func readSteps(path string) ([]decide.Step, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--steps: %w", err)
	}
	if !fi.IsDir() {
		data, err := readInput(nil, path)
		if err != nil {
			return nil, err
		}
		return decide.SplitSteps(path, data)
	}
	names, err := filepath.Glob(filepath.Join(path, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("--steps: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--steps: %s holds no *.json snapshot", path)
	}
	slices.Sort(names)
	steps := make([]decide.Step, 0, len(names))
	for _, name := range names {
		data, err := readInput(nil, name)
		if err != nil {
			return nil, err
		}
		steps = append(steps, decide.Step{Name: name, Data: data})
	}
	return steps, nil
}

func pickPool(cfg *config.File, name, path string) (*config.Pool, error) {
	if name != "" {
		p, ok := cfg.Pool(name)
		if !ok {
			return nil, fmt.Errorf("--pool: %s has no pool %q", path, name)
		}
		return p, nil
	}
	if len(cfg.Pools) > 1 {
		names := make([]string, len(cfg.Pools))
		for i, p := range cfg.Pools {
			names[i] = p.Name
		}
		return nil, fmt.Errorf("--pool: %s has %d pools (%s); say which", path, len(names), strings.Join(names, ", "))
	}
	return &cfg.Pools[0], nil
}

// readInput reads a file, or standard input for "-", refusing anything over 64 MiB.
func readInput(stdin io.Reader, path string) ([]byte, error) {
	const limit = 64 << 20
	var r io.Reader
	if path == "-" {
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading snapshot: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading snapshot: %w", err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("reading snapshot %s: larger than 64 MiB", path)
	}
	return data, nil
}

func printDecision(w io.Writer, r decide.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	change := "unchanged"
	if r.Changed {
		change = "changed"
	}
	fmt.Fprintf(tw, "pool\t%s\n", r.Pool)
	fmt.Fprintf(tw, "policy\t%s\n", r.Policy)
	fmt.Fprintf(tw, "time\t%s\n", r.Time.Format("2006-01-02T15:04:05Z07:00"))
	fmt.Fprintf(tw, "desired\t%d -> %d (%s)\n", r.Previous, r.Desired, change)
	fmt.Fprintf(tw, "reason\t%s: %s\n", r.Code, r.Reason)
	if f := r.TargetTracking; f != nil {
		fmt.Fprintf(tw, "M / N\t%d / %d (%s)\n", f.M, f.N, f.Method)
		fmt.Fprintf(tw, "CapacityProviderReservation\t%.1f (target %d)\n", f.Reservation, f.Target)
		fmt.Fprintf(tw, "low datapoints\t%d\n", f.LowDatapoints)
	}
	if f := r.Utilization; f != nil {
		fmt.Fprintf(tw, "utilization\t%.1f%%\n", f.Utilization)
		fmt.Fprintf(tw, "target size\t%d\n", f.Target)
		fmt.Fprintf(tw, "mark\t%s\n", list(f.Mark))
		fmt.Fprintf(tw, "unmark\t%s\n", list(f.Unmark))
		fmt.Fprintf(tw, "delete\t%s\n", list(f.Delete))
	}
	if f := r.Tide; f != nil {
		mix := make([]string, len(f.Mix))
		for i, m := range f.Mix {
			mix[i] = fmt.Sprintf("%d × %s", m.Count, m.Offering)
		}
		fmt.Fprintf(tw, "new nodes\t%s\n", list(mix))
		fmt.Fprintf(tw, "cost of new nodes\t$%.2f/h\n", f.Cost)
		if f.Finishing > 0 {
			fmt.Fprintf(tw, "counted on\t%d running instances finishing before a new node could join (prefer)\n", f.Finishing)
		}
		if f.FleetShaped {
			fmt.Fprintf(tw, "offerings\tthose of the cheapest fleet for all the pool's work (running and waiting)\n")
		}
		if buy := f.Purchase(); buy != "" {
			fmt.Fprintf(tw, "purchase\t%s\n", buy)
		}
		for _, l := range r.Launch {
			fb := ""
			if len(l.Fallback) > 0 {
				fb = " (fallback " + strings.Join(l.Fallback, ", ") + ")"
			}
			fmt.Fprintf(tw, "launch\t%d x %s%s\n", l.Count, l.Offering, fb)
		}
		fmt.Fprintf(tw, "idle nodes\t%s\n", list(f.Idle))
	}
	for _, g := range r.Gangs {
		what := "bought whole in this purchase"
		if !g.Bought {
			what = "waits whole: " + g.Why
		}
		fmt.Fprintf(tw, "gang %s\t%d x %s, priority %d: %s\n", g.Gang, g.Instances, g.Requests, g.Priority, what)
	}
	state, err := json.Marshal(r.State)
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	for _, rt := range r.Routing {
		var cands []string
		for _, c := range rt.Candidates {
			cands = append(cands, fmt.Sprintf("%s $%.2f/h weight %d", c.Pool, c.Cost, c.Weight))
		}
		fmt.Fprintf(tw, "routing %d x %s\tcould serve: %s\n", rt.Count, rt.Requests, list(cands))
		fmt.Fprintf(tw, "\t%s\n", rt.Why)
		if len(rt.Split) > 0 {
			var parts []string
			for _, p := range slices.Sorted(maps.Keys(rt.Split)) {
				parts = append(parts, fmt.Sprintf("%s %d", p, rt.Split[p]))
			}
			fmt.Fprintf(tw, "\tstrategy split: %s\n", strings.Join(parts, ", "))
		}
	}
	if c := r.Controller; c != nil {
		tick := "no tick (next " + c.NextTick.UTC().Format(time.RFC3339) + ")"
		if c.Ticked {
			tick = "tick (next " + c.NextTick.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(tw, "controller\t%s -> %s, %s\n", c.Before, c.After, tick)
		fmt.Fprintf(tw, "events\t%s\n", list(c.Events))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "actions:")
		aw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if len(c.Actions) == 0 {
			fmt.Fprintln(aw, "  -\tnothing to do")
		}
		for _, a := range c.Actions {
			what := a.Short()
			if len(a.Offerings) > 0 {
				offs := make([]string, len(a.Offerings))
				for i, o := range a.Offerings {
					offs[i] = fmt.Sprintf("%d × %s", o.Count, o.Offering)
				}
				what += " (" + strings.Join(offs, ", ") + ")"
			}
			fmt.Fprintf(aw, "  %s\t%s\n", what, a.Reason)
		}
		return aw.Flush()
	}
	return tw.Flush()
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
