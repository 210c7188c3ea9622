package aws_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestBatchUnnamedInstancesAreAdopted: a batched CreateFleet launched the
// instances but naming each with its machine id failed (CreateTags
// throttled to exhaustion: as good as a crash right after CreateFleet). A
// restarted provider still lists every machine (by the batch's tide:batch
// tag), the retried Creates are replays that name the instances, and
// nothing is launched twice.
func TestBatchUnnamedInstancesAreAdopted(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	p, _ := newProvider(t, func(c *awsprov.Config) { c.Endpoint = fp.URL; c.MaxAttempts = 1 })
	ctx := context.Background()
	const n = 6
	off := "m5.large/us-east-1a/on-demand"
	// The pool's fence is recorded first (a tag on the template); from
	// then on every CreateTags fails.
	if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: provider.Fence{Controller: "t", Epoch: 1}, Pool: "b", MachineID: "none"}); !provider.IsNotFound(err) {
		t.Fatal(err)
	}
	fp.Throttle("CreateTags", 1000)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := p.Create(ctx, createReq("b", fmt.Sprintf("b-%d", i), off)); !provider.IsTransient(err) {
				t.Errorf("Create while CreateTags fails = %v, want Transient", err)
			}
		})
	}
	wg.Wait()
	fp.Throttle("CreateTags", 0)
	c := ec2Client(t, moto.URL)
	all := instancesOf(t, c, p.Name(), "")
	for _, in := range all {
		if tagOf(in, "tide:machine-id") != "" {
			t.Fatalf("instance %s is named %s: the test proved nothing", *in.InstanceId, tagOf(in, "tide:machine-id"))
		}
	}
	if len(all) != n {
		t.Fatalf("%d instances launched for %d machines", len(all), n)
	}
	cfg := baseConfig(t, fp.URL)
	cfg.Name = p.Name()
	np, err := awsprov.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := np.List(ctx, provider.Filter{Pool: "b"})
	if err != nil || len(ms) != n {
		t.Fatalf("List after the restart = %d machines, %v; want %d", len(ms), err, n)
	}
	fleets := fp.Calls("CreateFleet")
	for i := range n {
		id := fmt.Sprintf("b-%d", i)
		ack, err := np.Create(ctx, createReq("b", id, off))
		if err != nil || !ack.Replayed {
			t.Fatalf("retried Create of %s = %+v, %v; want a replay", id, ack, err)
		}
		if got := instancesOf(t, c, p.Name(), id); len(got) != 1 || got[0].State.Name != types.InstanceStateNameRunning {
			t.Fatalf("machine %s: instances %v, want one named and running", id, instanceIDs(got))
		}
	}
	if got := fp.Calls("CreateFleet"); got != fleets {
		t.Fatalf("%d CreateFleet calls after the restart, want none", got-fleets)
	}
}

// TestBatchUnderICE: a burst on an out-of-capacity type (injected) fails
// every Create with InsufficientCapacity naming the offering, in fewer
// fleet calls than Creates, and launches nothing.
func TestBatchUnderICE(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	p, _ := newProvider(t, func(c *awsprov.Config) { c.Endpoint = fp.URL })
	ctx := context.Background()
	fp.InsufficientCapacity("m5.large", true)
	// The injected answer is immediate: held for a while, the Creates of the
	// burst arrive while the first call is in flight, as against a real
	// cloud, instead of each finishing before the next starts.
	fp.Delay("CreateFleet", 500*time.Millisecond)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := p.Create(ctx, createReq("ice", fmt.Sprintf("ice-%d", i), "m5.large/us-east-1b/spot"))
			var ice *provider.InsufficientCapacityError
			if !errors.As(err, &ice) || ice.Offering != "m5.large/us-east-1b/spot" {
				t.Errorf("Create on an out-of-capacity type = %v, want InsufficientCapacity for the offering", err)
			}
		})
	}
	wg.Wait()
	if calls := fp.Calls("CreateFleet"); calls >= n || calls == 0 {
		t.Fatalf("%d CreateFleet calls for %d Creates: not batched", calls, n)
	}
	if got := instancesOf(t, ec2Client(t, moto.URL), p.Name(), ""); len(got) != 0 {
		t.Fatalf("%d instances launched under ICE", len(got))
	}
}
