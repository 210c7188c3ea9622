package fleet

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func summary(shard ShardID, spares ...ProfileSpare) ShardSummary {
	s := ShardSummary{Shard: shard}
	for _, sp := range spares {
		s.Spare[s.Profiles] = sp
		s.Profiles++
	}
	return s
}

func TestPlanShortfalls(t *testing.T) {
	none := int32(math.MaxInt32)
	short := func(shard ShardID, p ProfileID, prio, count, age int32) Escalation {
		return Escalation{Shard: shard, Shortfall: Shortfall{Profile: p, Priority: prio, Count: count, Age: age}}
	}
	tests := []struct {
		name       string
		cfg        CoordinatorConfig
		sums       []ShardSummary
		escs       []Escalation
		want       []string
		unanswered []string
	}{
		{
			name: "idle first, most idle donor first",
			sums: []ShardSummary{summary(0), summary(1, ProfileSpare{Profile: 0, Idle: 1, Speculative: 9, Floor: none}),
				summary(2, ProfileSpare{Profile: 0, Idle: 3, Floor: none})},
			escs: []Escalation{short(0, 0, 500, 5, 6)},
			want: []string{"reassign-idle s2→s0 p0 count=3 prio=500", "reassign-idle s1→s0 p0 count=1 prio=500",
				"reassign-quota s1→s0 p0 count=1 prio=500"},
		},
		{
			name: "never from the shard itself, nor another profile",
			sums: []ShardSummary{summary(0, ProfileSpare{Profile: 0, Idle: 5, Floor: none}),
				summary(1, ProfileSpare{Profile: 1, Idle: 5, Floor: none})},
			escs:       []Escalation{short(0, 0, 500, 2, 6)},
			unanswered: []string{"s0 p0 count=2: no spare capacity in other shards"},
		},
		{
			name: "highest priority served first, then oldest",
			sums: []ShardSummary{summary(0), summary(1), summary(2),
				summary(3, ProfileSpare{Profile: 0, Idle: 2, Floor: none})},
			escs: []Escalation{short(0, 0, 100, 2, 9), short(1, 0, 900, 1, 6), short(2, 0, 100, 2, 12)},
			want: []string{"reassign-idle s3→s1 p0 count=1 prio=900", "reassign-idle s3→s2 p0 count=1 prio=100"},
			unanswered: []string{"s2 p0 count=1: no spare capacity in other shards",
				"s0 p0 count=2: no spare capacity in other shards"},
		},
		{
			name:       "topology-constrained shortfalls stay in their shard",
			sums:       []ShardSummary{summary(0), summary(1, ProfileSpare{Profile: 0, Idle: 5, Floor: none})},
			escs:       []Escalation{{Shard: 0, Shortfall: Shortfall{Profile: 0, Priority: 9, Count: 1, Age: 6, Topology: true}}},
			unanswered: []string{"s0 p0 count=1: topology-constrained: stays inside its shard"},
		},
		{
			name:       "preemption is off by default",
			sums:       []ShardSummary{summary(0), summary(1, ProfileSpare{Profile: 0, Configured: 5, Floor: 0})},
			escs:       []Escalation{short(0, 0, 900_000, 1, 6)},
			unanswered: []string{"s0 p0 count=1: no spare capacity in other shards"},
		},
		{
			name: "preemption: wide gaps only, lowest floor first, bounded",
			cfg:  CoordinatorConfig{Preemption: true, MaxPreemptions: 3},
			sums: []ShardSummary{summary(0),
				summary(1, ProfileSpare{Profile: 0, Configured: 5, Floor: 300_000}),
				summary(2, ProfileSpare{Profile: 0, Configured: 2, Floor: 100}),
				summary(3, ProfileSpare{Profile: 0, Configured: 9, Floor: 600_000})},
			escs:       []Escalation{short(0, 0, 900_000, 4, 6)},
			want:       []string{"preempt s2→s0 p0 count=2 prio=900000", "preempt s1→s0 p0 count=1 prio=900000"},
			unanswered: []string{"s0 p0 count=1: no spare capacity in other shards"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanShortfalls(tt.cfg, tt.sums, tt.escs)
			if err != nil {
				t.Fatal(err)
			}
			var got, unanswered []string
			for _, d := range plan.Directives {
				got = append(got, d.String())
			}
			for _, u := range plan.Unanswered {
				unanswered = append(unanswered, fmt.Sprintf("%s p%d count=%d: %s", u.Shard, u.Shortfall.Profile,
					u.Shortfall.Count, u.Reason))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("directives:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if !slices.Equal(unanswered, tt.unanswered) {
				t.Errorf("unanswered:\n%s\nwant:\n%s", strings.Join(unanswered, "\n"), strings.Join(tt.unanswered, "\n"))
			}
		})
	}
}

func TestPlanShortfallsErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  CoordinatorConfig
		sums []ShardSummary
		escs []Escalation
		err  string
	}{
		{"duplicate summary", CoordinatorConfig{}, []ShardSummary{summary(1), summary(1)}, nil,
			"summaries[1].shard: s1 summarized twice"},
		{"unknown shard", CoordinatorConfig{}, []ShardSummary{summary(1)},
			[]Escalation{{Shard: 2, Shortfall: Shortfall{Count: 1}}}, "escalations[0].shard: no summary for s2"},
		{"count", CoordinatorConfig{}, []ShardSummary{summary(1)}, []Escalation{{Shard: 1}},
			"escalations[0].count: must be positive"},
		{"profiles", CoordinatorConfig{}, []ShardSummary{{Shard: 1, Profiles: SummaryProfiles + 1}}, nil,
			"summaries[0].profiles"},
		{"config", CoordinatorConfig{MinPreemptGap: -1}, nil, nil, "config: min_preempt_gap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := PlanShortfalls(tt.cfg, tt.sums, tt.escs); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// BenchmarkPlanShortfalls is the coordinator's cycle at BigFleet's scale:
// 200 shard summaries and 100 escalated shortfalls from each of 100 shards.
func BenchmarkPlanShortfalls(b *testing.B) {
	var sums []ShardSummary
	var escs []Escalation
	for sh := range ShardID(200) {
		sum := ShardSummary{Shard: sh, Profiles: SummaryProfiles}
		for i := range SummaryProfiles {
			sum.Spare[i] = ProfileSpare{Profile: ProfileID((int(sh) + i) % 40), Idle: uint32(sh % 7),
				Speculative: uint32(sh % 5), Configured: 1000, Floor: int32(sh) * 1000}
		}
		sums = append(sums, sum)
		if sh < 100 {
			for k := range 100 {
				escs = append(escs, Escalation{Shard: sh, Shortfall: Shortfall{Profile: ProfileID(k % 40),
					Priority: int32(k * 10_000), Count: int32(1 + k%5), Age: 6}})
			}
		}
	}
	cfg := CoordinatorConfig{Preemption: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := PlanShortfalls(cfg, sums, escs); err != nil {
			b.Fatal(err)
		}
	}
}
