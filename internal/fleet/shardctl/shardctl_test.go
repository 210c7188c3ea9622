package shardctl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleettest"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

const pool1 = "fleet-s1"

func oneShard(t *testing.T, q []etcdstate.QuotaEntry) (*fleettest.Env, *shardctl.Controller) {
	t.Helper()
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: q})
	return env, env.Shard(1)
}

func submit(t *testing.T, c *shardctl.Controller, cluster, profile string, count, prio int32) {
	t.Helper()
	if _, err := c.SubmitNeeds(context.Background(), fleettest.Needs(cluster, profile, count, prio)); err != nil {
		t.Fatalf("submit needs of %s: %v", cluster, err)
	}
}

// converge steps the clock through boot and configure.
func converge(env *fleettest.Env, c ...*shardctl.Controller) {
	env.Cycle(c...)
	env.Step(fleettest.Boot, c...)
	env.Step(fleettest.Configure, c...)
	env.Step(time.Second, c...)
}

// TestProvisionRecordsThenCreates: needs become machines (Create with the
// shard's fence, Configure with the cluster's blob), each recorded in etcd
// before its Create; the shard reports to etcd.
func TestProvisionRecordsThenCreates(t *testing.T) {
	env, c := oneShard(t, fleettest.Quota(4, 0, 0))
	env.Assign("alpha", 1)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, c, "alpha", "gpu", 3, 100)
	converge(env, c)

	ms := env.Machines(pool1)
	if got := len(ms[provider.Configured]); got != 3 {
		t.Fatalf("configured machines = %d, want 3 (all: %v)", got, ms)
	}
	for _, m := range ms[provider.Configured] {
		if m.Cluster != "alpha" || string(m.Bootstrap) != `{"cluster":"alpha"}` {
			t.Errorf("machine %s: cluster %q bootstrap %q", m.ID, m.Cluster, m.Bootstrap)
		}
	}
	recs, err := env.Store.LoadMachines(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Errorf("machine records = %d, want 3", len(recs))
	}
	for _, call := range env.Rec.Calls(tideprovider.OpCreate, tideprovider.OpConfigure) {
		if call.Fence.Controller != "s1" || call.Fence.Epoch != uint64(c.Epoch()) || call.Err != nil {
			t.Errorf("%s %s: fence %s (epoch %d), err %v", call.Op, call.MachineID, call.Fence, c.Epoch(), call.Err)
		}
		if call.Op == tideprovider.OpCreate {
			if _, ok := recs[call.MachineID]; !ok {
				t.Errorf("created %s without a record", call.MachineID)
			}
		}
	}
	reports, err := env.Store.LoadReports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r := reports[1]; r.Summary.Configured != 3 || r.Epoch != c.Epoch() {
		t.Errorf("report: configured %d epoch %d, want 3 and %d", r.Summary.Configured, r.Epoch, c.Epoch())
	}
	ledger := env.Cloud.Ledger()
	if dup := ledger.Duplicates(); len(dup) != 0 {
		t.Errorf("duplicates: %v", dup)
	}
}

// TestSubmitNeedsChecksTheAssignment: a shard takes needs only of its own
// clusters, and validates them against the catalog.
func TestSubmitNeedsChecksTheAssignment(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(1, 0, 0)},
		etcdstate.ShardSpec{ID: 2, Quota: fleettest.Quota(1, 0, 0)})
	env.Assign("mine", 1)
	env.Assign("theirs", 2)
	c := env.Shard(1)
	ctx := context.Background()
	if _, err := c.SubmitNeeds(ctx, fleettest.Needs("mine", "gpu", 1, 1)); !errors.Is(err, shardctl.ErrNotStarted) {
		t.Fatalf("before start: %v, want ErrNotStarted", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cluster string
		profile string
		want    error
		wantMsg string
	}{
		{"own cluster", "mine", "gpu", nil, ""},
		{"other shard's", "theirs", "gpu", shardctl.ErrWrongShard, ""},
		{"never contacted", "stranger", "gpu", shardctl.ErrNotAssigned, ""},
		{"unknown profile", "mine", "tpu", nil, `needs[0].profile: unknown profile "tpu"`},
		{"bad name", "no/slash", "gpu", nil, "cluster: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.SubmitNeeds(ctx, fleettest.Needs(tt.cluster, tt.profile, 1, 1))
			switch {
			case tt.want != nil:
				if !errors.Is(err, tt.want) {
					t.Errorf("err = %v, want %v", err, tt.want)
				}
			case tt.wantMsg != "":
				if err == nil || !contains(err.Error(), tt.wantMsg) {
					t.Errorf("err = %v, want one containing %q", err, tt.wantMsg)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
