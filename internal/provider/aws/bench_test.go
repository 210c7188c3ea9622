package aws_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/provider"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
)

// BenchmarkCreateFleetRoundTrip: one Create (tag lookup, CreateFleet
// instant, describe) of a fresh machine through the emulator.
func BenchmarkCreateFleetRoundTrip(b *testing.B) {
	p, _ := newProvider(b, nil)
	ctx := context.Background()
	if _, err := p.Create(ctx, createReq("bench", "warm", "m5.large/us-east-1a/on-demand")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := p.Create(ctx, createReq("bench", fmt.Sprintf("c-%d", i), "m5.large/us-east-1a/on-demand")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000: List of a pool of 1,000 tagged instances.
func BenchmarkList1000(b *testing.B) {
	p, moto := newProvider(b, func(c *awsprov.Config) { c.CallTimeout = awsprov.Duration(5 * time.Minute) })
	c := ec2Client(b, moto.URL)
	ctx := context.Background()
	for batch := range 10 { // 10 × 100 instances, tagged as the provider tags them
		var tags []types.Tag
		for k, v := range map[string]string{"tide:owner": p.Name(), "tide:pool": "big", "tide:offering": "m5.large/us-east-1a/on-demand"} {
			tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(v)})
		}
		out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: awssdk.String(testImage), InstanceType: "m5.large",
			MinCount: awssdk.Int32(100), MaxCount: awssdk.Int32(100),
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}})
		if err != nil {
			b.Fatal(err)
		}
		for i, in := range out.Instances {
			if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{*in.InstanceId},
				Tags: []types.Tag{{Key: awssdk.String("tide:machine-id"), Value: awssdk.String(fmt.Sprintf("big-%04d", batch*100+i))}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		ms, err := p.List(ctx, provider.Filter{Pool: "big"})
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) != 1000 {
			b.Fatalf("List = %d machines, want 1000", len(ms))
		}
	}
}

// BenchmarkBurst100: 100 concurrent Creates (spot and on-demand), until
// List shows them all, then their release: one op is a whole burst.
func BenchmarkBurst100(b *testing.B) {
	p, _ := newProvider(b, func(c *awsprov.Config) { c.CallTimeout = awsprov.Duration(5 * time.Minute) })
	ctx := context.Background()
	if _, err := p.Create(ctx, createReq("warm", "warm", "m5.large/us-east-1a/on-demand")); err != nil {
		b.Fatal(err)
	}
	offs := []string{"m5.large/us-east-1a/spot", "c5.large/us-east-1b/on-demand"}
	fence := provider.Fence{Controller: "t", Epoch: 1}
	b.ResetTimer()
	for i := range b.N {
		pool := fmt.Sprintf("burst-%d", i)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for j := range 100 {
			wg.Go(func() {
				if _, err := p.Create(ctx, createReq(pool, fmt.Sprintf("%s-%03d", pool, j), offs[j%2])); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		ms, err := p.List(ctx, provider.Filter{Pool: pool})
		if err != nil || len(ms) != 100 {
			b.Fatalf("List = %d, %v", len(ms), err)
		}
		for _, m := range ms {
			if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: fence, Pool: pool, MachineID: m.ID}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
