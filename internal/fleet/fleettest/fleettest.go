// Package fleettest builds small fleets for the tests of the fleet tier's
// drivers: a real embedded etcd (etcdtest), the fleet's configuration in it,
// one simulated cloud on a fake clock behind a recording wrapper, cluster
// assignments, and shard controllers, each on its own etcd client so a test
// can crash one by closing its client.
package fleettest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

// Start is the fake clock's start.
var Start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// Latencies of the simulated cloud.
const (
	Boot      = 30 * time.Second
	Configure = 10 * time.Second
	Drain     = 10 * time.Second
	Delete    = 5 * time.Second
)

// Timeout bounds one etcd call of the fleet's stores in tests.
const Timeout = 2 * time.Second

// Offerings of the standard catalog, all of provider "sim": profile "gpu"
// as on-demand ("g8/on-demand", $10/h) and spot ("g8/spot", $3/h); profile
// "cpu" as on-demand ("c4/on-demand", $1/h).
var Offerings = []etcdstate.OfferingRecord{
	{Provider: "sim", Profile: "gpu", Offering: capacity.Offering{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 10,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}},
	{Provider: "sim", Profile: "gpu", Offering: capacity.Offering{Type: "g8", Kind: capacity.Spot, PricePerHour: 3,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}},
	{Provider: "sim", Profile: "cpu", Offering: capacity.Offering{Type: "c4", Kind: capacity.OnDemand, PricePerHour: 1,
		Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}}},
}

// Quota returns quota entries: on-demand and spot g8, on-demand c4.
func Quota(gpuOnDemand, gpuSpot, cpu int) []etcdstate.QuotaEntry {
	var q []etcdstate.QuotaEntry
	add := func(off string, n int) {
		if n > 0 {
			q = append(q, etcdstate.QuotaEntry{Provider: "sim", Offering: off, Count: n})
		}
	}
	add("g8/on-demand", gpuOnDemand)
	add("g8/spot", gpuSpot)
	add("c4/on-demand", cpu)
	return q
}

// Env is a fleet under test.
type Env struct {
	T testing.TB
	// Etcd is the embedded etcd; Store a store of the fleet on its own client.
	Etcd  *etcdtest.Server
	Store *etcdstate.Store
	// Clock drives the cloud and the controllers.
	Clock *clock.Fake
	// Cloud is the simulated cloud (provider "sim"); controllers reach it
	// through Rec, which logs their calls.
	Cloud *sim.Cloud
	Rec   *providertest.Recorder
	// Config is the fleet configuration written to etcd, under Prefix.
	Config etcdstate.Config
	Prefix string
	// Timeout bounds each etcd call of the stores made from now on.
	Timeout time.Duration

	clients map[*shardctl.Controller]*clientv3.Client
	ids     *etcdstate.ClusterIDs
}

// New starts etcd and writes a fleet configuration with the standard
// catalog and the given shards.
func New(t testing.TB, shards ...etcdstate.ShardSpec) *Env {
	t.Helper()
	e := &Env{T: t, Etcd: etcdtest.Start(t), Clock: clock.NewFake(Start), Prefix: "/test/fleet", Timeout: Timeout,
		clients: map[*shardctl.Controller]*clientv3.Client{}}
	e.Store = e.NewStore(e.Etcd.Client())
	var offs []sim.Offering
	for _, o := range Offerings {
		offs = append(offs, sim.Offering{Offering: o.Offering, Boot: sim.Fixed(Boot), Configure: sim.Fixed(Configure),
			Drain: sim.Fixed(Drain), Delete: sim.Fixed(Delete)})
	}
	cloud, err := sim.New(sim.Config{Offerings: offs}, e.Clock, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	e.Cloud, e.Rec = cloud, providertest.NewRecorder(cloud)
	e.Config = etcdstate.Config{Offerings: Offerings,
		Providers: []etcdstate.ProviderSpec{{Name: "sim", Type: "sim"}}, Shards: shards}
	if err := e.Store.InitFleet(context.Background(), e.Config); err != nil {
		t.Fatal(err)
	}
	return e
}

// NewStore returns a store of the fleet on cli.
func (e *Env) NewStore(cli *clientv3.Client) *etcdstate.Store {
	return etcdstate.New(cli, e.Prefix, e.Timeout)
}

// Shard returns a new (not started) controller of shard id, on its own etcd
// client, with a one-second lease; change lets a test adjust the config.
func (e *Env) Shard(id uint16, change ...func(*shardctl.Config)) *shardctl.Controller {
	e.T.Helper()
	cfg := shardctl.Config{Shard: fleet.ShardID(id), LeaseTTL: time.Second, Address: "shard.test"}
	for _, f := range change {
		f(&cfg)
	}
	cli := e.Etcd.Client()
	c, err := shardctl.New(cfg, shardctl.Deps{Store: e.NewStore(cli),
		Providers: map[string]provider.Provider{"sim": e.Rec}, Clock: e.Clock})
	if err != nil {
		e.T.Fatal(err)
	}
	e.clients[c] = cli
	return c
}

// Partition cuts a controller off etcd for good (its client is closed; its
// lease expires in etcd after the TTL, without being revoked): a crash, or
// a network partition, as etcd sees it.
func (e *Env) Partition(c *shardctl.Controller) { e.clients[c].Close() }

// WaitReleased waits (up to 15s) until no controller holds the shard: it
// watches the ownership key until it is deleted (a lease expiry).
func (e *Env) WaitReleased(shard uint16) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	key := e.Store.OwnerKey(shard)
	resp, err := e.Store.Client().Get(ctx, key)
	if err != nil {
		e.T.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return
	}
	for wr := range e.Store.Client().Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	e.T.Fatalf("shard %d still held after 15s", shard)
}

// Assign makes a cluster's first contact, on the given shard.
func (e *Env) Assign(name string, shard uint16) etcdstate.ClusterRecord {
	e.T.Helper()
	if e.ids == nil {
		e.ids = e.Store.NewClusterIDs()
	}
	r, _, err := e.Store.AssignCluster(context.Background(), name, func() (uint16, error) { return shard, nil }, e.ids)
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// Needs is a cluster's needs of one profile, with a bootstrap blob.
func Needs(cluster, profile string, count, priority int32) *fleetv1.ClusterCapacityNeeds {
	return &fleetv1.ClusterCapacityNeeds{Cluster: cluster, Bootstrap: []byte(`{"cluster":"` + cluster + `"}`),
		Needs: []*fleetv1.Need{{Profile: profile, Count: count, Priority: priority}}}
}

// Machines returns the cloud's machines of a shard's pool, by state.
func (e *Env) Machines(pool string) map[provider.State][]provider.Machine {
	e.T.Helper()
	ms, err := e.Cloud.List(context.Background(), provider.Filter{Pool: pool})
	if err != nil {
		e.T.Fatal(err)
	}
	out := map[provider.State][]provider.Machine{}
	for _, m := range ms {
		out[m.State] = append(out[m.State], m)
	}
	return out
}

// Count returns how many machines of the pool are in the given state.
func (e *Env) Count(pool string, st provider.State) int { return len(e.Machines(pool)[st]) }

// Cycle runs one cycle of each controller, failing the test on ErrDeposed.
func (e *Env) Cycle(cs ...*shardctl.Controller) {
	e.T.Helper()
	for _, c := range cs {
		if err := c.Cycle(context.Background()); err != nil && isDeposed(err) {
			e.T.Fatalf("%s: %v", c.Config().Shard, err)
		}
	}
}

// Step advances the clock by d, then cycles the controllers.
func (e *Env) Step(d time.Duration, cs ...*shardctl.Controller) {
	e.T.Helper()
	e.Clock.Advance(d)
	e.Cycle(cs...)
}

func isDeposed(err error) bool { return errors.Is(err, shardctl.ErrDeposed) }
