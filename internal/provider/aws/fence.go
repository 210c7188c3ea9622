package aws

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/sdk/provider"
)

// tagFencePrefix + pool is the launch template tag that records the pool's
// highest fence, "EPOCH/CONTROLLER": a restarted provider reads it before
// it admits the pool's first call, so a controller of a lower epoch stays
// fenced out across restarts, even of a pool that has no instance left.
const tagFencePrefix = "tide:fence:"

// admit checks a mutating call's fence against the pool's highest, read
// from EC2 on the pool's first call in this process (the template's fence
// tag, raised by the tide:epoch tags of the instances List and Get see). A
// call that raises the epoch is recorded on the template before it is
// admitted; when that write fails the call fails (Transient) and nothing
// changed.
func (p *Provider) admit(ctx context.Context, pool string, f provider.Fence) error {
	p.fenceMu.Lock()
	defer p.fenceMu.Unlock()
	if !p.fenceLoaded[pool] {
		if err := p.loadFence(ctx, pool); err != nil {
			return err
		}
		p.fenceLoaded[pool] = true
	}
	p.mu.Lock()
	cur, had := p.fences.Highest(pool)
	p.mu.Unlock()
	if had && (f.Epoch < cur.Epoch || f.Epoch == cur.Epoch && f.Controller != cur.Controller) {
		return provider.NewStaleFence(pool, f, cur)
	}
	if !had || f.Epoch > cur.Epoch {
		cctx, cancel := p.call(ctx)
		_, err := p.ec2.CreateTags(cctx, &ec2.CreateTagsInput{Resources: []string{p.template},
			Tags: []types.Tag{tag(tagFencePrefix+pool, strconv.FormatUint(f.Epoch, 10)+"/"+f.Controller)}})
		cancel()
		if err != nil {
			return classify("CreateTags", "", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fences.Admit(pool, f)
}

// loadFence reads the pool's fence tag from the launch template.
func (p *Provider) loadFence(ctx context.Context, pool string) error {
	cctx, cancel := p.call(ctx)
	out, err := p.ec2.DescribeTags(cctx, &ec2.DescribeTagsInput{Filters: []types.Filter{
		{Name: awssdk.String("resource-id"), Values: []string{p.template}},
		{Name: awssdk.String("key"), Values: []string{tagFencePrefix + pool}},
	}})
	cancel()
	if err != nil {
		return classify("DescribeTags", "", err)
	}
	for _, t := range out.Tags {
		if f, ok := parseFence(awssdk.ToString(t.Value)); ok {
			p.observeFence(pool, f)
		}
	}
	return nil
}

// parseFence reads "EPOCH/CONTROLLER".
func parseFence(s string) (provider.Fence, bool) {
	e, c, ok := strings.Cut(s, "/")
	epoch, err := strconv.ParseUint(e, 10, 64)
	if !ok || err != nil || epoch == 0 || c == "" {
		return provider.Fence{}, false
	}
	return provider.Fence{Controller: c, Epoch: epoch}, true
}

// observeFence raises the pool's highest fence to f when f is higher (a
// fence seen in EC2: the template's tag, an instance's tide:epoch).
func (p *Provider) observeFence(pool string, f provider.Fence) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.fences.Admit(pool, f) // a lower or rival fence changes nothing
}

// observeInstances raises the fences of the pools of insts to the fence
// each instance was launched or last configured under.
func (p *Provider) observeInstances(insts []types.Instance) {
	for _, in := range insts {
		tags := tagMap(in.Tags)
		if pool := tags[tagPool]; pool != "" {
			if f, ok := parseFence(tags[tagEpoch] + "/" + tags[tagController]); ok {
				p.observeFence(pool, f)
			}
		}
	}
}

// fenceTags record the fence of a call on an instance.
func fenceTags(f provider.Fence) []types.Tag {
	return []types.Tag{tag(tagController, f.Controller), tag(tagEpoch, fmt.Sprint(f.Epoch))}
}
