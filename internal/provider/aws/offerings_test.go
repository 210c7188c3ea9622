package aws_test

import (
	"context"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/provider"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

// TestOfferingsResolved: types × zones × kinds, resources from
// DescribeInstanceTypes (GPUs included), on-demand prices from the shipped
// table, spot prices from the spot price history.
func TestOfferingsResolved(t *testing.T) {
	p, _ := newProvider(t, func(c *awsprov.Config) { c.InstanceTypes = []string{"m5.large", "p3.16xlarge"} })
	offs, err := p.Offerings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]capacity.Offering{}
	for _, o := range offs {
		byName[o.Name()] = o
	}
	od, ok := byName["p3.16xlarge/us-east-1a/on-demand"]
	if !ok {
		t.Fatalf("no p3.16xlarge on-demand offering in us-east-1a: %v", offs)
	}
	if od.Resources.MilliCPU != 64000 || od.Resources.GPUs != 8 || od.Resources.Memory != 488<<30 {
		t.Fatalf("p3.16xlarge resources = %+v, want 64 vCPU, 8 GPUs, 488 GiB", od.Resources)
	}
	if want, _ := awsprov.OnDemandPrice("us-east-1", "p3.16xlarge"); od.PricePerHour != want || want != 24.48 {
		t.Fatalf("p3.16xlarge on-demand price %v, table %v", od.PricePerHour, want)
	}
	spot := byName["m5.large/us-east-1a/spot"]
	if spot.Kind != capacity.Spot || spot.PricePerHour <= 0 || spot.InterruptionProbability != 0.05 {
		t.Fatalf("m5.large spot = %+v", spot)
	}
	if m := byName["m5.large/us-east-1a/on-demand"]; m.Resources.MilliCPU != 2000 || m.Resources.Memory != 8<<30 {
		t.Fatalf("m5.large = %+v", m.Resources)
	}
	zones := map[string]bool{}
	for _, o := range offs {
		zones[o.Zone] = true
	}
	if len(zones) < 2 || len(offs) != 2*2*len(zones) {
		t.Fatalf("%d offerings over zones %v, want 2 types × 2 kinds × each zone", len(offs), zones)
	}
}

// TestRequirementsSelectTypes: requirements (GPU count, vCPUs, memory,
// architecture) pick among the price table's types when no type is
// listed, and filter the listed types when some are; the offerings are
// exactly the types that meet them, on-demand by default.
func TestRequirementsSelectTypes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		types []string
		req   awsprov.Requirements
		want  []string
	}{
		{"gpus and vcpus", nil, awsprov.Requirements{MinGPUs: 4, MinVCPU: 48}, []string{"g4dn.12xlarge", "g5.12xlarge", "p3.16xlarge"}},
		{"memory under a vcpu cap", nil, awsprov.Requirements{MinMemoryMiB: 32 << 10, MaxVCPU: 4}, []string{"r5.xlarge"}},
		{"architecture", nil, awsprov.Requirements{Architecture: "arm64"}, []string{"m7g.large"}},
		{"listed types filtered", []string{"m5.large", "m7g.large", "g5.xlarge"}, awsprov.Requirements{MinGPUs: 1}, []string{"g5.xlarge"}},
		{"listed types only", []string{"m5.large", "c5.large"}, awsprov.Requirements{}, []string{"c5.large", "m5.large"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newProvider(t, func(c *awsprov.Config) {
				c.InstanceTypes = tc.types
				c.Capacity = nil
				c.Requirements = tc.req
			})
			offs, err := p.Offerings(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, o := range offs {
				seen[o.Type] = true
				if o.Kind != capacity.OnDemand || o.PricePerHour <= 0 {
					t.Fatalf("offering %s: kind %s price %v", o.Name(), o.Kind, o.PricePerHour)
				}
				if o.Resources.GPUs < int64(tc.req.MinGPUs) || o.Resources.MilliCPU < int64(tc.req.MinVCPU)*1000 {
					t.Fatalf("offering %s (%+v) does not meet %+v", o.Name(), o.Resources, tc.req)
				}
			}
			got := slices.Sorted(maps.Keys(seen))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("types %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNamedLaunchTemplate: a pool that names its own launch template
// launches from it (its image and user data); a machine with its own
// bootstrap launches from a version of it that keeps its image and
// carries the machine's cloud-init.
func TestNamedLaunchTemplate(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	c := ec2Client(t, moto.URL)
	ctx := context.Background()
	name := "pool-template-" + uniqueName(t)
	if _, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: awssdk.String(name),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: awssdk.String(testImage),
			UserData: awssdk.String(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho the pool's own\n")))}}); err != nil {
		t.Fatal(err)
	}
	p, _ := newProvider(t, func(cfg *awsprov.Config) {
		cfg.LaunchTemplate, cfg.ImageID, cfg.UserData = name, "", nil
	})
	userData := func(id string) (string, string) {
		t.Helper()
		insts := instancesOf(t, c, p.Name(), id)
		if len(insts) != 1 {
			t.Fatalf("machine %s: %d instances", id, len(insts))
		}
		attr, err := c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: insts[0].InstanceId, Attribute: "userData"})
		if err != nil || attr.UserData == nil {
			t.Fatalf("user data of %s: %v", id, err)
		}
		ud, _ := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
		return awssdk.ToString(insts[0].ImageId), string(ud)
	}
	if _, err := p.Create(ctx, createReq("p", "m1", "m5.large/us-east-1a/on-demand")); err != nil {
		t.Fatal(err)
	}
	if img, ud := userData("m1"); img != testImage || ud != "#!/bin/sh\necho the pool's own\n" {
		t.Fatalf("m1: image %s, user data %q; want the template's", img, ud)
	}
	req := createReq("p", "m2", "m5.large/us-east-1a/on-demand")
	req.Bootstrap = []byte(`{"version":1,"head":"https://10.0.0.1:8000","token":"m2-only","pool":"p","machine":"m2"}`)
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	img, ud := userData("m2")
	blob, err := provider.BootScriptBlob([]byte(ud))
	if img != testImage || err != nil || string(blob) != string(req.Bootstrap) || !strings.HasPrefix(ud, "#cloud-config\n") {
		t.Fatalf("m2: image %s, user data %q (%v); want the template's image and the machine's cloud-init", img, ud, err)
	}
}

// TestUserDataInLaunch: the caller's user data (the worker bootstrap) is in
// the launch template tide creates, and in the instances it launches.
func TestUserDataInLaunch(t *testing.T) {
	p, moto := newProvider(t, nil)
	ctx := context.Background()
	if _, err := p.Create(ctx, createReq("p", "m1", "m5.large/us-east-1a/on-demand")); err != nil {
		t.Fatal(err)
	}
	c := ec2Client(t, moto.URL)
	out, err := c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: awssdk.String("tide-" + p.Name())})
	if err != nil || len(out.LaunchTemplateVersions) == 0 {
		t.Fatalf("launch template: %v, %v", out, err)
	}
	ud, _ := base64.StdEncoding.DecodeString(awssdk.ToString(out.LaunchTemplateVersions[0].LaunchTemplateData.UserData))
	if want := baseConfig(t, "").UserData; string(ud) != string(want) {
		t.Fatalf("template user data %q, want %q", ud, want)
	}
	insts := instancesOf(t, c, p.Name(), "m1")
	if len(insts) != 1 {
		t.Fatalf("%d instances", len(insts))
	}
	attr, err := c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: insts[0].InstanceId, Attribute: "userData"})
	if err != nil {
		t.Fatal(err)
	}
	if attr.UserData == nil || attr.UserData.Value == nil {
		t.Fatal("the instance has no user data")
	}
	if got, _ := base64.StdEncoding.DecodeString(*attr.UserData.Value); string(got) != string(baseConfig(t, "").UserData) {
		t.Fatalf("instance user data %q", got)
	}
}
