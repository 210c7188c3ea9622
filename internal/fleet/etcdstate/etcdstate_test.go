package etcdstate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
)

const (
	goodOfferings = `[{"provider": "cloud", "profile": "gpu", "offering": {"type": "g8", "capacity": "spot", "price": 3, "gpus": 8}}]`
	goodProviders = `[{"name": "cloud", "type": "sim"}]`
	goodShards    = `[{"id": 1, "quota": [{"provider": "cloud", "offering": "g8/spot", "count": 4}]}]`
)

func config(offerings, providers, shards string) string {
	return `{"offerings": ` + offerings + `, "providers": ` + providers + `, "shards": ` + shards + `}`
}

var goodConfig = config(goodOfferings, goodProviders, goodShards)

func TestParseConfigNamesTheField(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{"valid", goodConfig, ""},
		{"unknown field", config(goodOfferings, goodProviders, `[{"id": 1, "quota": [], "extra": 1}]`), "extra"},
		{"unregistered provider", config(goodOfferings, `[{"name": "other", "type": "sim"}]`, goodShards),
			`offerings[0].provider: "cloud" is not in providers`},
		{"shard zero", config(goodOfferings, goodProviders, `[{"id": 0, "quota": []}]`), "shards[0].id: must be 1 or more"},
		{"shard twice", config(goodOfferings, goodProviders, `[{"id": 2, "quota": []}, {"id": 2, "quota": []}]`),
			"shards[1].id: shard 2 declared twice"},
		{"unknown offering", config(goodOfferings, goodProviders,
			`[{"id": 1, "quota": [{"provider": "cloud", "offering": "g9/spot", "count": 1}]}]`),
			`shards[0].quota[0].offering: provider "cloud" sells no "g9/spot"`},
		{"negative count", config(goodOfferings, goodProviders,
			`[{"id": 1, "quota": [{"provider": "cloud", "offering": "g8/spot", "count": -1}]}]`),
			"shards[0].quota[0].count: must not be negative"},
		{"no type", config(goodOfferings, `[{"name": "cloud"}]`, goodShards), "providers[0].type: must be set"},
		{"no shards", config(goodOfferings, goodProviders, `[]`), "shards: at least one shard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := etcdstate.ParseConfig([]byte(tt.config))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestDirectiveIDsSortInIssueOrder(t *testing.T) {
	ids := []string{etcdstate.DirectiveID(9, 2), etcdstate.DirectiveID(9, 10), etcdstate.DirectiveID(10, 1),
		etcdstate.DirectiveID(123456789, 1)}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Errorf("%s does not sort before %s", ids[i-1], ids[i])
		}
	}
}

func TestReportEscalated(t *testing.T) {
	r := etcdstate.Report{EscalateAfter: 5, Shortfalls: []fleet.Shortfall{{Age: 5, Count: 1}, {Age: 6, Count: 2}}}
	if got := r.Escalated(); len(got) != 1 || got[0].Count != 2 {
		t.Errorf("escalated %v, want the one older than 5 cycles", got)
	}
}

// TestGuardedWrites: a shard's writes need its ownership, a directive step
// needs the directive unchanged, a coordinator's writes need its leadership;
// a second holder cannot take a held shard; the configuration is written
// once.
func TestGuardedWrites(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client()
	s := etcdstate.New(cli, "/t", time.Second)
	ctx := context.Background()
	conf, err := etcdstate.ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InitFleet(ctx, conf); err != nil {
		t.Fatal(err)
	}
	if err := s.InitFleet(ctx, conf); err != nil {
		t.Errorf("same configuration again: %v", err)
	}
	other := conf
	other.Shards = append([]etcdstate.ShardSpec{}, conf.Shards...)
	other.Shards = append(other.Shards, etcdstate.ShardSpec{ID: 2})
	if err := s.InitFleet(ctx, other); !errors.Is(err, etcdstate.ErrConfigMismatch) {
		t.Errorf("another configuration: %v, want ErrConfigMismatch", err)
	}

	lease := func() clientv3.LeaseID {
		g, err := cli.Grant(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	l1 := lease()
	e1, err := s.AcquireShard(ctx, etcdstate.Owner{Shard: 1, Holder: "a"}, l1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireShard(ctx, etcdstate.Owner{Shard: 1, Holder: "b"}, lease()); !errors.Is(err, etcdstate.ErrShardHeld) ||
		!strings.Contains(err.Error(), "(a)") {
		t.Errorf("second holder: %v, want ErrShardHeld naming a", err)
	}
	rec := map[string]etcdstate.MachineRecord{"m1": {Provider: "cloud", Offering: "g8/spot"}}
	if err := s.PutMachines(ctx, 1, e1, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, l1); err != nil { // the holder's lease ends
		t.Fatal(err)
	}
	e2, err := s.AcquireShard(ctx, etcdstate.Owner{Shard: 1, Holder: "b"}, lease())
	if err != nil || e2 <= e1 {
		t.Fatalf("successor: epoch %d (err %v), want above %d", e2, err, e1)
	}
	if err := s.PutMachines(ctx, 1, e1, rec); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("old holder's write: %v, want ErrFenced", err)
	}
	if err := s.DeleteMachines(ctx, 1, e1, []string{"m1"}); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("old holder's delete: %v, want ErrFenced", err)
	}
	if recs, _ := s.LoadMachines(ctx, 1); len(recs) != 1 {
		t.Errorf("records %v, want m1 kept", recs)
	}

	// Directive steps: guarded by the epoch and the directive's revision.
	d := etcdstate.Directive{ID: etcdstate.DirectiveID(1, 1), Term: 1, Seq: 1, From: 1, To: 2, State: etcdstate.StatePending}
	leaderKey := "/t/leader"
	if _, err := cli.Put(ctx, leaderKey, "x"); err != nil {
		t.Fatal(err)
	}
	gr, _ := cli.Get(ctx, leaderKey)
	guard := clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", gr.Kvs[0].CreateRevision)
	if err := s.WriteDirectives(ctx, guard, []etcdstate.Directive{d}); err != nil {
		t.Fatal(err)
	}
	coord, err := s.LoadCoord(ctx)
	if err != nil || len(coord.Directives) != 1 {
		t.Fatalf("directives %v (err %v)", coord.Directives, err)
	}
	d = coord.Directives[0]
	d.State = etcdstate.StateExported
	if _, err := s.AdvanceDirective(ctx, 1, e1, d, nil); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("step by the old holder: %v, want ErrFenced", err)
	}
	if _, err := s.AdvanceDirective(ctx, 1, e2, d, []etcdstate.QuotaEntry{}); err != nil {
		t.Errorf("step by the holder: %v", err)
	}
	if _, err := s.AdvanceDirective(ctx, 1, e2, d, nil); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("the same step again (stale revision): %v, want ErrFenced", err)
	}
	if _, err := cli.Delete(ctx, leaderKey); err != nil { // the leader is deposed
		t.Fatal(err)
	}
	if err := s.WriteDirectives(ctx, guard, []etcdstate.Directive{d}); !errors.Is(err, etcdstate.ErrFenced) {
		t.Errorf("deposed leader's write: %v, want ErrFenced", err)
	}
}
