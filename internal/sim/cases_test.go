package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// fakeBases are two made-up traces for the generator: a GPU job trace with
// CPU-only jobs too, and a CPU trace whose largest task needs 40 CPUs.
func fakeBases(t *testing.T) []*CaseBase {
	t.Helper()
	gpu := mustConfig(t, gpuPool)
	cpu := mustConfig(t, strings.ReplaceAll(strings.ReplaceAll(gpuPool, "gpus: 8, ", ""), "split_to_node: true", "sample: 1"))
	return []*CaseBase{
		{Trace: "gpu.csv", Config: gpu, Span: 48 * time.Hour, Largest: capacity.Resources{MilliCPU: 8000, GPUs: 16}, GPUJobs: true, CPUJobs: true},
		{Trace: "cpu.csv", Config: cpu, Span: 20 * time.Hour, Largest: capacity.Resources{MilliCPU: 40000, Memory: 100 << 30}, CPUJobs: true},
	}
}

// TestGenerateCaseIsPure: a case is a function of the seed, the index,
// the attempt and the bases; another seed or index draws another case.
func TestGenerateCaseIsPure(t *testing.T) {
	bases := fakeBases(t)
	for i := range 50 {
		a, b := GenerateCase(7, i, 0, bases), GenerateCase(7, i, 0, bases)
		if !reflect.DeepEqual(a.Config, b.Config) || a.Base != b.Base {
			t.Fatalf("case 7/%d drawn twice differs:\n%s\n%s", i, a.Describe(), b.Describe())
		}
	}
	same := 0
	for i := range 50 {
		if reflect.DeepEqual(GenerateCase(7, i, 0, bases).Config.Pool.Offerings, GenerateCase(8, i, 0, bases).Config.Pool.Offerings) {
			same++
		}
	}
	if same > 5 {
		t.Errorf("seeds 7 and 8 drew the same pool for %d of 50 indexes", same)
	}
}

// TestGenerateCaseRanges: every drawn case has 1 to 4 offerings of
// different sizes (a spot twin shares its on-demand offering's size), GPU
// nodes for a GPU trace and a node that fits every job of an unsplit
// trace, a boot median of 30 s to 5 min, and a window inside the trace;
// over many draws every kind of pool appears.
func TestGenerateCaseRanges(t *testing.T) {
	bases := fakeBases(t)
	seen := map[string]bool{}
	for i := range 400 {
		c := GenerateCase(3, i, 0, bases)
		offs := c.Config.Pool.Offerings
		if len(offs) < 1 || len(offs) > 4 {
			t.Fatalf("%s: %d offerings", c.Describe(), len(offs))
		}
		seen["offerings "+string(rune('0'+len(offs)))] = true
		sizes := map[string]capacity.Kind{}
		for _, o := range offs {
			if err := o.Validate(); err != nil {
				t.Fatalf("%s: %v", c.Describe(), err)
			}
			if k, ok := sizes[o.Resources.String()]; ok && k == o.Kind {
				t.Fatalf("%s: two %s offerings of size %s", c.Describe(), o.Kind, o.Resources)
			}
			sizes[o.Resources.String()] = o.Kind
			seen[string(o.Kind)] = true
			if o.Resources.GPUs > 0 {
				seen["gpu"] = true
			} else if c.Base.GPUJobs {
				seen["cpu offering in a gpu pool"] = true
			}
		}
		if err := c.Config.Validate(); err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		if _, err := c.Config.PolicyConfig(""); err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		fits := false
		for _, o := range offs {
			fits = fits || c.Base.Largest.Fits(o.Resources)
			if c.Base.GPUJobs && o.Resources.GPUs == 0 && !c.Base.CPUJobs {
				t.Fatalf("%s: a CPU offering for a trace of GPU jobs only", c.Describe())
			}
		}
		if !fits && !c.Config.Workload.SplitToNode {
			t.Fatalf("%s: no offering fits the largest request %s of an unsplit trace", c.Describe(), c.Base.Largest)
		}
		if b := c.Config.Cloud.Boot; b.Median < caseMinBoot || b.Median > caseMaxBoot || b.Min > b.Median || b.Max < b.Median {
			t.Fatalf("%s: boot %s", c.Describe(), b)
		}
		from, to := time.Duration(c.Config.Workload.From), time.Duration(c.Config.Workload.To)
		if to <= from || to > c.Base.Span || to-from < caseMinWindow || to-from > caseMaxWindow || c.Config.Workload.Sample != c.Base.Config.Workload.Sample {
			t.Fatalf("%s: window %s of a %s trace", c.Describe(), windowString(from, to), c.Base.Span)
		}
	}
	// A retry keeps the trace, halves the window and, from attempt 3 on,
	// the sample.
	for i := range 20 {
		c0, c4 := GenerateCase(3, i, 0, bases), GenerateCase(3, i, 4, bases)
		w0 := c0.Config.Workload.To - c0.Config.Workload.From
		w4 := c4.Config.Workload.To - c4.Config.Workload.From
		if c4.Base != c0.Base || w4 >= w0 || w4 > config.Duration(max(time.Duration(w0)/16, 2*caseMinRetryWindow)) || c4.Config.Workload.Sample != 0.25 {
			t.Fatalf("attempt 4 of %s: %s, sample %v", c0.Describe(), c4.Describe(), c4.Config.Workload.Sample)
		}
	}
	for _, k := range []string{"offerings 1", "offerings 4", "spot", "on-demand", "gpu", "cpu offering in a gpu pool"} {
		if !seen[k] {
			t.Errorf("400 draws never gave %s", k)
		}
	}
}

// TestJudge: the verdict on made-up runs, three seeds each.
func TestJudge(t *testing.T) {
	runs := func(p string, cost [3]float64, p95 float64) *PolicyRuns {
		return &PolicyRuns{Policy: p, Cost: cost[:], P95: []float64{p95, p95, p95}}
	}
	c := &Case{Seed: 1, Base: &CaseBase{Trace: "x.csv"}, Config: &Config{Cloud: CloudOptions{Boot: DefaultBoot}}}
	tests := []struct {
		name   string
		runs   []*PolicyRuns
		by     string
		margin float64
	}{
		{"cheaper beyond the spread at the same p95", []*PolicyRuns{runs(policy.Tide, [3]float64{100, 100, 100}, 90),
			runs(policy.Karpenter, [3]float64{98, 98, 98}, 90)}, policy.Karpenter, 0.02},
		{"cheaper within the spread", []*PolicyRuns{runs(policy.Tide, [3]float64{97, 100, 103}, 90),
			runs(policy.Karpenter, [3]float64{98, 98, 98}, 90)}, "", 0},
		{"cheaper at a worse p95", []*PolicyRuns{runs(policy.Tide, [3]float64{100, 100, 100}, 90),
			runs(policy.Karpenter, [3]float64{90, 90, 90}, 91)}, "", 0},
		{"faster at a higher cost", []*PolicyRuns{runs(policy.Tide, [3]float64{100, 100, 100}, 90),
			runs(policy.Skyward, [3]float64{150, 150, 150}, 0)}, "", 0},
		{"the worst of two", []*PolicyRuns{runs(policy.Tide, [3]float64{100, 100, 100}, 90),
			runs(policy.Karpenter, [3]float64{99, 99, 99}, 80), runs(policy.Skyward, [3]float64{97, 97, 97}, 90)}, policy.Skyward, 0.03},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := (&CaseResult{Case: c, Runs: tt.runs, Bound: trace.Bound{OfferingBound: trace.OfferingBound{Cost: 50}}}).Judge()
			if v.DominatedBy != tt.by || (tt.by != "" && (v.Margin < tt.margin-1e-9 || v.Margin > tt.margin+1e-9)) {
				t.Fatalf("dominated by %q by %.4f, want %q by %.4f", v.DominatedBy, v.Margin, tt.by, tt.margin)
			}
			if v.VsBound != 2 {
				t.Errorf("against the bound %.3f, want 2", v.VsBound)
			}
		})
	}
}

// TestSizeNodes: twice the smallest offering's peak, plus 4; when that
// offering cannot host every job, plus the peak of those that can.
func TestSizeNodes(t *testing.T) {
	ob := func(peak, unfit int) trace.OfferingBound { return trace.OfferingBound{PeakNodes: peak, Unfit: unfit} }
	tests := []struct {
		offs []trace.OfferingBound
		want int
	}{
		{[]trace.OfferingBound{ob(10, 0)}, 24},
		{[]trace.OfferingBound{ob(10, 0), ob(40, 0)}, 84},
		{[]trace.OfferingBound{ob(10, 0), ob(40, 3)}, 104},
		{[]trace.OfferingBound{ob(0, 0)}, 4},
	}
	for _, tt := range tests {
		if got := SizeNodes(trace.Bound{Offerings: tt.offs}); got != tt.want {
			t.Errorf("SizeNodes(%v) = %d, want %d", tt.offs, got, tt.want)
		}
	}
}
