package aws_test

import (
	"context"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/sdk/provider"
)

// TestFencesSurviveRestart: a restarted provider (a new process, no memory)
// refuses calls from a lower epoch than the pool has seen, as the local and
// kwok providers do from their state files: it reads the pool's fence from
// the launch template's tag before the first call, and from the tide:epoch
// tags of the instances List shows when that tag is gone. Nothing is
// launched for a refused Create.
func TestFencesSurviveRestart(t *testing.T) {
	p, moto := newProvider(t, nil)
	ctx := context.Background()
	cfg := baseConfig(t, moto.URL)
	cfg.Name = p.Name()
	restart := func() *awsprov.Provider {
		t.Helper()
		np, err := awsprov.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return np
	}
	old, cur := provider.Fence{Controller: "a", Epoch: 1}, provider.Fence{Controller: "b", Epoch: 2}
	off := "m5.large/us-east-1a/on-demand"
	for _, r := range []provider.CreateRequest{
		{Fence: old, Pool: "gpu", MachineID: "gpu-1", Offering: off},
		{Fence: cur, Pool: "gpu", MachineID: "gpu-2", Offering: off},
	} {
		if _, err := p.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	c := ec2Client(t, moto.URL)
	refused := func(p *awsprov.Provider, what string) {
		t.Helper()
		if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: old, Pool: "gpu", MachineID: "gpu-1"}); !provider.IsStaleFence(err) {
			t.Fatalf("%s: Delete from epoch 1 = %v, want StaleFence", what, err)
		}
		if _, err := p.Create(ctx, provider.CreateRequest{Fence: old, Pool: "gpu", MachineID: "gpu-3", Offering: off}); !provider.IsStaleFence(err) {
			t.Fatalf("%s: Create from epoch 1 = %v, want StaleFence", what, err)
		}
		if n := len(instancesOf(t, c, p.Name(), "gpu-3")); n != 0 {
			t.Fatalf("%s: a refused Create launched %d instances", what, n)
		}
	}
	refused(restart(), "after a restart")

	// Without the template's tag, the instances' tags tell (List).
	tmpl, err := c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{"tide-" + p.Name()}})
	if err != nil || len(tmpl.LaunchTemplates) != 1 {
		t.Fatalf("template: %v", err)
	}
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{*tmpl.LaunchTemplates[0].LaunchTemplateId},
		Tags: []types.Tag{{Key: awssdk.String("tide:fence:gpu")}}}); err != nil {
		t.Fatal(err)
	}
	np := restart()
	if ms, err := np.List(ctx, provider.Filter{Pool: "gpu"}); err != nil || len(ms) != 2 {
		t.Fatalf("List = %d machines, %v", len(ms), err)
	}
	refused(np, "after a restart and a List, without the template tag")
	if _, err := np.Delete(ctx, provider.DeleteRequest{Fence: cur, Pool: "gpu", MachineID: "gpu-1"}); err != nil {
		t.Fatalf("Delete from the current epoch: %v", err)
	}

	// A pool with no instance at all keeps its fence in the template tag.
	if _, err := np.Delete(ctx, provider.DeleteRequest{Fence: provider.Fence{Controller: "c", Epoch: 7}, Pool: "empty", MachineID: "empty-1"}); !provider.IsNotFound(err) {
		t.Fatalf("Delete of nothing = %v, want NotFound", err)
	}
	_, err = restart().Create(ctx, provider.CreateRequest{Fence: provider.Fence{Controller: "b", Epoch: 6}, Pool: "empty", MachineID: "empty-2", Offering: off})
	if !provider.IsStaleFence(err) {
		t.Fatalf("Create from epoch 6 after epoch 7 and a restart = %v, want StaleFence", err)
	}
}
