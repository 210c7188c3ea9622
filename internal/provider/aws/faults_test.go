package aws_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/controller"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/sdk/provider"
)

func createReq(pool, id, offering string) provider.CreateRequest {
	return provider.CreateRequest{Fence: provider.Fence{Controller: "t", Epoch: 1}, Pool: pool, MachineID: id, Offering: offering}
}

// TestInsufficientCapacityIsTyped: CreateFleet answering
// InsufficientInstanceCapacity (injected by the fault proxy) becomes an
// InsufficientCapacityError naming the offering, and nothing is launched;
// another type still launches.
func TestInsufficientCapacityIsTyped(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	p, _ := newProvider(t, func(c *awsprov.Config) { c.Endpoint = fp.URL })
	fp.InsufficientCapacity("m5.large", true)
	ctx := context.Background()
	_, err := p.Create(ctx, createReq("p", "m1", "m5.large/us-east-1a/spot"))
	var ice *provider.InsufficientCapacityError
	if !errors.As(err, &ice) || ice.Offering != "m5.large/us-east-1a/spot" {
		t.Fatalf("Create of an out-of-capacity type = %v, want InsufficientCapacity for the offering", err)
	}
	if fp.Injected("ice") != 1 {
		t.Fatalf("proxy injected %d ICE answers, want 1", fp.Injected("ice"))
	}
	if _, err := p.Get(ctx, "m1"); !provider.IsNotFound(err) {
		t.Fatalf("Get after ICE = %v, want NotFound", err)
	}
	if _, err := p.Create(ctx, createReq("p", "m2", "c5.large/us-east-1a/spot")); err != nil {
		t.Fatalf("Create of another type: %v", err)
	}
}

// TestICEFallsBackToNextType: the controller asks for the cheapest
// offering, m5.large spot; the proxy says it is out of capacity; the
// controller skips it (its ICE cache) and fills the pool with the next
// type, c5.large.
func TestICEFallsBackToNextType(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	e := newCtlEnv(t, fp.URL, func(c *awsprov.Config) {
		c.SpotPrices = false
		c.Prices = map[string]float64{"m5.large": 0.05, "c5.large": 0.08}
	}, "m5.large/us-east-1a/spot", "c5.large/us-east-1a/spot")
	fp.InsufficientCapacity("m5.large", true)
	e.setDesired(3)
	e.tickUntil(3, 20)
	if fp.Injected("ice") == 0 {
		t.Fatal("the proxy injected no ICE answer: the test proved nothing")
	}
	if n := e.events.count(controller.ReasonInsufficientCapacity); n == 0 {
		t.Fatalf("no %s event", controller.ReasonInsufficientCapacity)
	}
	// The ICE cache: within its backoff m5.large is not asked for again.
	if n := fp.Injected("ice"); n != 1 {
		t.Fatalf("m5.large was asked for %d times out of capacity, want 1 (then skipped)", n)
	}
	for _, in := range e.live() {
		if in.InstanceType != "c5.large" {
			t.Fatalf("instance %s is %s, want c5.large (m5.large is out of capacity)", *in.InstanceId, in.InstanceType)
		}
	}
}

// TestThrottlingConverges: throttled calls (RequestLimitExceeded, injected)
// are retried with backoff and the Create still launches exactly once;
// throttling beyond the attempts becomes a TransientError, and the retried
// Create is then a replay or a first launch, never a second.
func TestThrottlingConverges(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	p, _ := newProvider(t, func(c *awsprov.Config) { c.Endpoint = fp.URL; c.MaxAttempts = 4 })
	c := ec2Client(t, moto.URL)
	ctx := context.Background()
	fp.Throttle("CreateFleet", 3)
	before := fp.Calls("CreateFleet")
	if _, err := p.Create(ctx, createReq("p", "m1", "m5.large/us-east-1a/on-demand")); err != nil {
		t.Fatalf("Create under 3 throttles with 4 attempts: %v", err)
	}
	if got := fp.Calls("CreateFleet") - before; got != 4 {
		t.Fatalf("CreateFleet reached the API %d times, want 4 (3 throttled + 1)", got)
	}
	if n := len(instancesOf(t, c, p.Name(), "m1")); n != 1 {
		t.Fatalf("m1 launched %d times, want 1", n)
	}

	fp.Throttle("*", 100)
	start := time.Now()
	_, err := p.Create(ctx, createReq("p", "m2", "m5.large/us-east-1a/on-demand"))
	if !provider.IsTransient(err) {
		t.Fatalf("Create under persistent throttling = %v, want Transient", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("giving up took %s", d)
	}
	fp.Throttle("*", 0)
	for range 2 {
		if _, err := p.Create(ctx, createReq("p", "m2", "m5.large/us-east-1a/on-demand")); err != nil {
			t.Fatalf("Create after throttling stopped: %v", err)
		}
	}
	if n := len(instancesOf(t, c, p.Name(), "m2")); n != 1 {
		t.Fatalf("m2 launched %d times, want 1", n)
	}
}

// TestThrottledControllerConverges: a controller scaling to 5 through a
// proxy that throttles every other call converges with nothing launched
// twice.
func TestThrottledControllerConverges(t *testing.T) {
	moto := awstest.StartMoto(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	e := newCtlEnv(t, fp.URL, func(c *awsprov.Config) { c.MaxAttempts = 2 }, "m5.large/us-east-1a/on-demand")
	e.setDesired(5)
	for i := range 6 {
		fp.Throttle("*", 3)
		if err := e.tick(); err != nil && !provider.IsTransient(err) {
			t.Fatalf("tick %d: %v", i, err)
		}
	}
	e.tickUntil(5, 30)
	if fp.Injected("throttle") == 0 {
		t.Fatal("no throttle injected")
	}
}
