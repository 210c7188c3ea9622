package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/sdk/provider"
)

// tagBatch lists the machine ids of a batched launch, ",id1,id2,": every
// instance of the batch carries it from CreateFleet on, so an instance
// whose own tide:machine-id tag was not written yet (a crash right after
// CreateFleet) is still found by its machine id and adopted (pairBatches).
const tagBatch = "tide:batch"

// Batching. Creates that launch the same way (pool, offering, fence, and no
// per-machine user data) while a launch of the same kind is in flight wait
// and go together in the next CreateFleet, up to Config.MaxBatch instances
// whose ids fit the tide:batch tag: a burst makes a few fleet calls, not
// one per machine, and a lone Create waits for nothing. The instances are
// tagged with what they share at launch and with their own machine id
// right after (CreateTags, one per instance), the way Karpenter tags its
// NodeClaims. A machine with its own bootstrap launches alone, from its own
// launch template version: its user data holds a credential no other
// instance may read.

type batchKey struct {
	pool, offering, controller string
	epoch                      uint64
}

type batchReq struct {
	req  *provider.CreateRequest
	done chan batchResult
}

type batchResult struct {
	inst types.Instance
	err  error
}

type batchGroup struct {
	running bool
	queue   []*batchReq
}

// launchBatched queues the Create in its batch and waits for the launch.
// It does not give up on ctx while queued: the caller holds the machine
// id's lock, and a launch it walked away from could race its retry.
func (p *Provider) launchBatched(ctx context.Context, req *provider.CreateRequest, off capacity.Offering) (types.Instance, error) {
	key := batchKey{pool: req.Pool, offering: req.Offering, controller: req.Fence.Controller, epoch: req.Fence.Epoch}
	br := &batchReq{req: req, done: make(chan batchResult, 1)}
	p.bmu.Lock()
	g := p.batches[key]
	if g == nil {
		g = &batchGroup{}
		p.batches[key] = g
	}
	g.queue = append(g.queue, br)
	if !g.running {
		g.running = true
		go p.runBatches(context.WithoutCancel(ctx), key, off)
	}
	p.bmu.Unlock()
	r := <-br.done
	return r.inst, r.err
}

// runBatches launches the key's queue, a batch at a time, until it is empty.
func (p *Provider) runBatches(ctx context.Context, key batchKey, off capacity.Offering) {
	for {
		p.bmu.Lock()
		g := p.batches[key]
		n, width := 0, 1
		for n < len(g.queue) && n < p.cfg.MaxBatch && width+len(g.queue[n].req.MachineID)+1 <= maxTagValue {
			width += len(g.queue[n].req.MachineID) + 1
			n++
		}
		batch := slices.Clone(g.queue[:n])
		g.queue = g.queue[n:]
		if n == 0 {
			delete(p.batches, key)
			p.bmu.Unlock()
			return
		}
		p.bmu.Unlock()
		p.launchGroup(ctx, off, batch)
	}
}

// launchGroup launches one batch with one CreateFleet and answers each
// request: its instance, or the fleet's error for those it could not fill.
func (p *Provider) launchGroup(ctx context.Context, off capacity.Offering, batch []*batchReq) {
	first := batch[0].req
	ids := make([]string, len(batch))
	for i, b := range batch {
		ids[i] = b.req.MachineID
	}
	list := "," + strings.Join(ids, ",") + ","
	sum := sha256.Sum256([]byte(p.cfg.Name + "/" + first.Pool + "/" + list))
	in := p.fleetInput([]fleetSlot{{Offering: off}}, int32(len(batch)), off.Kind)
	in.ClientToken = awssdk.String("tide.b." + hex.EncodeToString(sum[:24]))
	in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{
		tag(tagOwner, p.cfg.Name), tag(tagPool, first.Pool), tag(tagOffering, first.Offering),
		tag(tagController, first.Fence.Controller), tag(tagEpoch, strconv.FormatUint(first.Fence.Epoch, 10)), tag(tagBatch, list),
	}}}
	fail := func(reqs []*batchReq, err error) {
		for _, b := range reqs {
			b.done <- batchResult{err: err}
		}
	}
	cctx, cancel := p.call(ctx)
	out, err := p.ec2.CreateFleet(cctx, in)
	cancel()
	if err != nil {
		fail(batch, classify("CreateFleet", first.Offering, err))
		return
	}
	var iids []string
	for _, fi := range out.Instances {
		iids = append(iids, fi.InstanceIds...)
	}
	slices.Sort(iids)
	if len(iids) > len(batch) { // never keep more than asked
		p.terminate(ctx, iids[len(batch):])
		iids = iids[:len(batch)]
	}
	if len(iids) < len(batch) {
		fail(batch[len(iids):], fleetError(first.Offering, out.Errors))
		batch = batch[:len(iids)]
	}
	if len(iids) == 0 {
		return
	}
	p.mu.Lock()
	for i, b := range batch {
		p.launched[b.req.MachineID] = iids[i]
	}
	p.mu.Unlock()
	p.log.Info("aws: launched a batch", "pool", first.Pool, "offering", first.Offering, "machines", ids[:len(iids)], "instances", iids)
	insts, _ := p.describeIDs(ctx, iids)
	byID := map[string]types.Instance{}
	for _, in := range insts {
		byID[awssdk.ToString(in.InstanceId)] = in
	}
	for i, b := range batch {
		tags := p.launchTags(b.req)
		cctx, cancel := p.call(ctx)
		_, err := p.ec2.CreateTags(cctx, &ec2.CreateTagsInput{Resources: []string{iids[i]}, Tags: tags})
		cancel()
		if err != nil {
			// Launched, not named: a retried Create finds it by tide:batch.
			b.done <- batchResult{err: classify("CreateTags", b.req.Offering, err)}
			continue
		}
		inst, ok := byID[iids[i]]
		if !ok {
			inst = types.Instance{InstanceId: awssdk.String(iids[i]), State: &types.InstanceState{Name: types.InstanceStateNamePending},
				LaunchTime: awssdk.Time(p.clk.Now())}
		}
		inst.Tags = append(slices.Clone(in.TagSpecifications[0].Tags), tags...)
		b.done <- batchResult{inst: inst}
	}
}

// pairBatches gives the instances of a batch that do not carry their own
// tide:machine-id yet (a crash between CreateFleet and CreateTags) the ids
// of the batch that no instance in insts carries, in the batch's order
// and instance id order, so they are seen, adopted and deleted like any
// other; it reports the instances it named.
func pairBatches(insts []types.Instance) []int {
	tagged := map[string]bool{}
	groups := map[string][]int{}
	for i := range insts {
		tags := tagMap(insts[i].Tags)
		if id := tags[tagMachine]; id != "" {
			tagged[id] = true
		} else if b := tags[tagBatch]; b != "" {
			groups[b] = append(groups[b], i)
		}
	}
	var named []int
	for list, idx := range groups {
		slices.SortFunc(idx, func(a, b int) int {
			return strings.Compare(awssdk.ToString(insts[a].InstanceId), awssdk.ToString(insts[b].InstanceId))
		})
		for _, id := range strings.Split(strings.Trim(list, ","), ",") {
			if len(idx) == 0 {
				break
			}
			if id == "" || tagged[id] {
				continue
			}
			tagged[id] = true
			insts[idx[0]].Tags = append(insts[idx[0]].Tags, tag(tagMachine, id))
			named = append(named, idx[0])
			idx = idx[1:]
		}
	}
	return named
}

// findBatched looks a machine id up in the tide:batch tags: the instances
// of the batches that listed it, paired (pairBatches); it returns the
// machine's instances and writes their tide:machine-id (best effort).
func (p *Provider) findBatched(ctx context.Context, id string) ([]types.Instance, error) {
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + tagBatch), Values: []string{"*," + id + ",*"}},
	}})
	insts = p.ours(insts)
	if err != nil || len(insts) == 0 {
		return nil, err
	}
	named := pairBatches(insts)
	var out []types.Instance
	for _, in := range insts {
		if tagMap(in.Tags)[tagMachine] == id {
			out = append(out, in)
		}
	}
	for _, i := range named {
		if tagMap(insts[i].Tags)[tagMachine] != id {
			continue
		}
		cctx, cancel := p.call(ctx)
		_, err := p.ec2.CreateTags(cctx, &ec2.CreateTagsInput{Resources: []string{awssdk.ToString(insts[i].InstanceId)},
			Tags: []types.Tag{tag(tagMachine, id), tag(nameTag, "tide-"+tagMap(insts[i].Tags)[tagPool]+"-"+id)}})
		cancel()
		if err != nil {
			p.log.Warn("aws: naming an instance of a batch", "machine", id, "instance", awssdk.ToString(insts[i].InstanceId), "err", err)
		}
	}
	return out, nil
}
