package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
)

// standingSeeds are the seeds the scaling-quality goals are judged on:
// 1..TIDE_SIM_SEEDS (3 when unset), the goals holding on the means over
// them.
func standingSeeds(t *testing.T) []uint64 {
	k := 3
	if v := os.Getenv("TIDE_SIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			t.Fatalf("TIDE_SIM_SEEDS=%q: want a count of seeds, 1 to 100", v)
		}
		k = n
	}
	seeds := make([]uint64, k)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// standingTolerance is the relative difference under which two costs are
// the same (sums of the same billed seconds in another order).
const standingTolerance = 1e-9

// standingCostSlack is how much dearer than the cheapest policy, whatever
// its waits, tide may be on a shipped config: it buys shorter waits with
// spare nodes, but never at more than this.
const standingCostSlack = 0.01

// standingP50Traces are the benchmark traces whose median wait must stay
// within a boot.
var standingP50Traces = []string{"philly_jobs.csv", "google2011_jobs.csv", "azure_llm2023_conv_rate_1s.csv"}

// TestTideStanding replays every shipped config (examples/simulate, the
// whole trace) under every policy on the standing seeds (1, 2 and 3;
// TIDE_SIM_SEEDS sets how many) and holds the tide policy to the
// scaling-quality goals (docs/benchmarks.md, "Scaling quality VI"), on the
// means over the seeds, as one seed's verdict is noise: no other policy
// dominates tide (cheaper by more than the seed spread at an equal or
// shorter p95 wait, see Dominates); tide's p99 wait is within one boot
// (the config's median) of every other policy's; tide costs at most 1 %
// more than the cheapest policy, whatever that one's waits; on the three
// benchmark traces tide's p50 wait is within a boot; and no run disrupts
// an instance (Run fails on that). It logs every policy's mean cost, its
// spread and mean waits. About 40 s without the race detector, many
// minutes with it: it runs with TIDE_SIM_STANDING=1, which scripts/test
// sets for a run of its own without -race.
func TestTideStanding(t *testing.T) {
	if os.Getenv("TIDE_SIM_STANDING") == "" {
		t.Skip("set TIDE_SIM_STANDING=1 to hold tide to its goals on every shipped config (about 40 s without -race)")
	}
	dir := tracesDir(t)
	seeds := standingSeeds(t)
	traces := make([]string, 0, len(ShippedConfigs))
	for tr := range ShippedConfigs {
		traces = append(traces, tr)
	}
	slices.Sort(traces)
	for _, tr := range traces {
		cfgFile := ShippedConfigs[tr]
		t.Run(strings.TrimSuffix(cfgFile, ".yaml"), func(t *testing.T) {
			cfg, err := LoadConfig(filepath.Join(examplesDir(), cfgFile))
			if err != nil {
				t.Fatal(err)
			}
			w, err := ReadWorkload(filepath.Join(dir, tr), cfg, false)
			if err != nil {
				t.Fatal(err)
			}
			var runs []*PolicyRuns
			for _, n := range policy.Names {
				if Applicable(cfg, w, n) == "" {
					runs = append(runs, &PolicyRuns{Policy: n})
				}
			}
			names := make([]string, len(runs))
			for i, r := range runs {
				names[i] = r.Policy
			}
			boot := cfg.Cloud.Boot.Median
			if cfg.Cloud.Boot.IsZero() {
				boot = DefaultBoot.Median
			}
			for _, seed := range seeds {
				results, errs := RunAll(context.Background(), cfg, w, names, Options{Seed: seed}, 0, nil)
				for i, err := range errs {
					if err != nil {
						t.Fatalf("seed %d, %s: %v", seed, names[i], err)
					}
					r, pr := results[i], runs[i]
					pr.Cost, pr.P50 = append(pr.Cost, r.Cost), append(pr.P50, r.WaitP50)
					pr.P95, pr.P99 = append(pr.P95, r.WaitP95), append(pr.P99, r.WaitP99)
					pr.Disrupted += r.Disrupted
				}
			}
			for _, r := range runs {
				t.Logf("%-18s $%.2f ± %.2f %% (%d seeds), p50 %.1f s, p95 %.1f s, p99 %.1f s", r.Policy, r.MeanCost(),
					100*r.Spread(), len(r.Cost), mean(r.P50), r.MeanP95(), mean(r.P99))
			}
			for _, p := range standingProblems(runs, boot, slices.Contains(standingP50Traces, tr)) {
				t.Error(p)
			}
		})
	}
}

// standingProblems returns what breaks the goals in one config's runs, on
// the means over their seeds (see TestTideStanding); checkP50 adds the
// median wait's.
func standingProblems(runs []*PolicyRuns, boot time.Duration, checkP50 bool) []string {
	var tide *PolicyRuns
	cheapest := runs[0]
	for _, r := range runs {
		if r.Policy == policy.Tide {
			tide = r
		}
		if r.MeanCost() < cheapest.MeanCost() {
			cheapest = r
		}
	}
	if tide == nil {
		return []string{"no tide run"}
	}
	var out []string
	if tide.Disrupted != 0 {
		out = append(out, fmt.Sprintf("tide disrupted %d instances", tide.Disrupted))
	}
	bootS := boot.Seconds()
	tc := tide.MeanCost()
	for _, r := range runs {
		if r == tide {
			continue
		}
		if margin, spread, ok := Dominates(r, tide); ok {
			out = append(out, fmt.Sprintf("%s dominates tide: $%.2f against $%.2f (%.3f %% cheaper, seed spread %.3f %%) at a mean p95 wait of %gs against %gs",
				r.Policy, r.MeanCost(), tc, 100*margin, 100*spread, r.MeanP95(), tide.MeanP95()))
		}
		if tp99, rp99 := mean(tide.P99), mean(r.P99); tp99 > rp99+bootS {
			out = append(out, fmt.Sprintf("tide's mean p99 wait %gs is more than a boot (%gs) above %s's %gs", tp99, bootS, r.Policy, rp99))
		}
	}
	if tc > cheapest.MeanCost()*(1+standingCostSlack) {
		out = append(out, fmt.Sprintf("tide costs $%.2f, %.2f %% more than %s's $%.2f (at most %g %%)",
			tc, 100*(tc/cheapest.MeanCost()-1), cheapest.Policy, cheapest.MeanCost(), 100*standingCostSlack))
	}
	if p50 := mean(tide.P50); checkP50 && p50 > bootS {
		out = append(out, fmt.Sprintf("tide's mean p50 wait %gs is above a boot (%gs)", p50, bootS))
	}
	return out
}

// TestStandingProblems: the goals' check itself, on made-up results.
func TestStandingProblems(t *testing.T) {
	// res is a policy's runs on three seeds: cost c on each, or the costs cs.
	res := func(p string, c, p50, p95, p99 float64, cs ...float64) *PolicyRuns {
		if cs == nil {
			cs = []float64{c, c, c}
		}
		n := len(cs)
		rep := func(x float64) []float64 { return slices.Repeat([]float64{x}, n) }
		return &PolicyRuns{Policy: p, Cost: cs, P50: rep(p50), P95: rep(p95), P99: rep(p99)}
	}
	tests := []struct {
		name string
		runs []*PolicyRuns
		p50  bool
		want []string // substrings, one per problem, in order
	}{
		{"tide cheapest and fastest", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("karpenter", 101, 0, 95, 100)}, true, nil},
		{"cheaper at a worse p95 is a trade-off", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("karpenter", 99.5, 0, 95, 100)}, false, nil},
		{"faster at a higher cost is a trade-off", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("skyward", 150, 0, 10, 20)}, false, nil},
		{"an exact tie dominates nothing", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("karpenter", 100, 0, 90, 100)}, false, nil},
		{"as cheap at a better p95 is not cheaper", []*PolicyRuns{res("karpenter", 100, 0, 80, 100), res("tide", 100, 0, 90, 100)}, false, nil},
		{"cheaper at the same p95, no spread", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("karpenter", 99.5, 0, 90, 100)}, false,
			[]string{"karpenter dominates tide"}},
		{"cheaper on the mean by less than the seed spread is noise", []*PolicyRuns{res("tide", 0, 0, 90, 100, 99, 100, 101),
			res("karpenter", 99.5, 0, 90, 100)}, false, nil},
		{"cheaper on the mean by more than the seed spread", []*PolicyRuns{res("tide", 0, 0, 90, 100, 99.9, 100, 100.1),
			res("karpenter", 99.5, 0, 85, 100)}, false, []string{"karpenter dominates tide"}},
		{"one seed cheaper, the mean not", []*PolicyRuns{res("tide", 100, 0, 90, 100), res("karpenter", 0, 0, 90, 100, 98, 102, 101)}, false, nil},
		{"p99 more than a boot worse", []*PolicyRuns{res("tide", 100, 0, 90, 200), res("utilization", 120, 0, 95, 100)}, false,
			[]string{"more than a boot"}},
		{"more than 1 % dearer than a cheaper, slower policy", []*PolicyRuns{res("tide", 102, 0, 90, 100), res("karpenter", 100, 0, 95, 100)}, false,
			[]string{"2.00 % more than karpenter"}},
		{"p50 above a boot on a benchmark trace", []*PolicyRuns{res("tide", 100, 91, 95, 100)}, true, []string{"p50 wait 91s"}},
		{"p50 not checked elsewhere", []*PolicyRuns{res("tide", 100, 91, 95, 100)}, false, nil},
		{"disrupted work", []*PolicyRuns{{Policy: "tide", Cost: []float64{1}, Disrupted: 1}}, false, []string{"disrupted 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := standingProblems(tt.runs, 90*time.Second, tt.p50)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %q does not say %q", got[i], tt.want[i])
				}
			}
		})
	}
}

// The fixed sample of generated cases TestTideStandingCases runs: the
// first standingCaseCount cases of generator seed standingCaseSeed, on
// the standing seeds.
const (
	standingCaseSeed  = 7
	standingCaseCount = 20
)

// standingCaseLimits are what the sample holds the tide policy to, as
// measured when it was set (docs/benchmarks.md, "Scaling quality VII"):
// at most standingCaseDominated of its cases dominated, none by more
// than standingCaseMargin of tide's cost (measured: 1 of 20, skyward
// 9.26 % cheaper on an azure-code window at the same p95). Issue 37's goal
// (not dominated on 95 % of cases, never by more than 2 %) is not met
// yet; the sample holds where tide stands, so that a change that loses
// ground fails, and the limits tighten as tide gains it.
const (
	standingCaseDominated = 1
	standingCaseMargin    = 0.10
)

// TestTideStandingCases runs every applicable policy on a fixed sample of
// generated cases (a window of a shipped trace on a drawn pool: see
// GenerateCase) on seeds 1, 2 and 3 and holds tide to standingCaseLimits;
// every run must also finish without breaking an invariant. It runs with
// TestTideStanding (TIDE_SIM_STANDING=1, without the race detector).
func TestTideStandingCases(t *testing.T) {
	if os.Getenv("TIDE_SIM_STANDING") == "" {
		t.Skip("set TIDE_SIM_STANDING=1 to run every policy on a sample of generated cases (under a minute without -race)")
	}
	bases, err := LoadCaseBases(tracesDir(t), examplesDir())
	if err != nil {
		t.Fatal(err)
	}
	cases, ws, bounds, err := Generate(standingCaseSeed, standingCaseCount, bases)
	if err != nil {
		t.Fatal(err)
	}
	results := RunCases(context.Background(), cases, ws, bounds, policy.Names, standingSeeds(t), 0, nil)
	dominated := 0
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("case %s: %v", r.Case.Describe(), r.Err)
		}
		v := r.Judge()
		t.Logf("%s: tide %+.2f %% against the cheapest other (%s), %.3f × the bound, p95 %.0f s (boot %.0f s)",
			r.Case.Describe(), 100*v.VsBestOther, v.BestOther, v.VsBound, v.P95, v.Boot)
		if v.DominatedBy == "" {
			continue
		}
		dominated++
		t.Logf("  %s dominates tide: %.2f %% cheaper (seed spread %.2f %%) at an equal or shorter p95", v.DominatedBy, 100*v.Margin, 100*v.Spread)
		if v.Margin > standingCaseMargin {
			t.Errorf("case %s: %s dominates tide by %.2f %%, more than %.0f %%", r.Case.Describe(), v.DominatedBy, 100*v.Margin, 100*standingCaseMargin)
		}
	}
	if dominated > standingCaseDominated {
		t.Errorf("tide dominated on %d of %d cases, more than %d", dominated, len(results), standingCaseDominated)
	}
}
