package coord_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/fleet/coord"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleettest"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	"github.com/tide-project/tide/sdk/provider"
)

// serve serves a Fleet API on a loopback port until the test ends.
func serve(t *testing.T, lis net.Listener, srv fleetv1.FleetServer) {
	t.Helper()
	g := grpc.NewServer()
	fleetv1.RegisterFleetServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func client(t *testing.T, addr string) fleetv1.FleetClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return fleetv1.NewFleetClient(cc)
}

// TestFleetAPI: a cluster's first needs go to the coordinator, which
// assigns it and forwards them to its shard over gRPC; the shard provisions;
// status and shortfalls read back through the API of both.
func TestFleetAPI(t *testing.T) {
	env := fleettest.New(t, etcdstate.ShardSpec{ID: 1, Quota: fleettest.Quota(2, 0, 0)})
	shardLis := listen(t)
	s1 := env.Shard(1, func(c *shardctl.Config) { c.Address = shardLis.Addr().String() })
	start(t, s1)
	serve(t, shardLis, shardctl.NewServer(s1))
	c, _ := replica(t, env, "a")
	coordLis := listen(t)
	cs := coord.NewServer(c)
	t.Cleanup(cs.Close)
	serve(t, coordLis, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fc, sc := client(t, coordLis.Addr().String()), client(t, shardLis.Addr().String())

	resp, err := fc.SendNeeds(ctx, &fleetv1.SendNeedsRequest{Needs: fleettest.Needs("alpha", "gpu", 3, 100)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Shard != 1 || !resp.FirstContact || resp.ShardAddress != shardLis.Addr().String() || resp.ClusterId == 0 {
		t.Errorf("first contact: %+v", resp)
	}
	_, err = sc.SendNeeds(ctx, &fleetv1.SendNeedsRequest{Needs: fleettest.Needs("stranger", "gpu", 1, 1)})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("needs of an unassigned cluster at the shard: %v, want FailedPrecondition", err)
	}
	_, err = fc.SendNeeds(ctx, &fleetv1.SendNeedsRequest{Needs: fleettest.Needs("alpha", "tpu", 1, 1)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("needs of an unknown profile: %v, want InvalidArgument", err)
	}

	env.Cycle(s1)
	env.Step(fleettest.Boot, s1)
	env.Step(fleettest.Configure, s1)
	for range 6 {
		env.Step(time.Second, s1)
	}
	if got := env.Count("fleet-s1", provider.Configured); got != 2 {
		t.Errorf("configured = %d, want 2 (the quota)", got)
	}
	st, err := fc.Status(ctx, &fleetv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != "coordinator" || len(st.Shards) != 1 || !st.Shards[0].Live || st.Shards[0].Configured != 2 ||
		st.Shards[0].Clusters != 1 || st.Coordinator.Clusters != 1 {
		t.Errorf("coordinator status: %v", st)
	}
	sst, err := sc.Status(ctx, &fleetv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sst.Role != "shard" || sst.Shards[0].Epoch != uint64(s1.Epoch()) || sst.Shards[0].ProvisioningPaused {
		t.Errorf("shard status: %v", sst)
	}
	for name, cl := range map[string]fleetv1.FleetClient{"coordinator": fc, "shard": sc} {
		sf, err := cl.Shortfalls(ctx, &fleetv1.ShortfallsRequest{EscalatedOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(sf.Shortfalls) != 1 || sf.Shortfalls[0].Count != 1 || sf.Shortfalls[0].Profile != "gpu" ||
			!sf.Shortfalls[0].Escalated {
			t.Errorf("%s shortfalls: %v, want one escalated gpu shortfall of 1", name, sf.Shortfalls)
		}
	}
}
