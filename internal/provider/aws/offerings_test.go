package aws_test

import (
	"context"
	"encoding/base64"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/tide-project/tide/internal/capacity"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
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

// TestRequirementsSelectTypes: without instance types, requirements pick
// among the price table's types by GPU count and vCPUs.
func TestRequirementsSelectTypes(t *testing.T) {
	p, _ := newProvider(t, func(c *awsprov.Config) {
		c.InstanceTypes = nil
		c.Capacity = nil
		c.Requirements = awsprov.Requirements{MinGPUs: 4, MinVCPU: 48}
	})
	offs, err := p.Offerings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, o := range offs {
		types[o.Type] = true
		if o.Resources.GPUs < 4 || o.Resources.MilliCPU < 48000 || o.Kind != capacity.OnDemand {
			t.Fatalf("offering %s (%+v) does not meet the requirements", o.Name(), o.Resources)
		}
	}
	for _, want := range []string{"g4dn.12xlarge", "g5.12xlarge", "p3.16xlarge"} {
		if !types[want] {
			t.Errorf("requirements did not select %s (got %v)", want, types)
		}
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
