package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/sdk/provider"
)

// Provider is the EC2 provider. Build it with New; it is safe for
// concurrent use.
type Provider struct {
	cfg    Config
	ec2    *ec2.Client
	sqs    *sqs.Client
	events *eventbridge.Client
	clk    clock.Clock
	log    *slog.Logger

	template        string                           // launch template id
	templateVersion string                           // its version to launch (a number)
	baseData        *types.RequestLaunchTemplateData // what a machine's own version copies
	keepVersions    atomic.Bool                      // DeleteLaunchTemplateVersions failed once: stop
	subnets         map[string]string                // zone → subnet id
	offerings       []capacity.Offering
	byName          map[string]capacity.Offering
	queueURL        string

	locks [64]sync.Mutex // per machine id (striped): one Create/Delete of an id at a time

	bmu     sync.Mutex // guards batches
	batches map[batchKey]*batchGroup

	fenceMu     sync.Mutex      // one fence load or raise at a time
	fenceLoaded map[string]bool // pools whose fence tag was read

	mu         sync.Mutex
	fences     provider.FenceTable
	launched   map[string]string    // machine id → instance id launched by this process
	deleting   map[string]string    // machine id → instance id terminated, not yet seen terminated
	gone       map[string]bool      // machine ids this process saw deleted
	bootstraps map[string][]byte    // machine id → bootstrap of its binding
	reclaim    map[string]time.Time // instance id → announced reclaim time
	machineOf  map[string]string    // instance id → machine id, of every instance view saw
}

var _ provider.Provider = (*Provider)(nil)

// Option adjusts New.
type Option func(*Provider)

// WithClock sets the clock (default the real one).
func WithClock(c clock.Clock) Option { return func(p *Provider) { p.clk = c } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// New applies defaults to cfg, validates it, loads credentials and region
// from the standard AWS chain, resolves subnets, the launch template and the
// offerings, and sets up the interruption queue when configured. It starts
// no goroutine: call Run for the background loop.
func New(ctx context.Context, cfg Config, opts ...Option) (*Provider, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, clk: clock.Real{}, log: slog.Default(),
		fenceLoaded: map[string]bool{}, batches: map[batchKey]*batchGroup{}, launched: map[string]string{}, deleting: map[string]string{}, gone: map[string]bool{},
		bootstraps: map[string][]byte{}, reclaim: map[string]time.Time{}, machineOf: map[string]string{}}
	for _, o := range opts {
		o(p)
	}
	loadOpts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryer(func() awssdk.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = time.Duration(cfg.MaxBackoff)
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if cfg.Region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(cfg.Region))
	}
	lctx, cancel := p.call(ctx)
	ac, err := awsconfig.LoadDefaultConfig(lctx, loadOpts...)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("provider aws: loading AWS configuration: %w", err)
	}
	if ac.Region == "" {
		return nil, errors.New("provider aws: region: not set (set region, AWS_REGION or a profile's region)")
	}
	p.cfg.Region = ac.Region
	if cfg.Endpoint != "" {
		ac.BaseEndpoint = awssdk.String(cfg.Endpoint)
	}
	p.ec2 = ec2.NewFromConfig(ac)
	p.sqs = sqs.NewFromConfig(ac)
	p.events = eventbridge.NewFromConfig(ac)

	if err := p.resolveSubnets(ctx); err != nil {
		return nil, err
	}
	if err := p.resolveTemplate(ctx); err != nil {
		return nil, err
	}
	if err := p.resolveOfferings(ctx); err != nil {
		return nil, err
	}
	if cfg.Interruptions != nil {
		if err := p.setupInterruptions(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// call bounds one AWS call (its retries included) by Config.CallTimeout.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(p.cfg.CallTimeout))
}

func (p *Provider) lock(id string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &p.locks[h.Sum32()%uint32(len(p.locks))]
}

// Name returns the installation name (the tide:owner tag value).
func (p *Provider) Name() string { return p.cfg.Name }

// Region returns the region the provider works in.
func (p *Provider) Region() string { return p.cfg.Region }

// Offerings lists the resolved offerings: type × zone × capacity kind.
func (p *Provider) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := slices.Clone(p.offerings)
	for i := range out {
		out[i].Resources.Extended = maps.Clone(out[i].Resources.Extended)
	}
	return out, nil
}

// clientToken derives CreateFleet's idempotency token from the machine id
// (and the installation, so two installations never collide); at most 64
// characters, as EC2 requires.
func (p *Provider) clientToken(id string) string {
	if t := p.cfg.Name + "." + id; len(t) <= 64 {
		return t
	}
	sum := sha256.Sum256([]byte(p.cfg.Name + "/" + id))
	return "tide." + hex.EncodeToString(sum[:20])
}

// Create launches one instance of the offering with CreateFleet (instant),
// after looking the machine id up by tag: an id that exists is a replay (or
// a conflict), an id whose instance was terminated is never reused.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	off, ok := p.byName[req.Offering]
	if !ok {
		return provider.Ack{}, provider.NewInvalid("offering", fmt.Sprintf("%q is not an offering of this provider", req.Offering))
	}
	for k, v := range req.Labels {
		if len(labelPrefix+k) > 128 || len(v) > maxTagValue {
			return provider.Ack{}, provider.NewInvalid("labels", fmt.Sprintf("label %q: EC2 tags allow keys of %d and values of %d characters", k, 128-len(labelPrefix), maxTagValue))
		}
	}
	if err := ctx.Err(); err != nil {
		return provider.Ack{}, err
	}
	l := p.lock(req.MachineID)
	l.Lock()
	defer l.Unlock()
	if err := p.admit(ctx, req.Pool, req.Fence); err != nil {
		return provider.Ack{}, err
	}
	insts, err := p.find(ctx, req.MachineID)
	if err != nil {
		return provider.Ack{}, err
	}
	if m, ok := p.view(req.MachineID, insts); ok {
		if m.Pool != req.Pool {
			return provider.Ack{}, provider.NewConflict(req.MachineID, m.State, fmt.Sprintf("the id belongs to pool %q", m.Pool))
		}
		if m.Offering != req.Offering {
			return provider.Ack{}, provider.NewConflict(req.MachineID, m.State, fmt.Sprintf("the machine is offering %q", m.Offering))
		}
		return provider.Ack{MachineID: req.MachineID, State: m.State, Replayed: true}, nil
	}
	p.mu.Lock()
	gone := p.gone[req.MachineID]
	p.mu.Unlock()
	if gone || len(insts) > 0 {
		return provider.Ack{}, provider.NewConflict(req.MachineID, "", "was deleted; machine ids are never reused")
	}
	inst, err := p.launch(ctx, &req, off)
	if err != nil {
		return provider.Ack{}, err
	}
	m, _ := p.view(req.MachineID, []types.Instance{inst})
	return provider.Ack{MachineID: req.MachineID, State: m.State}, nil
}

// launch runs CreateFleet (instant) for one instance of off and returns the
// instance as described right after.
func (p *Provider) launch(ctx context.Context, req *provider.CreateRequest, off capacity.Offering) (types.Instance, error) {
	if len(req.Bootstrap) == 0 && p.cfg.MaxBatch > 1 {
		return p.launchBatched(ctx, req, off)
	}
	in := p.fleetInput([]fleetSlot{{Offering: off}}, 1, off.Kind)
	if len(req.Bootstrap) > 0 {
		version, err := p.machineVersion(ctx, req)
		if err != nil {
			return types.Instance{}, err
		}
		defer p.dropVersion(ctx, version)
		in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.Version = awssdk.String(version)
	}
	in.ClientToken = awssdk.String(p.clientToken(req.MachineID))
	in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: p.launchTags(req)}}
	cctx, cancel := p.call(ctx)
	out, err := p.ec2.CreateFleet(cctx, in)
	cancel()
	if err != nil {
		return types.Instance{}, classify("CreateFleet", req.Offering, err)
	}
	var ids []string
	for _, fi := range out.Instances {
		ids = append(ids, fi.InstanceIds...)
	}
	if len(ids) == 0 {
		return types.Instance{}, fleetError(req.Offering, out.Errors)
	}
	p.mu.Lock()
	p.launched[req.MachineID] = ids[0]
	p.mu.Unlock()
	p.log.Info("aws: launched", "pool", req.Pool, "machine", req.MachineID, "offering", req.Offering, "instance", ids[0])
	if len(ids) > 1 { // asked for one; never keep more
		p.terminate(ctx, ids[1:])
	}
	insts, err := p.describeIDs(ctx, ids[:1])
	if err != nil || len(insts) == 0 {
		// Launched, not yet visible: report it pending, as EC2 does.
		return types.Instance{InstanceId: awssdk.String(ids[0]), State: &types.InstanceState{Name: types.InstanceStateNamePending},
			Tags: p.launchTags(req), LaunchTime: awssdk.Time(p.clk.Now())}, nil
	}
	inst := insts[0]
	if tagMap(inst.Tags)[tagMachine] != req.MachineID {
		// The fleet did not propagate the tags (some emulators): write them.
		cctx, cancel := p.call(ctx)
		_, err := p.ec2.CreateTags(cctx, &ec2.CreateTagsInput{Resources: ids[:1], Tags: p.launchTags(req)})
		cancel()
		if err != nil {
			return types.Instance{}, classify("CreateTags", req.Offering, err)
		}
		inst.Tags = p.launchTags(req)
	}
	return inst, nil
}

// fleetError turns CreateFleet's per-override errors into a provider error.
func fleetError(offering string, errs []types.CreateFleetError) error {
	if len(errs) == 0 {
		return provider.NewTransient(errors.New("aws CreateFleet: no instance and no error returned"), 0)
	}
	var out []error
	for _, e := range errs {
		code, msg := awssdk.ToString(e.ErrorCode), awssdk.ToString(e.ErrorMessage)
		cause := fmt.Errorf("aws CreateFleet: %s: %s", code, msg)
		if c := classifyCode(code, offering, cause); c != nil {
			return c
		}
		out = append(out, cause)
	}
	return errors.Join(out...)
}

// claim takes machine id's lock, admits the fence and reads the machine,
// which must belong to pool: the start of every call that changes one
// machine. The caller calls unlock when it is done (not on error).
func (p *Provider) claim(ctx context.Context, pool string, f provider.Fence, id string) (provider.Machine, types.Instance, func(), error) {
	l := p.lock(id)
	l.Lock()
	if err := p.admit(ctx, pool, f); err != nil {
		l.Unlock()
		return provider.Machine{}, types.Instance{}, nil, err
	}
	m, inst, err := p.owned(ctx, pool, id)
	if err != nil {
		l.Unlock()
		return provider.Machine{}, types.Instance{}, nil, err
	}
	return m, inst, l.Unlock, nil
}

// Configure records the cluster binding in tags; the worker itself joins
// with the bootstrap it got in its user data.
func (p *Provider) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	m, inst, unlock, err := p.claim(ctx, req.Pool, req.Fence, req.MachineID)
	if err != nil {
		return provider.Ack{}, err
	}
	defer unlock()
	switch m.State {
	case provider.Configuring, provider.Configured:
		if m.Cluster == req.Cluster {
			return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
		}
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, fmt.Sprintf("bound to cluster %q: drain it first", m.Cluster))
	case provider.Idle:
	default:
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "only an idle machine can be configured")
	}
	cctx, cancel := p.call(ctx)
	_, err = p.ec2.CreateTags(cctx, &ec2.CreateTagsInput{Resources: []string{awssdk.ToString(inst.InstanceId)},
		Tags: append(bindTags(req.Cluster, req.Bootstrap, p.clk.Now()), fenceTags(req.Fence)...)})
	cancel()
	if err != nil {
		return provider.Ack{}, classify("CreateTags", m.Offering, err)
	}
	p.mu.Lock()
	p.bootstraps[m.ID] = slices.Clone(req.Bootstrap)
	p.mu.Unlock()
	return provider.Ack{MachineID: m.ID, State: provider.Configured}, nil
}

// Drain removes the binding tags; the machine is Idle again.
func (p *Provider) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	m, inst, unlock, err := p.claim(ctx, req.Pool, req.Fence, req.MachineID)
	if err != nil {
		return provider.Ack{}, err
	}
	defer unlock()
	switch m.State {
	case provider.Configuring, provider.Configured:
	case provider.Speculative, provider.Creating, provider.Idle, provider.Draining:
		return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
	default:
		return provider.Ack{}, provider.NewConflict(m.ID, m.State, "delete it instead")
	}
	cctx, cancel := p.call(ctx)
	_, err = p.ec2.DeleteTags(cctx, &ec2.DeleteTagsInput{Resources: []string{awssdk.ToString(inst.InstanceId)},
		Tags: []types.Tag{{Key: awssdk.String(tagCluster)}, {Key: awssdk.String(tagBound)}, {Key: awssdk.String(tagBootstrap)}}})
	cancel()
	if err != nil {
		return provider.Ack{}, classify("DeleteTags", m.Offering, err)
	}
	p.mu.Lock()
	delete(p.bootstraps, m.ID)
	p.mu.Unlock()
	return provider.Ack{MachineID: m.ID, State: provider.Idle}, nil
}

// Delete terminates the machine's instances; it stays Deleting until Sync
// sees them terminated.
func (p *Provider) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return provider.Ack{}, err
	}
	l := p.lock(req.MachineID)
	l.Lock()
	defer l.Unlock()
	if err := p.admit(ctx, req.Pool, req.Fence); err != nil {
		return provider.Ack{}, err
	}
	insts, err := p.find(ctx, req.MachineID)
	if err != nil {
		return provider.Ack{}, err
	}
	m, ok := p.view(req.MachineID, insts)
	if !ok || m.Pool != req.Pool {
		return provider.Ack{}, provider.NewNotFound(req.MachineID)
	}
	p.mu.Lock()
	_, waiting := p.deleting[m.ID]
	p.mu.Unlock()
	if waiting {
		return provider.Ack{MachineID: m.ID, State: provider.Deleting, Replayed: true}, nil
	}
	var live []string
	for _, in := range insts {
		if !terminated(in) {
			live = append(live, awssdk.ToString(in.InstanceId))
		}
	}
	if len(live) == 0 {
		return provider.Ack{}, provider.NewNotFound(req.MachineID)
	}
	if err := p.terminate(ctx, live); err != nil {
		return provider.Ack{}, err
	}
	p.mu.Lock()
	p.deleting[m.ID] = live[0]
	delete(p.bootstraps, m.ID)
	p.mu.Unlock()
	p.log.Info("aws: terminating", "pool", req.Pool, "machine", m.ID, "instances", live)
	return provider.Ack{MachineID: m.ID, State: provider.Deleting, Replayed: m.State == provider.Deleting}, nil
}

func (p *Provider) terminate(ctx context.Context, ids []string) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := p.ec2.TerminateInstances(cctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil && !isCode(err, "InvalidInstanceID.NotFound") {
		return classify("TerminateInstances", "", err)
	}
	return nil
}

// Get returns one machine, read by tag.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	insts, err := p.find(ctx, id)
	if err != nil {
		return provider.Machine{}, err
	}
	m, ok := p.view(id, insts)
	if !ok {
		return provider.Machine{}, provider.NewNotFound(id)
	}
	return m, nil
}

// List reads every instance tagged for this installation (and the pool,
// when the filter names one), sorted by machine id. EC2 filters on one
// tag (the pool's, else the installation's) and the other is checked
// here: each tag filter costs the emulator a pass over every tag of the
// account per instance (docs/benchmarks.md), and EC2 nothing more.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	filter := types.Filter{Name: awssdk.String("tag:" + tagOwner), Values: []string{p.cfg.Name}}
	if f.Pool != "" {
		filter = types.Filter{Name: awssdk.String("tag:" + tagPool), Values: []string{f.Pool}}
	}
	all, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{filter}, MaxResults: awssdk.Int32(1000)})
	if err != nil {
		return nil, err
	}
	insts := all[:0]
	for _, in := range p.ours(all) {
		if f.Pool == "" || tagMap(in.Tags)[tagPool] == f.Pool {
			insts = append(insts, in)
		}
	}
	p.observeInstances(insts)
	pairBatches(insts)
	byID := map[string][]types.Instance{}
	for _, in := range insts {
		id := tagMap(in.Tags)[tagMachine]
		if id != "" {
			byID[id] = append(byID[id], in)
		}
	}
	out := []provider.Machine{}
	for id, group := range byID {
		if m, ok := p.view(id, group); ok && f.Matches(&m) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ours keeps the instances of this installation (tide:owner), in place:
// EC2 filters on one tag and the owner is checked here (see List).
func (p *Provider) ours(insts []types.Instance) []types.Instance {
	out := insts[:0]
	for _, in := range insts {
		if tagMap(in.Tags)[tagOwner] == p.cfg.Name {
			out = append(out, in)
		}
	}
	return out
}

// owned finds a machine of the pool; NotFound for another pool's machine.
func (p *Provider) owned(ctx context.Context, pool, id string) (provider.Machine, types.Instance, error) {
	insts, err := p.find(ctx, id)
	if err != nil {
		return provider.Machine{}, types.Instance{}, err
	}
	m, ok := p.view(id, insts)
	if !ok || m.Pool != pool {
		return provider.Machine{}, types.Instance{}, provider.NewNotFound(id)
	}
	return m, *pick(insts), nil
}

// find returns every instance (terminated ones included) tagged with the
// machine id, or the instance this process launched for it when the tag
// search does not see it yet (EC2's reads are eventually consistent).
func (p *Provider) find(ctx context.Context, id string) ([]types.Instance, error) {
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:" + tagMachine), Values: []string{id}},
	}})
	insts = p.ours(insts)
	if err != nil || len(insts) > 0 {
		p.observeInstances(insts)
		return insts, err
	}
	p.mu.Lock()
	iid := p.launched[id]
	p.mu.Unlock()
	if iid == "" {
		return p.findBatched(ctx, id)
	}
	return p.describeIDs(ctx, []string{iid})
}

func (p *Provider) describeIDs(ctx context.Context, ids []string) ([]types.Instance, error) {
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if isCode(err, "InvalidInstanceID.NotFound") {
		return nil, nil
	}
	return insts, err
}

// describe pages through DescribeInstances, each page under its deadline.
func (p *Provider) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]types.Instance, error) {
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(p.ec2, in)
	for pages.HasMorePages() {
		cctx, cancel := p.call(ctx)
		page, err := pages.NextPage(cctx)
		cancel()
		if err != nil {
			if isCode(err, "InvalidInstanceID.NotFound") {
				return nil, err
			}
			return nil, classify("DescribeInstances", "", err)
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

func terminated(in types.Instance) bool {
	return in.State != nil && in.State.Name == types.InstanceStateNameTerminated
}

// pick chooses the instance that stands for a machine: the earliest
// launched live one, or else any. It returns nil for none.
func pick(insts []types.Instance) *types.Instance {
	var best *types.Instance
	for i := range insts {
		in := &insts[i]
		switch {
		case best == nil:
			best = in
		case terminated(*best) && !terminated(*in):
			best = in
		case terminated(*best) == terminated(*in) && awssdk.ToTime(in.LaunchTime).Before(awssdk.ToTime(best.LaunchTime)):
			best = in
		}
	}
	return best
}

// view maps a machine's instances to the machine model; false when the
// machine is gone.
func (p *Provider) view(id string, insts []types.Instance) (provider.Machine, bool) {
	in := pick(insts)
	if in == nil {
		return provider.Machine{}, false
	}
	p.mu.Lock()
	_, deleting := p.deleting[id]
	bootstrap := slices.Clone(p.bootstraps[id])
	reclaimAt := p.reclaim[awssdk.ToString(in.InstanceId)]
	if iid := awssdk.ToString(in.InstanceId); iid != "" {
		p.machineOf[iid] = id
	}
	p.mu.Unlock()
	if terminated(*in) && !deleting {
		return provider.Machine{}, false
	}
	tags := tagMap(in.Tags)
	m := provider.Machine{
		ID:        id,
		Pool:      tags[tagPool],
		Offering:  tags[tagOffering],
		Host:      host(in),
		Labels:    labelsOf(tags),
		CreatedAt: awssdk.ToTime(in.LaunchTime),
		UpdatedAt: awssdk.ToTime(in.LaunchTime),
		ReclaimAt: reclaimAt,
	}
	state := types.InstanceStateNamePending
	if in.State != nil {
		state = in.State.Name
	}
	switch {
	case deleting || state == types.InstanceStateNameShuttingDown || state == types.InstanceStateNameTerminated:
		m.State = provider.Deleting
	case state == types.InstanceStateNamePending:
		m.State = provider.Creating
	case state == types.InstanceStateNameRunning:
		m.State = provider.Idle
		if c := tags[tagCluster]; c != "" {
			m.State = provider.Configured
			m.Cluster = c
			if bootstrap == nil {
				bootstrap, _ = base64.StdEncoding.DecodeString(tags[tagBootstrap])
			}
			m.Bootstrap = bootstrap
			if at, err := time.Parse(time.RFC3339Nano, tags[tagBound]); err == nil {
				m.UpdatedAt = at
			}
		}
	default: // stopping, stopped
		m.State = provider.Failed
		m.Reason = fmt.Sprintf("instance %s is %s", awssdk.ToString(in.InstanceId), state)
	}
	if m.Host == "" {
		m.Cluster, m.Bootstrap = "", nil
		if m.State == provider.Idle || m.State == provider.Configured {
			m.State = provider.Creating // no address yet
		}
	}
	return m, true
}

// host is the address a worker is reached at: the private IP, else the
// private DNS name, else the public IP.
func host(in *types.Instance) string {
	for _, h := range []*string{in.PrivateIpAddress, in.PrivateDnsName, in.PublicIpAddress} {
		if s := awssdk.ToString(h); s != "" {
			return s
		}
	}
	return ""
}

// Sync finishes deletions (a machine leaves Deleting once its instance is
// terminated or gone) and reads the interruption queue. Run calls it every
// SyncInterval; tests call it to settle.
func (p *Provider) Sync(ctx context.Context) error {
	p.mu.Lock()
	waiting := maps.Clone(p.deleting)
	p.mu.Unlock()
	var errs []error
	if len(waiting) > 0 {
		var ids []string
		for _, iid := range waiting {
			ids = append(ids, iid)
		}
		insts, err := p.describeIDs(ctx, ids)
		if err != nil {
			errs = append(errs, err)
		} else {
			alive := map[string]bool{}
			for _, in := range insts {
				if !terminated(in) {
					alive[awssdk.ToString(in.InstanceId)] = true
				}
			}
			p.mu.Lock()
			for id, iid := range waiting {
				if !alive[iid] {
					delete(p.deleting, id)
					delete(p.launched, id)
					delete(p.reclaim, iid)
					p.gone[id] = true
				}
			}
			p.mu.Unlock()
		}
	}
	if p.queueURL != "" {
		if err := p.pollInterruptions(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run calls Sync every SyncInterval until ctx ends; errors are logged.
func (p *Provider) Run(ctx context.Context) {
	t := p.clk.NewTicker(time.Duration(p.cfg.SyncInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := p.Sync(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("aws: sync", "err", err)
			}
		}
	}
}

// MachineOfProviderID returns the machine whose instance a Node's
// spec.providerID names, in the form the AWS cloud controller manager and
// nodeadm (EKS) give it, aws:///<zone>/<instance id>, among the instances
// this provider has reported (Get, List, Create): how tide kube finds the
// Node of a machine whose Node is named after its instance (an EKS Node is
// named after the instance's private DNS name).
func (p *Provider) MachineOfProviderID(providerID string) (string, bool) {
	iid, ok := InstanceOfProviderID(providerID)
	if !ok {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.machineOf[iid]
	return id, ok
}

// InstanceOfProviderID returns the instance id of an EC2 Node's
// providerID, aws:///<zone>/<instance id> (or aws://<zone>/<instance id>).
func InstanceOfProviderID(providerID string) (string, bool) {
	rest, ok := strings.CutPrefix(providerID, "aws://")
	if !ok {
		return "", false
	}
	iid := rest[strings.LastIndexByte(rest, '/')+1:]
	if !strings.HasPrefix(iid, "i-") || len(iid) < 3 {
		return "", false
	}
	return iid, true
}

// ProviderIDOf is the providerID an EC2 Node of instance id in zone gets
// from the AWS cloud controller manager or nodeadm: aws:///<zone>/<id>.
func ProviderIDOf(zone, instanceID string) string { return "aws:///" + zone + "/" + instanceID }
