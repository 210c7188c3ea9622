package aws_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/controller"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestBurstMixedFleet launches 24 machines at once, half spot and half
// on-demand over two types, through CreateFleet instant (spot with
// price-capacity-optimized) while the first fleet calls are throttled: the
// Creates of one offering wait on each other and go several per
// CreateFleet, each machine gets exactly one instance, and releasing them
// all leaves nothing running: every Delete ends in NotFound.
func TestBurstMixedFleet(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	p, _ := newProvider(t, func(c *awsprov.Config) { c.Endpoint = fp.URL })
	ctx := context.Background()
	offs := []string{"m5.large/us-east-1a/spot", "m5.large/us-east-1b/on-demand", "c5.large/us-east-1b/spot", "c5.large/us-east-1a/on-demand"}
	const n = 24
	fp.Throttle("CreateFleet", 2)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := p.Create(ctx, createReq("burst", fmt.Sprintf("b-%02d", i), offs[i%len(offs)])); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("burst Create: %v", err)
	}
	form := fp.LastForm("CreateFleet")
	if form.Get("Type") != "instant" || form.Get("SpotOptions.AllocationStrategy") != "price-capacity-optimized" {
		t.Fatalf("CreateFleet form: type %q spot strategy %q", form.Get("Type"), form.Get("SpotOptions.AllocationStrategy"))
	}
	ms, err := p.List(ctx, provider.Filter{Pool: "burst"})
	if err != nil || len(ms) != n {
		t.Fatalf("List = %d machines, %v; want %d", len(ms), err, n)
	}
	biggest := 0
	for _, f := range fp.Forms("CreateFleet") {
		k, _ := strconv.Atoi(f.Get("TargetCapacitySpecification.TotalTargetCapacity"))
		biggest = max(biggest, k)
	}
	calls := len(fp.Forms("CreateFleet")) - fp.Injected("throttle")
	t.Logf("%d machines in %d CreateFleet calls (%d throttled), the biggest for %d", n, calls, fp.Injected("throttle"), biggest)
	if calls > n/2 || biggest < 2 {
		t.Fatalf("%d CreateFleet calls for %d machines, the biggest for %d: the burst was not batched", calls, n, biggest)
	}
	c := ec2Client(t, moto.URL)
	if all := instancesOf(t, c, p.Name(), ""); len(all) != n {
		t.Fatalf("%d instances for %d machines", len(all), n)
	}
	spot := 0
	for _, in := range instancesOf(t, c, p.Name(), "") {
		if in.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
			spot++
		}
		off := tagOf(in, "tide:offering")
		if want := off[:len(string(in.InstanceType))]; string(in.InstanceType) != want {
			t.Fatalf("instance of offering %s is a %s", off, in.InstanceType)
		}
	}
	if spot != n/2 {
		t.Fatalf("%d spot instances, want %d", spot, n/2)
	}
	for _, m := range ms {
		if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: provider.Fence{Controller: "t", Epoch: 1}, Pool: "burst", MachineID: m.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		_, err := p.Delete(ctx, provider.DeleteRequest{Fence: provider.Fence{Controller: "t", Epoch: 1}, Pool: "burst", MachineID: m.ID})
		if !provider.IsNotFound(err) {
			t.Fatalf("Delete of %s after termination = %v, want NotFound", m.ID, err)
		}
	}
	for _, in := range instancesOf(t, c, p.Name(), "") {
		if in.State.Name != types.InstanceStateNameTerminated {
			t.Fatalf("instance %s is %s after the release", *in.InstanceId, in.State.Name)
		}
	}
}

// crashAfterCreate kills the controller (a panic) right after the first
// CreateFleet answered, before the controller could write anything down.
type crashAfterCreate struct {
	provider.Provider
	mu      sync.Mutex
	crashed string
}

type crash struct{}

func (c *crashAfterCreate) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	ack, err := c.Provider.Create(ctx, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && !ack.Replayed && c.crashed == "" {
		c.crashed = req.MachineID
		panic(crash{})
	}
	return ack, err
}

// TestCrashBetweenCreateFleetAndJournalAdopts: a controller killed after
// CreateFleet launched an instance and before its journal write; a new
// process (new provider, new controller, same journal) adopts that instance
// by its tags instead of launching another. moto does not honour
// ClientToken, so only the tag path can prevent the second launch.
func TestCrashBetweenCreateFleetAndJournalAdopts(t *testing.T) {
	e := newCtlEnv(t, "", nil, "m5.large/us-east-1a/on-demand")
	wrap := &crashAfterCreate{Provider: e.prov}
	e.wrap = wrap
	e.ctl = e.newController()
	e.setDesired(3)
	crashed := false
	for i := 0; i < 10 && !crashed; i++ {
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(crash); !ok {
						panic(r)
					}
					crashed = true
				}
			}()
			if err := e.tick(); err != nil && !provider.IsTransient(err) {
				t.Fatal(err)
			}
		}()
	}
	if !crashed {
		t.Fatal("the controller never created a machine")
	}
	id := wrap.crashed
	c := ec2Client(t, e.endpoint)
	before := instancesOf(t, c, e.cfg.Name, id)
	if len(before) != 1 {
		t.Fatalf("machine %s has %d instances after the crash, want 1", id, len(before))
	}
	e.restart()
	e.setDesired(3)
	e.tickUntil(3, 30)
	after := instancesOf(t, c, e.cfg.Name, id)
	if len(after) != 1 || *after[0].InstanceId != *before[0].InstanceId || after[0].State.Name != types.InstanceStateNameRunning {
		t.Fatalf("machine %s: instances %v after the restart, want the one launched before the crash (%s) still running",
			id, instanceIDs(after), *before[0].InstanceId)
	}
}

func instanceIDs(insts []types.Instance) []string {
	var out []string
	for _, in := range insts {
		out = append(out, *in.InstanceId+"("+string(in.State.Name)+")")
	}
	return out
}

// TestOrphanIsDeleted: an instance tagged for the pool that no journal
// knows (launched by a controller that crashed before its journal write,
// then lost its journal) is adopted by List, left running for the
// controller's OrphanGrace (on the injected clock) with an orphan-seen
// event, then deleted with an orphan event.
func TestOrphanIsDeleted(t *testing.T) {
	e := newCtlEnv(t, "", nil, "m5.large/us-east-1a/on-demand")
	e.ctlCfg.OrphanGrace = time.Minute
	if _, err := e.prov.Create(context.Background(), provider.CreateRequest{Fence: provider.Fence{Controller: "ctl-a", Epoch: 1},
		Pool: "gpu", MachineID: "gpu-orphan", Offering: "m5.large/us-east-1a/on-demand"}); err != nil {
		t.Fatal(err)
	}
	e.restart() // the new process knows nothing of it but its tags
	c := ec2Client(t, e.endpoint)
	for i := range 6 { // seen at the first tick, 50s before the last
		if err := e.tick(); err != nil {
			t.Fatal(err)
		}
		insts := instancesOf(t, c, e.cfg.Name, "gpu-orphan")
		if len(insts) != 1 || insts[0].State.Name != types.InstanceStateNameRunning || e.events.count(controller.ReasonOrphan) != 0 {
			t.Fatalf("tick %d, within the grace: orphan %v, events:\n%s", i+1, instanceIDs(insts), e.events.tail())
		}
	}
	if e.events.count(controller.ReasonOrphanSeen) != 1 {
		t.Fatalf("want one %s event:\n%s", controller.ReasonOrphanSeen, e.events.tail())
	}
	e.setDesired(1)
	e.tickUntil(1, 20)
	if e.events.count(controller.ReasonOrphan) != 1 {
		t.Fatalf("want one %s event:\n%s", controller.ReasonOrphan, e.events.tail())
	}
	for _, in := range instancesOf(t, c, e.cfg.Name, "gpu-orphan") {
		if in.State.Name != types.InstanceStateNameTerminated {
			t.Fatalf("orphan instance is %s, want terminated", in.State.Name)
		}
	}
}
