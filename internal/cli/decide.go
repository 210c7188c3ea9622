package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/decide"
)

func newDecide(s Streams) *cobra.Command {
	var cfgPath, snapPath, pool, output string
	cmd := &cobra.Command{
		Use:   "decide --config pool.yaml --snapshot snapshot.json",
		Short: "Evaluate one pool's scaling policy on a snapshot (what-if, no side effects)",
		Long: `Evaluate one pool's scaling policy on a snapshot and print the decision:
the new desired node count, the reason in words, the policy's own figures and
the new policy state. Nothing is started, stopped or changed.

The snapshot (JSON) holds the time, the current desired count, the pool's nodes
with what runs on them, the pending instances, and optionally the "state" of a
previous result, so decisions can be chained. See README.md for the format.
Use --snapshot - to read it from standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return badInput(fmt.Errorf("-o: want table or json, got %q", output))
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return badInput(err)
			}
			p, err := pickPool(cfg, pool, cfgPath)
			if err != nil {
				return badInput(err)
			}
			data, err := readInput(s.In, snapPath)
			if err != nil {
				return badInput(err)
			}
			snap, err := decide.Parse(data)
			if err != nil {
				return badInput(fmt.Errorf("%s: %w", snapPath, err))
			}
			res, err := decide.Run(p.Name, p.PolicyConfig(), snap)
			if err != nil {
				return badInput(fmt.Errorf("%s: pool %q: %w", cfgPath, p.Name, err))
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
	f.StringVar(&pool, "pool", "", "pool to evaluate (default: the only pool in the config)")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("snapshot")
	return cmd
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
	state, err := json.Marshal(r.State)
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	return tw.Flush()
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
