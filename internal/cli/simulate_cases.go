package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/sim"
)

// casesFlags are simulate's policy-benchmark flags (--cases).
type casesFlags struct {
	cases, seeds          int
	traces, configs, rows string
	prefer                string // the tide policy's prefer for every case ("": each config's)
}

// runCases is `tide simulate --cases N`: draw the cases of the generator
// seed, run every policy on each over the simulation seeds 1..K, write the
// rows and print the summary.
func runCases(cmd *cobra.Command, s Streams, cb casesFlags, seed uint64, pol string) error {
	if cb.seeds < 1 {
		return badInput(fmt.Errorf("--seeds: want at least 1, got %d", cb.seeds))
	}
	start := time.Now()
	bases, err := sim.LoadCaseBases(cb.traces, cb.configs)
	if err != nil {
		return badInput(err)
	}
	cases, ws, bounds, err := sim.Generate(seed, cb.cases, bases)
	if err != nil {
		return err
	}
	if cb.prefer != "" {
		for _, c := range cases {
			c.Config.Pool.Scaling.Prefer = cb.prefer
		}
	}
	seeds := make([]uint64, cb.seeds)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	names := policy.Names
	if pol != "" && pol != "all" {
		if !slices.Contains(policy.Names, pol) {
			return badInput(fmt.Errorf("--policy: unknown policy %q (want %s or all)", pol, strings.Join(policy.Names, ", ")))
		}
		names = []string{pol}
	}
	bar := newProgress(s.Err)
	results := sim.RunCases(cmd.Context(), cases, ws, bounds, names, seeds, 0, func(done, total int) {
		bar.show(float64(done)/float64(total), fmt.Sprintf("%d runs", total))
	})
	bar.clear()
	if err := cmd.Context().Err(); err != nil {
		return err
	}
	if cb.rows != "" {
		f, err := os.Create(cb.rows)
		if err != nil {
			return fmt.Errorf("--rows: %w", err)
		}
		if err := sim.WriteCasesCSV(f, results); err != nil {
			f.Close()
			return fmt.Errorf("--rows: writing %s: %w", cb.rows, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--rows: writing %s: %w", cb.rows, err)
		}
	}
	fmt.Fprintf(s.Out, "policy benchmark: %d cases of generator seed %d, simulation seeds 1..%d, %s\n",
		cb.cases, seed, cb.seeds, time.Since(start).Round(time.Second))
	sum := sim.Summarize(results)
	if err := sum.WriteSummary(s.Out); err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return fmt.Errorf("case %s: %w", r.Case.Describe(), r.Err)
		}
	}
	return nil
}
