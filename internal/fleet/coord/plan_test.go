package coord_test

import (
	"math"
	"testing"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/coord"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleettest"
)

func report(shard uint16, rev int64, spec uint32, sfs ...fleet.Shortfall) etcdstate.Report {
	sum := fleet.ShardSummary{Shard: fleet.ShardID(shard), Profiles: 1, Speculative: spec}
	sum.Spare[0] = fleet.ProfileSpare{Profile: 0, Speculative: spec, Floor: math.MaxInt32}
	return etcdstate.Report{Shard: shard, Summary: sum, Shortfalls: sfs, EscalateAfter: 5, Revision: rev}
}

func short(count int32) fleet.Shortfall {
	return fleet.Shortfall{Profile: 0, Priority: 100, Count: count, Age: 6}
}

func directive(id string, from, to uint16, count uint32, state string, rev int64) etcdstate.Directive {
	return etcdstate.Directive{ID: id, Kind: fleet.ReassignQuota.String(), From: from, To: to, Profile: "gpu",
		Count: count, Priority: 100, State: state, ModRevision: rev}
}

// TestPlanCountsDirectivesInFlight: the planning step answers each
// escalation once: directives not done, or done but not yet reflected in
// their recipient's report, cover the escalation, and their donor's spare
// capacity is not offered again.
func TestPlanCountsDirectivesInFlight(t *testing.T) {
	cat, err := etcdstate.BuildCatalog(fleettest.Offerings)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		from     uint16
		count    uint32
		deleted  int
		inFlight int
		unanswd  int
	}
	tests := []struct {
		name       string
		reports    []etcdstate.Report
		directives []etcdstate.Directive
		want       want
	}{
		{"answers an escalation",
			[]etcdstate.Report{report(1, 10, 0, short(2)), report(2, 10, 4)}, nil,
			want{from: 2, count: 2}},
		{"a pending directive covers it",
			[]etcdstate.Report{report(1, 10, 0, short(2)), report(2, 10, 4)},
			[]etcdstate.Directive{directive("d1", 2, 1, 2, etcdstate.StatePending, 9)},
			want{inFlight: 1}},
		{"a partial answer is topped up",
			[]etcdstate.Report{report(1, 10, 0, short(2)), report(2, 10, 4)},
			[]etcdstate.Directive{directive("d1", 2, 1, 1, etcdstate.StateExported, 9)},
			want{from: 2, count: 1, inFlight: 1}},
		{"done but not yet in the recipient's report",
			[]etcdstate.Report{report(1, 40, 0, short(2)), report(2, 60, 4)},
			[]etcdstate.Directive{directive("d1", 2, 1, 2, etcdstate.StateDone, 50)},
			want{inFlight: 1}},
		{"done and reported: deleted, a new shortfall answered anew",
			[]etcdstate.Report{report(1, 60, 0, short(1)), report(2, 60, 4)},
			[]etcdstate.Directive{directive("d1", 2, 1, 2, etcdstate.StateDone, 50)},
			want{from: 2, count: 1, deleted: 1}},
		{"a donor's spare is not offered twice",
			[]etcdstate.Report{report(1, 10, 0, short(2)), report(2, 10, 4), report(3, 10, 0)},
			[]etcdstate.Directive{directive("d1", 2, 3, 3, etcdstate.StatePending, 9)},
			want{from: 2, count: 1, inFlight: 1, unanswd: 1}},
		{"topology-constrained shortfalls stay in their shard",
			[]etcdstate.Report{report(1, 10, 0, fleet.Shortfall{Profile: 0, Priority: 100, Count: 2, Age: 6,
				Topology: true}), report(2, 10, 4)}, nil,
			want{unanswd: 1}},
		{"young shortfalls are not escalated",
			[]etcdstate.Report{report(1, 10, 0, fleet.Shortfall{Profile: 0, Priority: 100, Count: 2, Age: 5}),
				report(2, 10, 4)}, nil,
			want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reports := map[uint16]etcdstate.Report{}
			for _, r := range tt.reports {
				reports[r.Shard] = r
			}
			rep, ds, deleted := coord.Plan(fleet.CoordinatorConfig{}, cat, reports, tt.directives)
			w := tt.want
			var got []want
			for _, d := range ds {
				if d.To != 1 || d.State != etcdstate.StatePending || d.Profile != "gpu" {
					t.Errorf("directive %+v", d)
				}
				got = append(got, want{from: d.From, count: d.Count})
			}
			if w.count == 0 && len(ds) != 0 || w.count != 0 && (len(ds) != 1 || got[0].from != w.from ||
				got[0].count != w.count) {
				t.Errorf("directives %+v, want from s%d count %d", got, w.from, w.count)
			}
			if len(deleted) != w.deleted || rep.InFlight != w.inFlight || len(rep.Unanswered) != w.unanswd {
				t.Errorf("deleted %v in flight %d unanswered %v; want %d, %d, %d", deleted, rep.InFlight,
					rep.Unanswered, w.deleted, w.inFlight, w.unanswd)
			}
		})
	}
}
