package fleet

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/sdk/provider"
)

// TestStateNamesMatchProvider: a driver converts with provider.State(s.String()),
// so the names and their order must be the provider's.
func TestStateNamesMatchProvider(t *testing.T) {
	if len(States) != len(provider.States) {
		t.Fatalf("%d states, provider has %d", len(States), len(provider.States))
	}
	for i, s := range States {
		if got, want := s.String(), string(provider.States[i]); got != want {
			t.Errorf("state %d: %q, provider %q", i, got, want)
		}
		back, err := ParseState(string(provider.States[i]))
		if err != nil || back != s {
			t.Errorf("ParseState(%q) = %v, %v", provider.States[i], back, err)
		}
	}
	for _, bad := range []string{"", "booting", "Idle"} {
		if _, err := ParseState(bad); err == nil {
			t.Errorf("ParseState(%q): no error", bad)
		}
	}
}

// TestCheckBinding holds the machine model of BigFleet §5 (and
// provider.Machine.Check): host = nil ⇒ cluster = 0, and the stable states.
func TestCheckBinding(t *testing.T) {
	tests := []struct {
		st      State
		host    bool
		cluster ClusterID
		err     string
	}{
		{Speculative, false, 0, ""},
		{Speculative, true, 0, "host:"},
		{Speculative, false, 3, "without a host"},
		{Creating, false, 0, ""},
		{Idle, true, 0, ""},
		{Idle, false, 0, "host:"},
		{Idle, true, 3, "cluster:"},
		{Configuring, true, 3, ""},
		{Configured, true, 3, ""},
		{Configured, true, 0, "needs a host and a cluster"},
		{Configured, false, 3, "without a host"},
		{Draining, true, 3, ""},
		{Deleting, true, 3, ""},
		{Deleting, false, 0, ""},
		{Failed, false, 0, ""},
		{Failed, true, 3, ""},
		{Failed, false, 3, "without a host"},
		{State(0), false, 0, "unknown state"},
		{State(9), false, 0, "unknown state"},
	}
	for _, tt := range tests {
		err := checkBinding(tt.st, tt.host, tt.cluster)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s host=%t cluster=%s: %v, want %q", tt.st, tt.host, tt.cluster, err, tt.err)
		}
	}
}

func offering(typ string, kind capacity.Kind, price float64) capacity.Offering {
	return capacity.Offering{Type: typ, Kind: kind, Resources: capacity.CPU(1000), PricePerHour: price}
}

func TestNewCatalog(t *testing.T) {
	good := OfferingSpec{Provider: "aws", Profile: "gpu", Offering: offering("g8", capacity.Spot, 9)}
	tests := []struct {
		name  string
		specs []OfferingSpec
		err   string
	}{
		{"ok", []OfferingSpec{good}, ""},
		{"empty", nil, "offerings: at least one"},
		{"no provider", []OfferingSpec{{Profile: "gpu", Offering: good.Offering}}, "offerings[0].provider: must be set"},
		{"no profile", []OfferingSpec{{Provider: "aws", Offering: good.Offering}}, "offerings[0].profile: must be set"},
		{"bad offering", []OfferingSpec{{Provider: "aws", Profile: "gpu", Offering: capacity.Offering{Type: "g8"}}},
			"offerings[0].offering: resources"},
		{"duplicate", []OfferingSpec{good, good}, `offerings[1]: provider "aws" already sells "g8/spot"`},
		{"same name, other provider", []OfferingSpec{good, {Provider: "gcp", Profile: "gpu", Offering: good.Offering}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCatalog(tt.specs)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestCatalogLookups(t *testing.T) {
	spot := offering("g8", capacity.Spot, 9.1)
	spot.InterruptionProbability, spot.InterruptionPenalty = 0.05, 40
	cat, err := NewCatalog([]OfferingSpec{
		{Provider: "aws", Profile: "gpu", Offering: offering("g8", "", 24.5)},
		{Provider: "aws", Profile: "gpu", Offering: spot},
		{Provider: "metal", Profile: "cpu", Offering: offering("c4", capacity.BareMetal, 0)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cat.Profiles() != 2 || cat.Offerings() != 3 {
		t.Fatalf("profiles %d, offerings %d", cat.Profiles(), cat.Offerings())
	}
	o, ok := cat.Offering("aws", "g8/on-demand") // an empty kind means on-demand
	if !ok || o != 0 || cat.OfferingName(o) != "g8/on-demand" {
		t.Errorf("g8/on-demand = %d, %t", o, ok)
	}
	o, _ = cat.Offering("aws", "g8/spot")
	if got := cat.EffectiveCost(o); math.Abs(got-11.1) > 1e-9 {
		t.Errorf("effective cost %v, want 11.1 (BigFleet §4)", got)
	}
	if p, _ := cat.Profile("cpu"); cat.ProfileName(p) != "cpu" || cat.OfferingProfile(2) != p {
		t.Errorf("cpu profile = %d", p)
	}
	if pr, ok := cat.Provider("metal"); !ok || cat.ProviderName(pr) != "metal" {
		t.Errorf("provider metal = %d, %t", pr, ok)
	}
	if _, ok := cat.Offering("gcp", "g8/spot"); ok {
		t.Error("gcp does not sell g8/spot")
	}
	if _, ok := cat.OfferingSpec(9); ok {
		t.Error("offering 9 exists")
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if c.Weights != DefaultWeights || c.EscalateAfter != 5 || c.MaxShortfalls != 100 ||
		c.ReleaseAfter[capacity.BareMetal] != Never || c.ReleaseAfter[capacity.Spot] != time.Minute ||
		c.ReleaseAfter[capacity.OnDemand] != 10*time.Minute || c.ReclaimGrace != 10*time.Minute {
		t.Errorf("defaults: %+v", c)
	}
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"negative weight", Config{Weights: Weights{Priority: -1}}, "weights.priority: must be a finite non-negative"},
		{"grace order", Config{Grace: []GraceStep{{100, time.Second}, {500, time.Second}}}, "grace[1].min_gap"},
		{"grace zero", Config{Grace: []GraceStep{{100, 0}}}, "grace[0].grace: must be positive"},
		{"release kind", Config{ReleaseAfter: map[capacity.Kind]time.Duration{"cheap": time.Second}},
			`release_after: unknown capacity kind "cheap"`},
		{"release negative", Config{ReleaseAfter: map[capacity.Kind]time.Duration{capacity.Spot: -time.Second}},
			"release_after[spot]"},
		{"escalate", Config{EscalateAfter: -1}, "escalate_after"},
		{"shortfalls", Config{MaxShortfalls: -1}, "max_shortfalls"},
		{"reclaim grace", Config{ReclaimGrace: -time.Second}, "reclaim_grace"},
		{"min penalty", Config{MinPenalty: math.NaN()}, "min_penalty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// TestGraceFor is the seed's table: gap > 900K → 10s, > 500K → 30s,
// > 100K → 2m, else 10m.
func TestGraceFor(t *testing.T) {
	c := DefaultConfig()
	for _, tt := range []struct {
		gap  int64
		want time.Duration
	}{
		{1_000_000, 10 * time.Second}, {900_001, 10 * time.Second}, {900_000, 30 * time.Second},
		{500_001, 30 * time.Second}, {500_000, 2 * time.Minute}, {100_001, 2 * time.Minute},
		{100_000, 10 * time.Minute}, {1, 10 * time.Minute},
	} {
		if got := c.GraceFor(tt.gap); got != tt.want {
			t.Errorf("GraceFor(%d) = %s, want %s", tt.gap, got, tt.want)
		}
	}
}

func TestNeedsValidate(t *testing.T) {
	cat := testCatalog(t, 2)
	tests := []struct {
		name string
		msg  ClusterCapacityNeeds
		err  string
	}{
		{"ok", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Profile: 0, Count: 3, Priority: 10}, {Profile: 1}}}, ""},
		{"empty", ClusterCapacityNeeds{Cluster: 1}, ""},
		{"cluster 0", ClusterCapacityNeeds{}, "cluster: must not be 0"},
		{"profile", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Profile: 5}}}, "needs[0].profile: unknown profile 5"},
		{"duplicate", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Profile: 1}, {Profile: 1}}},
			"needs[1].profile: profile p1 already needed by needs[0]"},
		{"count", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Count: -1}}}, "needs[0].count"},
		{"priority", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{Priority: -1}}}, "needs[0].priority"},
		{"penalty", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{InterruptionPenalty: math.Inf(1)}}},
			"needs[0].interruption_penalty"},
		{"drain", ClusterCapacityNeeds{Cluster: 1, Needs: []Need{{DrainTime: -time.Second}}}, "needs[0].drain_time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.msg.Validate(cat)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// TestSummarySize: BigFleet §9 budgets about 240 bytes per shard summary.
func TestSummarySize(t *testing.T) {
	if n := unsafe.Sizeof(ShardSummary{}); n > 240 {
		t.Fatalf("ShardSummary is %d bytes, budget 240", n)
	}
}

func TestAddErrors(t *testing.T) {
	cat := testCatalog(t, 1)
	s, err := NewShard(cat, Config{}, base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec MachineSpec
		n    int
		err  string
	}{
		{MachineSpec{Offering: 99}, 1, "offering: unknown offering 99"},
		{MachineSpec{ReclamationPenalty: -1}, 1, "reclamation_penalty"},
		{MachineSpec{State: Idle}, 1, "host:"},
		{MachineSpec{State: Configured, Host: true}, 1, "cluster:"},
		{MachineSpec{Cluster: 4}, 1, "without a host"},
		{MachineSpec{}, -1, "n: -1 machines"},
	}
	for _, tt := range tests {
		if _, err := s.Add(base, tt.spec, tt.n); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: err = %v, want %q", tt.spec, err, tt.err)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("failed Adds left %d slots", s.Len())
	}
	if _, err := NewShard(nil, Config{}, base); err == nil {
		t.Error("NewShard without a catalog: no error")
	}
	if _, err := NewShard(cat, Config{EscalateAfter: -2}, base); err == nil || !strings.Contains(err.Error(), "config: escalate_after") {
		t.Errorf("NewShard with a bad config: %v", err)
	}
}

// TestExportImport moves Idle and Speculative machines between shards: the
// slots are freed and reused, and nothing else moves.
func TestExportImport(t *testing.T) {
	cat := testCatalog(t, 2)
	a, _ := NewShard(cat, Config{}, base)
	b, _ := NewShard(cat, Config{}, base)
	if _, err := a.Add(base, MachineSpec{Offering: 0, ReclamationPenalty: 9, State: Idle, Host: true}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(base, MachineSpec{Offering: 3}, 2); err != nil { // p0 spot, speculative
		t.Fatal(err)
	}
	if _, err := a.Add(base, MachineSpec{Offering: 4, State: Idle, Host: true}, 1); err != nil { // p1
		t.Fatal(err)
	}
	acts, err := a.Export(0, Idle, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 2 || acts[0].Exported != (Exported{Offering: 0, ReclamationPenalty: 9, State: Idle}) {
		t.Fatalf("exported %v", acts)
	}
	spec, err := a.Export(0, Speculative, 1)
	if err != nil || len(spec) != 1 || spec[0].Exported.State != Speculative {
		t.Fatalf("exported %v, %v", spec, err)
	}
	if _, err := a.Export(0, Configured, 1); err == nil {
		t.Error("exported a configured machine")
	}
	if _, err := a.Export(7, Idle, 1); err == nil {
		t.Error("exported an unknown profile")
	}
	var ms []Exported
	for _, x := range append(acts, spec...) {
		ms = append(ms, x.Exported)
	}
	ids, err := b.Import(base, ms)
	if err != nil || !slices.Equal(ids, []MachineID{0, 1, 2}) {
		t.Fatalf("imported %v, %v", ids, err)
	}
	if sum := a.Summary(0); sum.Machines != 2 || sum.Idle != 1 || sum.Speculative != 1 {
		t.Errorf("a after export: %+v", sum)
	}
	if sum := b.Summary(1, 0); sum.Machines != 3 || sum.Idle != 2 || sum.Spare[0].Speculative != 1 {
		t.Errorf("b after import: %+v", sum)
	}
	// a's freed slots are reused by the next import.
	back, err := a.Import(base, ms[:1])
	if err != nil || back[0] >= 5 || a.Len() != 5 {
		t.Fatalf("reimport: %v, %v, len %d", back, err, a.Len())
	}
	if _, err := a.Import(base, []Exported{{Offering: 0, State: Configured}}); err == nil {
		t.Error("imported a configured machine")
	}
	for _, s := range []*Shard{a, b} {
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDecideAllocs pins the steady-state cycle: with nothing to do, Decide
// and Observe allocate nothing.
func TestDecideAllocs(t *testing.T) {
	f := buildFleet(t, fleetScale{machines: 20_000, clusters: 100, profiles: 4, needsPer: 2, idle: 2_000,
		speculative: 2_000})
	f.cycle(t, f.changes(10))
	for range 3 {
		f.cycle(t, nil)
	}
	n := testing.AllocsPerRun(20, func() {
		f.now = f.now.Add(time.Millisecond)
		if err := f.s.Observe(f.now); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Decide(f.now); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per idle cycle", n)
	}
}
