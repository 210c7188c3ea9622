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

	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/sdk/provider"
)

// BenchmarkCreateFleetRoundTrip: one Create of a fresh machine through the
// emulator: the tag lookup, CreateFleet (instant, one instance), a
// describe, and either the naming CreateTags (template user data) or,
// before the launch, the machine's own launch template version (its
// bootstrap as user data).
func BenchmarkCreateFleetRoundTrip(b *testing.B) {
	p, _ := newProvider(b, nil)
	ctx := context.Background()
	if _, err := p.Create(ctx, createReq("bench", "warm", "m5.large/us-east-1a/on-demand")); err != nil {
		b.Fatal(err)
	}
	b.Run("TemplateUserData", func(b *testing.B) {
		for i := range b.N {
			if _, err := p.Create(ctx, createReq("bench", fmt.Sprintf("c-%d", i), "m5.large/us-east-1a/on-demand")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("OwnBootstrap", func(b *testing.B) {
		for i := range b.N {
			req := createReq("bench", fmt.Sprintf("u-%d", i), "m5.large/us-east-1a/on-demand")
			req.Bootstrap = []byte(`{"version":1,"head":"https://10.0.0.1:8000","token":"t"}`)
			if _, err := p.Create(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkList1000: List of a pool of 1,000 tagged instances, the way the
// provider does it (EC2 filters on the pool's tag, the owner is checked
// client-side), and the same read with both tags filtered by EC2, as the
// provider first did: the emulator pays a pass over every tag of the
// account per instance and per tag filter.
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
	b.Run("List", func(b *testing.B) {
		for range b.N {
			ms, err := p.List(ctx, provider.Filter{Pool: "big"})
			if err != nil {
				b.Fatal(err)
			}
			if len(ms) != 1000 {
				b.Fatalf("List = %d machines, want 1000", len(ms))
			}
		}
	})
	b.Run("DescribeTagsThenIDs", func(b *testing.B) {
		for range b.N {
			tags, err := c.DescribeTags(ctx, &ec2.DescribeTagsInput{MaxResults: awssdk.Int32(1000), Filters: []types.Filter{
				{Name: awssdk.String("resource-type"), Values: []string{"instance"}},
				{Name: awssdk.String("key"), Values: []string{"tide:pool"}},
				{Name: awssdk.String("value"), Values: []string{"big"}},
			}})
			if err != nil {
				b.Fatal(err)
			}
			var ids []string
			for _, t := range tags.Tags {
				ids = append(ids, *t.ResourceId)
			}
			out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, r := range out.Reservations {
				n += len(r.Instances)
			}
			if n != 1000 {
				b.Fatalf("%d instances", n)
			}
		}
	})
	b.Run("DescribeTwoTagFilters", func(b *testing.B) {
		for range b.N {
			if n := len(instancesOfPool(b, c, p.Name(), "big")); n != 1000 {
				b.Fatalf("%d instances, want 1000", n)
			}
		}
	})
}

// instancesOfPool reads a pool's instances with EC2 filtering on both the
// installation's and the pool's tag.
func instancesOfPool(tb testing.TB, c *ec2.Client, owner, pool string) []types.Instance {
	tb.Helper()
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{MaxResults: awssdk.Int32(1000), Filters: []types.Filter{
		{Name: awssdk.String("tag:tide:owner"), Values: []string{owner}},
		{Name: awssdk.String("tag:tide:pool"), Values: []string{pool}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out
}

// BenchmarkBurst100: 100 concurrent Creates (spot and on-demand) until
// List shows them all, then their release (100 Deletes and a Sync): one op
// is a whole burst. It reports the launch and the release apart, and the
// CreateFleet calls the launch took (counted by a proxy).
func BenchmarkBurst100(b *testing.B) {
	moto := awstest.StartMoto(b)
	fp := awstest.NewFaultProxy(b, moto.URL)
	p, _ := newProvider(b, func(c *awsprov.Config) {
		c.Endpoint = fp.URL
		c.CallTimeout = awsprov.Duration(5 * time.Minute)
	})
	ctx := context.Background()
	if _, err := p.Create(ctx, createReq("warm", "warm", "m5.large/us-east-1a/on-demand")); err != nil {
		b.Fatal(err)
	}
	offs := []string{"m5.large/us-east-1a/spot", "c5.large/us-east-1b/on-demand"}
	fence := provider.Fence{Controller: "t", Epoch: 1}
	var launch, release time.Duration
	fleets := 0
	b.ResetTimer()
	for i := range b.N {
		pool := fmt.Sprintf("burst-%d", i)
		start, before := time.Now(), fp.Calls("CreateFleet")
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
		launch += time.Since(start)
		fleets += fp.Calls("CreateFleet") - before
		start = time.Now()
		for _, m := range ms {
			if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: fence, Pool: pool, MachineID: m.ID}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		release += time.Since(start)
	}
	b.ReportMetric(launch.Seconds()/float64(b.N), "launch-s/op")
	b.ReportMetric(release.Seconds()/float64(b.N), "release-s/op")
	b.ReportMetric(float64(fleets)/float64(b.N), "CreateFleet/op")
}
