// Package operator is the loop of `tide kube`: it reads the cluster's
// NodePools, Nodes and Pods (from controller-runtime's informer cache), turns
// them into each pool's pressure report (internal/kube/demand), and lets the
// very policies (internal/policy, through internal/autoscale) and pool
// controller (internal/controller, with the reconciler of internal/reconcile)
// that `tide head` runs decide and act:
//
//	informers ─► demand.Compute ─► autoscale.Pool ─► controller.Controller ─► kwok provider (Nodes)
//	                                  (policy)          (reconciler)          workload (cordon, evict)
//	                                                       │
//	           deletion-candidate taints ◄─ marks ─────────┘
//
// Each NodePool is one pool: its journal lives in a ConfigMap
// (internal/kube/journal), so a replica that takes the leader Lease over
// adopts what its predecessor created and fences it out. The operator mirrors
// the reconciler's deletion marks (seed 001) as a NoSchedule taint whose value
// is the mark's Unix time, writes each NodePool's status subresource, and
// records events on NodePools, pending pods and marked nodes.
package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/autoscale"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	kubejournal "github.com/tide-project/tide/internal/kube/journal"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kwok"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/kube/workload"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// GVK of the NodePool custom resource and its list.
var (
	NodePoolGVK     = schema.GroupVersionKind{Group: nodepool.Group, Version: nodepool.Version, Kind: nodepool.Kind}
	NodePoolListGVK = schema.GroupVersionKind{Group: nodepool.Group, Version: nodepool.Version, Kind: nodepool.Kind + "List"}
)

// API is what the operator writes through (kubeapi.Clientset implements it):
// the kwok provider's Nodes and state, the journal's ConfigMaps, the
// workload's cordons and evictions.
type API interface {
	kwok.API
	workload.API
}

// CreateConcurrency is how many provider Creates a pool keeps in flight
// during one Provision (a burst of pending pods): their records are
// journaled in one ConfigMap write first, so a failover mid-burst still
// never creates a Node twice.
const CreateConcurrency = 32

// Recorder records Kubernetes events (record.EventRecorder's method).
type Recorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// Config configures an Operator.
type Config struct {
	// Client reads NodePools, Nodes and Pods (a cached client in `tide
	// kube`) and writes NodePool status.
	Client client.Client
	// API carries out the writes of providers, journals and workloads.
	API API
	// Recorder records events (nil: none).
	Recorder Recorder
	// Namespace holds the journals and the kwok provider's state.
	Namespace string
	// Identity names this replica in fences and conditions.
	Identity string
	// Interval is the period of a pass when nothing changes (default 5s);
	// a pod or node change triggers a pass after Batch (default 100ms).
	Interval, Batch time.Duration
	// Clock is the time the policies and the reconciler see (default real).
	Clock clock.Clock
	// Logger (default discard).
	Logger *slog.Logger
	// Metrics is the registry of the operator's and the pool controllers'
	// metrics (nil: none).
	Metrics prometheus.Registerer
	// Pools, when not empty, limits the operator to the NodePools named
	// (several operators may then share a cluster, e.g. in tests).
	Pools []string
	// Kube mints and revokes the join credentials of machines of
	// providers other than kwok (nil: such pools cannot join Nodes).
	// Those providers are built as `tide head` builds them
	// (internal/provider/build).
	Kube kubernetes.Interface
	// Join says how those machines join (join.go).
	Join NodeJoin
	// Booking is how long capacity found or bought for a
	// ProvisioningRequest stays booked for its pods (0:
	// provreq.BookingTime).
	Booking time.Duration
}

// Operator runs every NodePool; see the package doc.
type Operator struct {
	cfg     Config
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics
	runners map[string]*runner // written by the passes under mu
	// finished counts the pods that ended on each pool's Nodes (the
	// passes only).
	finished finishedPods
	poke     chan struct{}
	// unmatched remembers the last event message per unmatched pod.
	unmatched map[types.UID]string
	// unmodelled remembers the last NotModelled event message per pod.
	unmodelled map[types.UID]string
	// provreqForbidden: listing ProvisioningRequests was refused (said once).
	provreqForbidden bool
	// consumerMsg remembers the last event message per pod consuming a
	// ProvisioningRequest.
	consumerMsg map[types.UID]string

	mu sync.Mutex
	// seen is when each pod was first seen unschedulable (by the informer
	// handler or a pass), while it waits; sampled once a provider Create
	// followed.
	seen map[types.UID]*seenPod
	// latencies are the Unschedulable → provider Create samples (seconds).
	latencies []float64
	// claimsVersion is the resource.k8s.io version DRA claims were last
	// read in ("" when not read, or when they could not be).
	claimsVersion string
	passes        uint64
}

// New checks cfg and returns an operator.
func New(cfg Config) (*Operator, error) {
	if cfg.Client == nil || cfg.API == nil {
		return nil, errors.New("operator: Client and API must be set")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Identity == "" {
		cfg.Identity = "tide-kube"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Operator{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, metrics: m, runners: map[string]*runner{},
		poke: make(chan struct{}, 1), unmatched: map[types.UID]string{}, unmodelled: map[types.UID]string{}, seen: map[types.UID]*seenPod{},
		consumerMsg: map[types.UID]string{}}, nil
}

// Poke asks for a pass soon (after the batching delay). Safe for concurrent use.
func (o *Operator) Poke() {
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

// ObservePod is the pod informer's handler: it stamps when a pod is first
// seen unschedulable and pokes the loop. Safe for concurrent use.
func (o *Operator) ObservePod(pod *corev1.Pod) {
	if demand.Unschedulable(pod) {
		o.mu.Lock()
		if _, ok := o.seen[pod.UID]; !ok {
			o.seen[pod.UID] = &seenPod{at: time.Now()}
		}
		o.mu.Unlock()
	}
	o.Poke()
}

// Start runs passes until ctx ends: on every poke (after Batch, so a burst
// of pod changes is one pass) and every Interval.
func (o *Operator) Start(ctx context.Context) error {
	t := o.clk.NewTicker(o.cfg.Interval)
	defer t.Stop()
	defer o.Close()
	for {
		if err := o.Pass(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("pass failed; retried", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-o.poke:
			b := o.clk.NewTimer(o.cfg.Batch)
			select {
			case <-ctx.Done():
				b.Stop()
				return nil
			case <-b.C():
			}
		}
	}
}

// Close releases the pools' providers (the local provider's root, a
// plugin's process: their machines keep running for the next holder on
// this host to adopt). Start calls it
// when it returns; a pass-driven caller calls it when done.
func (o *Operator) Close() {
	for _, r := range o.runners {
		if r.close != nil {
			r.close()
			r.close = nil
		}
	}
}

// Latencies returns the Unschedulable → provider Create samples so far, in
// seconds (for benchmarks).
func (o *Operator) Latencies() []float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.latencies)
}

// Passes returns how many passes have run.
func (o *Operator) Passes() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.passes
}

// ClaimsVersion is the resource.k8s.io version the last pass that needed
// DRA claims read them in ("" when none did, or they could not be read),
// for tests.
func (o *Operator) ClaimsVersion() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.claimsVersion
}

// PoolStatus is a pool's controller status, for tests and benchmarks.
// Safe for concurrent use with the passes.
func (o *Operator) PoolStatus(name string) (controller.Status, bool) {
	o.mu.Lock()
	r := o.runners[name]
	o.mu.Unlock()
	if r == nil || r.ctl == nil {
		return controller.Status{}, false
	}
	return r.ctl.Status(), true
}

// Pass runs once: read the cluster, compute demand, decide and act for
// every NodePool, mirror marks as taints, write statuses and events.
func (o *Operator) Pass(ctx context.Context) error {
	start := time.Now()
	defer func() {
		o.metrics.observeLoop(time.Since(start))
		o.mu.Lock()
		o.passes++
		o.mu.Unlock()
	}()
	now := o.clk.Now()
	var npl unstructured.UnstructuredList
	npl.SetGroupVersionKind(NodePoolListGVK)
	if err := o.cfg.Client.List(ctx, &npl); err != nil {
		return fmt.Errorf("list NodePools: %w", err)
	}
	var nl corev1.NodeList
	if err := o.cfg.Client.List(ctx, &nl); err != nil {
		return fmt.Errorf("list Nodes: %w", err)
	}
	var pl corev1.PodList
	if err := o.cfg.Client.List(ctx, &pl); err != nil {
		return fmt.Errorf("list Pods: %w", err)
	}
	// Runners: one per NodePool, rebuilt when its spec changes.
	present := map[string]bool{}
	for i := range npl.Items {
		np := &npl.Items[i]
		name := np.GetName()
		if len(o.cfg.Pools) > 0 && !slices.Contains(o.cfg.Pools, name) {
			continue
		}
		if np.GetDeletionTimestamp() != nil && !slices.Contains(np.GetFinalizers(), Finalizer) {
			continue // going, and tide has nothing left to do for it
		}
		present[name] = true
		spec, _ := json.Marshal(np.Object["spec"])
		key := string(spec)
		if np.GetDeletionTimestamp() != nil {
			key += deletingKey // a new runner tears the pool down
		}
		r := o.runners[name]
		if r == nil || r.spec != key {
			old := r
			r = o.newRunner(np, key, old)
			if old != nil && old.close != nil {
				old.close()
			}
			o.mu.Lock() // PoolStatus reads the map
			o.runners[name] = r
			o.mu.Unlock()
		}
		r.obj = np
	}
	for name := range o.runners {
		if !present[name] {
			o.log.Info("NodePool gone; its pool is no longer managed", "pool", name)
			o.metrics.forget(name)
			if r := o.runners[name]; r.close != nil {
				r.close()
			}
			o.mu.Lock()
			delete(o.runners, name)
			o.mu.Unlock()
		}
	}
	names := slices.Sorted(maps.Keys(o.runners))
	var pools []demand.Pool
	for _, name := range names {
		if r := o.runners[name]; r.err == nil && !r.deleting {
			dp := r.pool.Demand()
			if r.ctl != nil {
				dp.Held = r.ctl.Held()
			}
			if r.auto != nil {
				st, max := r.auto.Status(), r.pool.Config.Nodes.Max
				if max > 0 && st.Desired >= max && st.Queued > 0 {
					dp.Short = fmt.Sprintf("at its max of %d nodes with %d queued", max, st.Queued)
				}
			}
			pools = append(pools, dp)
		}
	}
	nodes := make([]*corev1.Node, len(nl.Items))
	for i := range nl.Items {
		nodes[i] = &nl.Items[i]
	}
	pods := make([]*corev1.Pod, len(pl.Items))
	for i := range pl.Items {
		pods[i] = &pl.Items[i]
	}
	o.finished.observe(nodes, pods)
	// DRA claims become device requests for the model only (pods keeps
	// the objects as they are for everything else).
	modelled := pods
	if demand.HasClaims(pods) {
		c := o.claims(ctx)
		o.mu.Lock()
		o.claimsVersion = c.Version
		o.mu.Unlock()
		modelled = demand.WithDevices(pods, c, pools)
	}
	// ProvisioningRequests (provreq.go): atomic ones add the pods that
	// stand for them (first: they book room before other waiting pods),
	// and the pods consuming a live request are not demand of their own.
	var errs []error
	reqs, err := o.provisioning(ctx, nodes, pods)
	if err != nil {
		errs = append(errs, err)
	}
	counted := modelled
	if len(reqs.StandIns) > 0 || len(reqs.Claimed) > 0 {
		counted = append(slices.Clone(reqs.StandIns), slices.DeleteFunc(slices.Clone(modelled), func(p *corev1.Pod) bool { return reqs.Claimed[p.UID] })...)
	}
	rep := demand.Compute(pools, nodes, counted)
	rep.Unmatched, rep.Unmodelled = withoutStandIns(rep.Unmatched), withoutStandIns(rep.Unmodelled)
	reqs.counted(rep)
	byUID := map[string]*corev1.Pod{}
	for _, p := range pods {
		if demand.Unschedulable(p) {
			byUID[p.Namespace+"/"+p.Name] = p
			o.mu.Lock()
			if _, ok := o.seen[p.UID]; !ok {
				o.seen[p.UID] = &seenPod{at: time.Now()}
			}
			o.mu.Unlock()
		}
	}
	byPool := map[string][]*corev1.Node{}
	for _, n := range nodes {
		if pool := n.Labels[nodepool.PoolLabel]; pool != "" {
			byPool[pool] = append(byPool[pool], n)
		}
	}
	// For consolidation: with their DRA devices counted, which no Node's
	// allocatable shows, so that it moves no such pod (its devices may not
	// be free elsewhere).
	byNode := map[string][]*corev1.Pod{}
	for _, p := range modelled {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	for _, name := range names {
		r := o.runners[name]
		var podsOf []*corev1.Pod
		for _, key := range rep.Pods[name] {
			if p := byUID[key]; p != nil { // not a request's stand-in
				podsOf = append(podsOf, p)
			}
		}
		if r.slots != nil {
			r.slots.set(rep.Slots[name])
		}
		if r.nodes != nil {
			r.nodes.refresh(byPool[name])
		}
		if err := o.runPool(ctx, r, now, o.finished.stamp(name, rep.Pressure[name]), byPool[name], podsOf); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
		}
		if err := o.consolidate(ctx, r, now, byPool[name], byNode, len(podsOf)+reqs.Held[name]); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: consolidate: %w", name, err))
		}
	}
	if err := o.answer(ctx, reqs); err != nil {
		errs = append(errs, err)
	}
	o.unmatchedEvents(rep.Unmatched, byUID)
	o.metrics.unmatched.Set(float64(len(rep.Unmatched)))
	o.unmodelledEvents(rep.Unmodelled, byUID)
	o.metrics.unmodelled.Set(float64(len(rep.Unmodelled)))
	// Forget pods that are bound or gone.
	o.mu.Lock()
	live := map[types.UID]bool{}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			live[p.UID] = true
		}
	}
	for uid := range o.seen {
		if !live[uid] {
			delete(o.seen, uid)
		}
	}
	o.mu.Unlock()
	return errors.Join(errs...)
}

// unmatchedEvents tells each pod that fits no pool why, once per reason.
func (o *Operator) unmatchedEvents(un []demand.Unmatched, byKey map[string]*corev1.Pod) {
	podEvents(o, un, byKey, o.unmatched, "NoNodePoolFits", "tide: no NodePool can run this pod: ")
}

// unmodelledEvents tells each waiting pod whose placement rules tide
// models only in part what it leaves out, once per message.
func (o *Operator) unmodelledEvents(un []demand.Unmatched, byKey map[string]*corev1.Pod) {
	podEvents(o, un, byKey, o.unmodelled, "NotModelled", "tide: ")
}

// podEvents records a Warning event of reason on each pod of un, its
// message prefix + the pod's reason, once per message: sent remembers the
// last message each pod got, and forgets pods no longer in un.
func podEvents(o *Operator, un []demand.Unmatched, byKey map[string]*corev1.Pod, sent map[types.UID]string, reason, prefix string) {
	live := map[types.UID]bool{}
	for _, u := range un {
		p := byKey[u.Namespace+"/"+u.Name]
		if p == nil {
			continue
		}
		live[p.UID] = true
		msg := prefix + u.Reason
		if sent[p.UID] == msg {
			continue
		}
		sent[p.UID] = msg
		o.event(p, corev1.EventTypeWarning, reason, msg)
	}
	for uid := range sent {
		if !live[uid] {
			delete(sent, uid)
		}
	}
}

func (o *Operator) event(obj runtime.Object, typ, reason, msg string) {
	if o.cfg.Recorder != nil {
		o.cfg.Recorder.Event(obj, typ, reason, msg)
	}
}

// runner is one NodePool's pool: its provider, controller and policy loop.
type runner struct {
	name string
	spec string
	obj  *unstructured.Unstructured
	pool nodepool.Pool
	err  error // the spec is invalid or not supported: the pool is not run
	// reason is the Ready condition's reason while err is set
	// ("InvalidSpec" when empty).
	reason string
	// deleting: the NodePool is being deleted; the runner tears the pool
	// down (finalizer.go) instead of scaling it.
	deleting bool
	// blocked is the last teardown event message (once per message).
	blocked string

	prov provider.Provider
	kwok *kwok.Provider // the kwok provider (nil for other types): its Sync runs every pass
	// nodes maps the pool's machines to their Nodes and back (nodes.go);
	// nodeName is its Name.
	nodes    *nodeIndex
	nodeName func(string) string
	// close releases the provider (the local provider's root lock).
	close func()
	ctl   *controller.Controller
	auto  *autoscale.Pool
	// slots is the pool's policy; it packs the pending pods' placement
	// rules (demand.Slot) too.
	slots *slotPolicy
	// work is the pool's Workload (cordons, evictions, inspection); cons
	// its consolidation (nil when it does not consolidate).
	work *workload.Workload
	cons *consolidator

	mu       sync.Mutex
	ordinals map[string]reconcile.NodeID // Node name → ordinal
	joined   map[string]bool             // machines whose Node was seen Ready

	podMsg     map[types.UID]string
	lastStatus string
	conds      map[string]metav1.Condition
}

// newRunner builds the runner of a NodePool (old is the runner of its
// previous spec: its conditions carry over).
func (o *Operator) newRunner(np *unstructured.Unstructured, spec string, old *runner) *runner {
	name := np.GetName()
	r := &runner{name: name, spec: spec, ordinals: map[string]reconcile.NodeID{}, joined: map[string]bool{}, podMsg: map[types.UID]string{},
		conds: map[string]metav1.Condition{}}
	if old != nil {
		r.conds = old.conds
	}
	fail := func(err error) *runner {
		r.err = err
		o.event(np, corev1.EventTypeWarning, cmp.Or(r.reason, "InvalidSpec"), err.Error())
		o.log.Warn("NodePool not run", "pool", name, "err", err)
		return r
	}
	r.deleting = strings.HasSuffix(spec, deletingKey)
	p, err := nodepool.Parse(name, []byte(strings.TrimSuffix(spec, deletingKey)))
	if err != nil {
		return fail(err)
	}
	r.pool = p
	rcfg := p.Config.ReconcileConfig()
	if r.deleting {
		rcfg = teardownConfig(rcfg)
	}
	switch t := p.Config.Provider.Type; t {
	case "kwok":
		var taints []corev1.Taint
		for _, t := range p.Taints {
			taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
		kp, err := kwok.New(kwok.Config{API: o.cfg.API, Offerings: p.Config.Offerings, Scope: "tide",
			Namespace: o.cfg.Namespace, NodeLabels: p.Labels, NodeTaints: taints, Clock: o.clk, Logger: o.log})
		if err != nil {
			return fail(err)
		}
		r.prov, r.kwok, r.nodes = kp, kp, newNodeIndex(kp.NodeName, nil)
	default:
		// Every other type is built as `tide head` builds it
		// (internal/provider/build); its machines join as Nodes with
		// credentials of their own (join.go).
		if why := build.RunsNoAgent(t); why != "" {
			r.reason = "ProviderCannotJoin"
			return fail(fmt.Errorf("spec.provider.type: %s", why))
		}
		b, err := build.New(p.Config, o.buildEnv(r))
		if err != nil {
			if t == "local" || t == "netns" {
				err = fmt.Errorf("%w (tide kube --local-root)", err)
			}
			return fail(fmt.Errorf("spec.%w", err))
		}
		if old != nil && old.close != nil {
			old.close() // its lock on the machines' state: the new provider adopts them
			old.close = nil
		}
		bp, err := b()
		if err != nil {
			// Not the spec's fault (a plugin that did not start): the
			// next pass builds it again.
			r.reason, r.spec = "ProviderUnavailable", ""
			return fail(err)
		}
		r.prov = joining{Provider: bp, o: o, r: r, provType: t}
		r.nodes = newNodeIndex(func(id string) string { return id }, bp)
		r.close = func() {
			if c, ok := bp.(io.Closer); ok {
				_ = c.Close()
			}
		}
	}
	r.nodeName = r.nodes.Name
	prov := r.prov
	base, err := policy.New(p.Config.PolicyConfig())
	if err != nil {
		return fail(fmt.Errorf("spec.scaling: %w", err))
	}
	pol := &slotPolicy{base: base, cfg: p.Config.PolicyConfig()}
	r.slots = pol
	journal := kubejournal.New(o.cfg.API, o.cfg.Namespace, "tide-journal-"+name)
	lc, launch, register, err := p.Config.LifecycleConfig()
	if err != nil {
		return fail(fmt.Errorf("spec.%w", err))
	}
	var repairOn []string
	if p.Config.Lifecycle != nil {
		repairOn = p.Config.Lifecycle.RepairConditions
	}
	work := workload.New(o.cfg.API, r.nodeName, o.log).RepairOn(repairOn...)
	r.work = work
	ctl, err := controller.New(controller.Config{Pool: name, Reconcile: rcfg, Offerings: p.Config.Offerings,
		Bootstrap: []byte("kubernetes"), ControllerID: o.cfg.Identity, ReconcileInterval: o.cfg.Interval,
		CreateConcurrency: CreateConcurrency,
		// A machine has joined once its Node is Ready; a joined Node
		// NotReady (or with a condition the pool names) for repair_after
		// is replaced; a Node whose labels, taints, join or offering
		// changed has drifted.
		LaunchTimeout: launch, RegistrationTimeout: register, RequireRegistration: true, Lifecycle: lc,
		NodeHash: p.Config.NodeHashes(struct {
			Labels map[string]string
			Taints any
			Join   any
		}{p.Labels, p.Taints, p.Join})},
		controller.Deps{Provider: timedProvider{Provider: prov, o: o}, Journal: journal,
			Workload: work,
			Clock:    o.clk, Logger: o.log, Metrics: o.cfg.Metrics, Events: controller.EventFunc(func(ev controller.Event) {
				if r.obj != nil {
					o.event(r.obj, ev.Type, camel(ev.Reason), ev.Message)
				}
			})})
	if err != nil {
		return fail(err)
	}
	auto, err := autoscale.New(autoscale.Config{Pool: name, Policy: pol, Desired: p.Config.Nodes.Desired, Interval: o.cfg.Interval,
		Figures: o.metrics.figures,
		Ordinal: func(node string) (reconcile.NodeID, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			id, ok := r.ordinals[node]
			return id, ok
		}}, ctl, o.clk, func(ev autoscale.Event) {
		if r.obj != nil {
			o.event(r.obj, corev1.EventTypeNormal, camel(ev.Reason), ev.Message)
		}
	})
	if err != nil {
		return fail(err)
	}
	r.ctl, r.auto = ctl, auto
	if r.cons, err = newConsolidator(r, o.cfg.Interval); err != nil {
		return fail(fmt.Errorf("spec.%w", err))
	}
	return r
}

// camel turns a reason code ("scale-up") into an event reason ("ScaleUp").
func camel(code string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(code, func(r rune) bool { return r == '-' || r == '_' || r == ' ' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	if b.Len() == 0 {
		return "Decision"
	}
	return b.String()
}

// runPool runs one pool's pass.
func (o *Operator) runPool(ctx context.Context, r *runner, now time.Time, pr capacity.Pressure, nodes []*corev1.Node, pending []*corev1.Pod) error {
	if r.err != nil {
		if r.deleting {
			// No provider to delete through: the Nodes stay, say so.
			return o.release(ctx, r, corev1.EventTypeWarning, "DeletedWithNodes",
				fmt.Sprintf("tide: NodePool %s is deleted but its spec is not valid (%v): its %s are left in place", r.name, r.err, plural(len(nodes), "node")))
		}
		return o.writeStatus(ctx, r, now, nodes, pending, controller.Status{})
	}
	st := r.ctl.Status()
	r.mu.Lock()
	clear(r.ordinals)
	for _, n := range st.Nodes {
		r.ordinals[r.nodeName(n.MachineID)] = n.ID
	}
	r.mu.Unlock()
	if r.deleting {
		return o.teardown(ctx, r, now, nodes)
	}
	if err := o.ensureFinalizer(ctx, r); err != nil {
		o.log.Warn("NodePool finalizer not added; retried on the next pass", "pool", r.name, "err", err)
	}
	r.auto.Observe(pr)
	r.auto.Evaluate(now)
	var errs []error
	if err := r.ctl.Tick(ctx); err != nil {
		if errors.Is(err, controller.ErrDeposed) {
			// Another controller holds the pool: start over on the next
			// pass (a new controller raises the epoch and adopts).
			r.spec = ""
		}
		errs = append(errs, err)
	}
	if r.kwok != nil {
		if _, err := r.kwok.Sync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	st = r.ctl.Status()
	// Until the controller has taken the pool over (or once it is deposed)
	// it knows no marks: the taints stay as they are, for the controller
	// that takes over to read back (controller.MarkReader).
	if st.Started && !st.Deposed {
		if err := o.syncMarks(ctx, r, nodes, st); err != nil {
			errs = append(errs, err)
		}
	}
	o.podEvents(r, pending, st)
	if err := o.writeStatus(ctx, r, now, nodes, pending, st); err != nil {
		errs = append(errs, err)
	}
	o.metrics.pool(r.name, len(pending), marked(nodes))
	return errors.Join(errs...)
}

// seenPod is a waiting pod's first sighting.
type seenPod struct {
	at      time.Time
	sampled bool
}

// created is called at every provider Create: each pod seen waiting and not
// sampled yet gets its Unschedulable → Create latency (the first Create
// after it was seen, whichever pod the Node is for: Nodes are fungible).
func (o *Operator) created() {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.seen {
		if s.sampled {
			continue
		}
		s.sampled = true
		d := now.Sub(s.at).Seconds()
		if len(o.latencies) < 100000 {
			o.latencies = append(o.latencies, d)
		}
		o.metrics.latency.Observe(d)
	}
}

// timedProvider tells the operator about every Create.
type timedProvider struct {
	provider.Provider
	o *Operator
}

// Create creates, then samples the waiting pods' latency.
func (p timedProvider) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	ack, err := p.Provider.Create(ctx, req)
	if err == nil && !ack.Replayed {
		p.o.created()
	}
	return ack, err
}

// syncMarks makes the deletion-candidate taints of the pool's Nodes match
// the reconciler's marks (adding, updating or removing the taint).
func (o *Operator) syncMarks(ctx context.Context, r *runner, nodes []*corev1.Node, st controller.Status) error {
	r.mu.Lock()
	ords := maps.Clone(r.ordinals)
	r.mu.Unlock()
	for _, n := range st.Nodes {
		ords[r.nodeName(n.MachineID)] = n.ID
	}
	var errs []error
	for _, n := range nodes {
		if n.DeletionTimestamp != nil {
			continue
		}
		var want time.Time
		if id, ok := ords[n.Name]; ok {
			want = st.Marks[id]
		}
		have := demand.Mark(n)
		if want.Unix() == have.Unix() || (want.IsZero() && have.IsZero()) {
			continue
		}
		if err := o.setMark(ctx, n.Name, want); err != nil {
			errs = append(errs, err)
			continue
		}
		if want.IsZero() {
			o.event(n, corev1.EventTypeNormal, "DeletionCandidateRemoved",
				fmt.Sprintf("tide: NodePool %s needs this node again (target %d); deletion-candidate taint removed", r.name, st.Desired))
		} else {
			o.event(n, corev1.EventTypeNormal, "DeletionCandidate",
				fmt.Sprintf("tide: NodePool %s is above its target of %d nodes and this node is empty; it is deleted at %s unless demand returns",
					r.name, st.Desired, want.Add(r.pool.Config.ReconcileConfig().ScaleDownDelay).UTC().Format(time.RFC3339)))
		}
	}
	return errors.Join(errs...)
}

// setMark writes (or, with a zero at, removes) a Node's deletion-candidate
// taint with compare-and-swap.
func (o *Operator) setMark(ctx context.Context, name string, at time.Time) error {
	for range 8 {
		n, err := o.cfg.API.GetNode(ctx, name)
		if errors.Is(err, kubeapi.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if at.IsZero() {
			n.Spec.Taints = demand.ClearMark(n.Spec.Taints)
		} else {
			n.Spec.Taints = demand.SetMark(n.Spec.Taints, at)
		}
		_, err = o.cfg.API.UpdateNode(ctx, n)
		if errors.Is(err, kubeapi.ErrConflict) {
			continue
		}
		if errors.Is(err, kubeapi.ErrNotFound) {
			return nil
		}
		return err
	}
	return fmt.Errorf("node %s keeps changing", name)
}

// podEvents tells each pending pod of the pool what tide does for it, once
// per kind of answer.
func (o *Operator) podEvents(r *runner, pending []*corev1.Pod, st controller.Status) {
	live := map[types.UID]bool{}
	for _, p := range pending {
		if p == nil {
			continue
		}
		live[p.UID] = true
		var kind, reason, typ, msg string
		switch {
		case st.Pending > 0:
			kind, reason, typ = "launch", "TriggeredScaleUp", corev1.EventTypeNormal
			msg = fmt.Sprintf("tide is launching %s for this pod (NodePool %s: %d of %d nodes joined)", plural(st.Pending, "node"), r.name, st.Current, st.Desired)
		default:
			kind, reason, typ = "wait:"+r.auto.Status().Reason, "NotTriggerScaleUp", corev1.EventTypeNormal
			msg = fmt.Sprintf("tide: NodePool %s launches no node now: %s", r.name, r.auto.Status().Reason)
		}
		if r.podMsg[p.UID] == kind {
			continue
		}
		r.podMsg[p.UID] = kind
		o.event(p, typ, reason, msg)
	}
	for uid := range r.podMsg {
		if !live[uid] {
			delete(r.podMsg, uid)
		}
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func marked(nodes []*corev1.Node) int {
	n := 0
	for _, x := range nodes {
		if !demand.Mark(x).IsZero() {
			n++
		}
	}
	return n
}

// writeStatus writes the NodePool's status subresource when it changed.
func (o *Operator) writeStatus(ctx context.Context, r *runner, now time.Time, nodes []*corev1.Node, pending []*corev1.Pod, st controller.Status) error {
	if r.obj == nil {
		return nil
	}
	setCond := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		c, had := r.conds[typ]
		if !had || c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now.UTC().Truncate(time.Second))
		}
		c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration = typ, status, reason, msg, r.obj.GetGeneration()
		r.conds[typ] = c
	}
	status := map[string]any{"observedGeneration": r.obj.GetGeneration(), "current": len(nodes), "marked": marked(nodes), "pending": len(pending)}
	switch {
	case r.err != nil:
		setCond("Ready", false, cmp.Or(r.reason, "InvalidSpec"), r.err.Error())
	case st.Deposed:
		setCond("Ready", false, "Deposed", "another controller holds the pool; this replica starts over")
	case !st.Started:
		setCond("Ready", false, "Starting", "taking the pool over")
	default:
		setCond("Ready", true, "Acting", fmt.Sprintf("%s acts on the pool at epoch %d (%s)", o.cfg.Identity, st.Epoch, st.State))
	}
	if r.err == nil {
		status["target"] = st.Desired
		setCond("ScalingUp", st.Pending > 0, map[bool]string{true: "Launching", false: "NoLaunch"}[st.Pending > 0],
			fmt.Sprintf("%s launching", plural(st.Pending, "node")))
		setCond("Draining", st.Draining > 0, map[bool]string{true: "Draining", false: "NoDrain"}[st.Draining > 0],
			fmt.Sprintf("%s draining, %s marked for deletion", plural(st.Draining, "node"), plural(len(st.Marks), "node")))
		as := r.auto.Status()
		if as.Reason != "" {
			code, _, _ := strings.Cut(as.Reason, ":")
			status["lastDecision"] = fmt.Sprintf("desired %d", as.Desired)
			status["lastDecisionReason"] = code + ":" + strings.SplitN(as.Reason, ":", 2)[1]
			status["lastDecisionTime"] = as.At.UTC().Truncate(time.Second).Format(time.RFC3339)
		}
	}
	conds := make([]metav1.Condition, 0, len(r.conds))
	for _, k := range slices.Sorted(maps.Keys(r.conds)) {
		if r.err != nil && k != "Ready" {
			continue
		}
		conds = append(conds, r.conds[k])
	}
	status["conditions"] = conds
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if string(body) == r.lastStatus {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(NodePoolGVK)
	u.SetName(r.name)
	if err := o.cfg.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	r.lastStatus = string(body)
	return nil
}
