package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// testPriorityAndGangFields: an instance's priority and gang fields
// survive insert, get, list and the scheduling state, in both stores;
// instances without them read zero; a list filtered by gang holds its
// members only.
func testPriorityAndGangFields(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t)
	mustWorker(t, s, "w", 0)
	plain := newInst("plain")
	var gang []store.Instance
	for r := range 3 {
		in := newInst("g" + string(rune('0'+r)))
		in.Priority = -7 + r
		in.GangID, in.GangName, in.GangSize, in.GangRank = "g0", "train", 3, r
		in.GangMaxWait = 90 * time.Second
		in.Restartable = r == 1
		gang = append(gang, in)
	}
	mustInsert(t, s, append([]store.Instance{plain}, gang...)...)
	assign(t, s, "g2", "w")
	check := func(where string, id string, prio int, gid string, size, rank int, wait time.Duration, got *store.Instance) {
		t.Helper()
		if got.Priority != prio || got.GangID != gid || got.GangSize != size || got.GangRank != rank || got.GangMaxWait != wait {
			t.Fatalf("%s %s: priority %d gang %q size %d rank %d wait %v", where, id, got.Priority, got.GangID,
				got.GangSize, got.GangRank, got.GangMaxWait)
		}
	}
	check("get", "plain", 0, "", 0, 0, 0, mustGet(t, s, "plain"))
	for r, in := range gang {
		got := mustGet(t, s, in.ID)
		check("get", in.ID, -7+r, "g0", 3, r, 90*time.Second, got)
		if got.GangName != "train" {
			t.Fatalf("get %s: gang name %q", in.ID, got.GangName)
		}
	}
	all, err := s.ListInstances(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.ID == "g1" {
			check("list", in.ID, -6, "g0", 3, 1, 90*time.Second, in)
		}
	}
	members, err := s.ListInstances(ctx, store.Filter{Gang: "g0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 3 {
		t.Fatalf("list of gang g0: %d instances, want its 3", len(members))
	}
	for _, in := range members {
		if in.GangID != "g0" {
			t.Fatalf("list of gang g0 holds %s of gang %q", in.ID, in.GangID)
		}
	}
	if n, err := s.CountInstances(ctx, store.Filter{Gang: "g0", Status: store.StatusAssigned}); err != nil || n != 1 {
		t.Fatalf("assigned instances of gang g0: %d, %v; want 1", n, err)
	}
	st, err := s.SchedulingState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, si := range append(st.Pending, st.Active...) {
		want := map[string]int{"g0": 0, "g1": 1, "g2": 2}
		r, ok := want[si.ID]
		if !ok {
			if si.Priority != 0 || si.GangID != "" {
				t.Fatalf("scheduling state %s: priority %d gang %q", si.ID, si.Priority, si.GangID)
			}
			continue
		}
		seen++
		if si.Priority != -7+r || si.Restartable != (r == 1) || si.GangID != "g0" || si.GangName != "train" || si.GangSize != 3 || si.GangRank != r || si.GangMaxWait != 90*time.Second {
			t.Fatalf("scheduling state %s: %+v", si.ID, si)
		}
	}
	ds, err := s.DesiredFor(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Instances) != 1 || ds.Instances[0].GangID != "g0" {
		t.Fatalf("desired set %+v, want g2 of gang g0", ds.Instances)
	}
	if seen != 3 {
		t.Fatalf("scheduling state holds %d of the gang's 3 instances", seen)
	}
}
