// Package kwok is a tide provider whose machines are Kubernetes Node objects
// that kwok (sigs.k8s.io/kwok) makes Ready and "runs" pods on: Kubernetes
// mode's provider for tests and demos, with no kubelet and no cloud.
//
// Everything the provider knows lives in the cluster, so a controller that
// takes over after a failover sees what its predecessor did:
//
//   - a machine is a Node named after its id (plus an optional prefix),
//     labelled with its pool and the provider's scope, annotated with its
//     offering, state, binding and creation time, and linked to the machine by
//     spec.providerID kwok://<id>;
//   - Creating becomes Idle when the provider's Sync (run by Run) sees the
//     Node Ready; Configure and Drain take effect at once (the Node is
//     already part of the cluster);
//   - Delete records the id as gone, then deletes the Node, which a finalizer
//     keeps (Deleting) until Sync lets it go;
//   - the fences and the ids that are gone are kept in one ConfigMap per scope,
//     written with compare-and-swap on its resourceVersion.
package kwok

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// Keys the provider writes on Nodes and its state ConfigMap.
const (
	ScopeLabel     = "tide.dev/kwok-scope"
	KwokAnnotation = "kwok.x-k8s.io/node"
	Finalizer      = "tide.dev/machine"
	annID          = "tide.dev/machine-id"
	annOffering    = "tide.dev/offering"
	annState       = "tide.dev/machine-state"
	annCluster     = "tide.dev/cluster"
	annBootstrap   = "tide.dev/bootstrap"
	annLabels      = "tide.dev/machine-labels"
	annCreated     = "tide.dev/created-at"
	annUpdated     = "tide.dev/updated-at"
	// ProviderIDPrefix starts the spec.providerID of every Node the provider makes.
	ProviderIDPrefix = "kwok://"
)

// API is the part of the Kubernetes API the provider uses; kubeapi.REST implements it.
type API interface {
	CreateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	UpdateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error)
	DeleteNode(ctx context.Context, name string) error
	ListNodes(ctx context.Context, selector string) ([]corev1.Node, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
}

// Config configures a Provider.
type Config struct {
	// API reaches the cluster.
	API API
	// Offerings are what the provider sells; a Node gets its offering's
	// resources as capacity and allocatable.
	Offerings []capacity.Offering
	// Scope separates providers sharing one cluster (default "tide"); it
	// labels every Node and names the state ConfigMap.
	Scope string
	// NamePrefix is put before a machine id to name its Node (default none).
	NamePrefix string
	// Namespace holds the state ConfigMap (default "default").
	Namespace string
	// NodeLabels and NodeTaints are put on every Node (a NodePool's template).
	NodeLabels map[string]string
	NodeTaints []corev1.Taint
	// Clock stamps creation and update times (default the real clock).
	Clock clock.Clock
	// Logger reports the reaper's errors (default discard).
	Logger *slog.Logger
}

// Provider is the kwok provider; it is safe for concurrent use (every
// consistency check is done by the apiserver).
type Provider struct {
	cfg  Config
	offs map[string]capacity.Offering
}

var _ provider.Provider = (*Provider)(nil)

var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// New checks cfg and returns a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.API == nil {
		return nil, errors.New("kwok: API must be set")
	}
	if cfg.Scope == "" {
		cfg.Scope = "tide"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if !dnsSubdomain.MatchString(cfg.Scope) || len(cfg.Scope) > 63 {
		return nil, fmt.Errorf("kwok: scope %q: want a lowercase DNS label", cfg.Scope)
	}
	if len(cfg.Offerings) == 0 {
		return nil, errors.New("kwok: offerings: at least one is needed")
	}
	p := &Provider{cfg: cfg, offs: map[string]capacity.Offering{}}
	for i, o := range cfg.Offerings {
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("kwok: offerings[%d]: %w", i, err)
		}
		if _, dup := p.offs[o.Name()]; dup {
			return nil, fmt.Errorf("kwok: offerings[%d]: %s listed twice", i, o.Name())
		}
		p.offs[o.Name()] = o
	}
	return p, nil
}

// NodeName returns the name of the Node of machine id.
func (p *Provider) NodeName(id string) string { return p.cfg.NamePrefix + id }

// Offerings lists the catalog in configuration order.
func (p *Provider) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]capacity.Offering, len(p.cfg.Offerings))
	for i, o := range p.cfg.Offerings {
		out[i] = o
		out[i].Resources = o.Resources.Clone()
	}
	return out, nil
}

func transient(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return provider.NewTransient(err, time.Second)
}

// ---- state ConfigMap: fences and gone ids ----

type state struct {
	Fences map[string]provider.Fence `json:"fences"`
	Gone   []string                  `json:"gone"`
}

func (p *Provider) stateName() string { return "tide-kwok-" + p.cfg.Scope }

// loadState reads the state ConfigMap, creating it when absent.
func (p *Provider) loadState(ctx context.Context) (*corev1.ConfigMap, state, error) {
	for range 5 {
		cm, err := p.cfg.API.GetConfigMap(ctx, p.cfg.Namespace, p.stateName())
		if errors.Is(err, kubeapi.ErrNotFound) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.stateName(), Namespace: p.cfg.Namespace},
				Data: map[string]string{"state": `{"fences":{},"gone":[]}`}}
			cm, err = p.cfg.API.CreateConfigMap(ctx, cm)
			if errors.Is(err, kubeapi.ErrExists) {
				continue
			}
		}
		if err != nil {
			return nil, state{}, transient(err)
		}
		var st state
		if err := json.Unmarshal([]byte(cm.Data["state"]), &st); err != nil {
			return nil, state{}, fmt.Errorf("kwok: state ConfigMap %s/%s: %w", p.cfg.Namespace, p.stateName(), err)
		}
		if st.Fences == nil {
			st.Fences = map[string]provider.Fence{}
		}
		return cm, st, nil
	}
	return nil, state{}, provider.NewTransient(errors.New("kwok: state ConfigMap keeps changing"), time.Second)
}

// changeState applies change to the state with compare-and-swap; change
// returns false when nothing is to be written.
func (p *Provider) changeState(ctx context.Context, change func(*state) (bool, error)) error {
	for range 8 {
		cm, st, err := p.loadState(ctx)
		if err != nil {
			return err
		}
		write, err := change(&st)
		if err != nil || !write {
			return err
		}
		js, _ := json.Marshal(st)
		cm.Data = map[string]string{"state": string(js)}
		if _, err := p.cfg.API.UpdateConfigMap(ctx, cm); errors.Is(err, kubeapi.ErrConflict) {
			continue
		} else if err != nil {
			return transient(err)
		}
		return nil
	}
	return provider.NewTransient(errors.New("kwok: state ConfigMap keeps changing"), time.Second)
}

// admit checks a mutating call's fence against the pool's highest (the
// rules of provider.FenceTable) and records a takeover.
func (p *Provider) admit(ctx context.Context, pool string, f provider.Fence) error {
	return p.changeState(ctx, func(st *state) (bool, error) { return admitTo(st, pool, f) })
}

// admitTo checks fence f of pool against st, recording a takeover in st
// (then it returns true: st is to be written).
func admitTo(st *state, pool string, f provider.Fence) (bool, error) {
	cur, ok := st.Fences[pool]
	if ok && (f.Epoch < cur.Epoch || f.Epoch == cur.Epoch && f.Controller != cur.Controller) {
		return false, provider.NewStaleFence(pool, f, cur)
	}
	if ok && f.Epoch == cur.Epoch {
		return false, nil // same controller, same epoch: nothing to record (Seq is audit only)
	}
	st.Fences[pool] = f
	return true, nil
}

// ---- Node ↔ machine ----

func ready(n *corev1.Node) (bool, time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// ours reports whether n is a machine of this provider.
func (p *Provider) ours(n *corev1.Node) bool {
	return n.Labels[ScopeLabel] == p.cfg.Scope && n.Annotations[annID] != ""
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// machine reads the machine a Node is.
func machine(n *corev1.Node) provider.Machine {
	a := n.Annotations
	m := provider.Machine{ID: a[annID], Pool: n.Labels[demand.PoolLabel], Offering: a[annOffering],
		State: provider.State(a[annState]), CreatedAt: parseTime(a[annCreated]), UpdatedAt: parseTime(a[annUpdated])}
	if l := a[annLabels]; l != "" {
		_ = json.Unmarshal([]byte(l), &m.Labels)
	}
	if n.DeletionTimestamp != nil {
		m.State, m.UpdatedAt = provider.Deleting, n.DeletionTimestamp.Time
	}
	if m.State != provider.Creating && m.State != provider.Speculative {
		m.Host = n.Name
	}
	if c := a[annCluster]; c != "" && m.Host != "" {
		m.Cluster = c
		m.Bootstrap, _ = base64.StdEncoding.DecodeString(a[annBootstrap])
	}
	return m
}

func (p *Provider) newNode(req *provider.CreateRequest, off capacity.Offering, now time.Time) (*corev1.Node, error) {
	labels := maps.Clone(p.cfg.NodeLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[demand.PoolLabel] = req.Pool
	labels[ScopeLabel] = p.cfg.Scope
	labels["type"] = "kwok"
	// The well-known labels a cloud node has: the scheduler's hostname and
	// zone rules (pod affinity, topology spread) read them.
	labels[corev1.LabelHostname] = p.NodeName(req.MachineID)
	if off.Zone != "" {
		labels[corev1.LabelTopologyZone] = off.Zone
	}
	if off.Type != "" {
		labels[corev1.LabelInstanceTypeStable] = off.Type
	}
	ml, err := json.Marshal(req.Labels)
	if err != nil {
		return nil, err
	}
	ts := now.UTC().Format(time.RFC3339Nano)
	res := demand.ResourceList(off.Resources)
	res[corev1.ResourcePods] = *resource.NewQuantity(110, resource.DecimalSI)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: p.NodeName(req.MachineID), Labels: labels, Finalizers: []string{Finalizer},
			Annotations: map[string]string{KwokAnnotation: "fake", annID: req.MachineID, annOffering: req.Offering,
				annState: string(provider.Creating), annLabels: string(ml), annCreated: ts, annUpdated: ts}},
		Spec:   corev1.NodeSpec{ProviderID: ProviderIDPrefix + req.MachineID, Taints: slices.Clone(p.cfg.NodeTaints)},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}, nil
}

// ---- the six calls ----

// Create creates the machine's Node; see provider.Provider.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	wrap := func(err error) (provider.Ack, error) {
		return provider.Ack{}, fmt.Errorf("create machine %q: %w", req.MachineID, err)
	}
	if err := req.Validate(); err != nil {
		return wrap(err)
	}
	off, ok := p.offs[req.Offering]
	if !ok {
		return wrap(provider.NewInvalid("offering", fmt.Sprintf("unknown offering %q", req.Offering)))
	}
	if name := p.NodeName(req.MachineID); !dnsSubdomain.MatchString(name) {
		return wrap(provider.NewInvalid("machine_id", fmt.Sprintf("%q: a kwok machine's Node name must be a lowercase DNS name", name)))
	}
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	replay := func(n *corev1.Node) (provider.Ack, error) {
		if !p.ours(n) {
			return wrap(provider.NewConflict(req.MachineID, "", "a Node of that name exists and is not this provider's"))
		}
		m := machine(n)
		if m.Pool != req.Pool || m.Offering != req.Offering {
			return wrap(provider.NewConflict(m.ID, m.State, fmt.Sprintf("id taken by pool %q, offering %q", m.Pool, m.Offering)))
		}
		return provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
	}
	// One read of the state checks the fence and that the id is not one of
	// a machine that is gone (a Create is two state reads fewer than it
	// was: bursts of Creates run concurrently).
	gone := false
	if err := p.changeState(ctx, func(st *state) (bool, error) {
		write, err := admitTo(st, req.Pool, req.Fence)
		gone = slices.Contains(st.Gone, req.MachineID)
		return write, err
	}); err != nil {
		return wrap(err)
	}
	n, err := p.cfg.API.GetNode(ctx, p.NodeName(req.MachineID))
	switch {
	case err == nil:
		return replay(n)
	case !errors.Is(err, kubeapi.ErrNotFound):
		return wrap(transient(err))
	}
	if gone {
		return wrap(provider.NewConflict(req.MachineID, "", "id belonged to a machine that is gone; machine ids are never reused"))
	}
	node, err := p.newNode(&req, off, p.cfg.Clock.Now())
	if err != nil {
		return wrap(err)
	}
	if _, err := p.cfg.API.CreateNode(ctx, node); errors.Is(err, kubeapi.ErrExists) {
		n, err := p.cfg.API.GetNode(ctx, node.Name)
		if err != nil {
			return wrap(transient(err))
		}
		return replay(n)
	} else if err != nil {
		return wrap(transient(err))
	}
	return provider.Ack{MachineID: req.MachineID, State: provider.Creating}, nil
}

// mutate runs the common part of Configure, Drain and Delete: validation,
// fencing, ownership, then act on the Node with compare-and-swap (act
// returns the Node to write, or nil to write nothing).
func (p *Provider) mutate(ctx context.Context, op tideprovider.Op, pool, id string, f provider.Fence, validate func() error,
	act func(n *corev1.Node, m provider.Machine) (*corev1.Node, provider.Ack, error)) (provider.Ack, error) {
	wrap := func(err error) (provider.Ack, error) {
		return provider.Ack{}, fmt.Errorf("%s machine %q: %w", op, id, err)
	}
	if err := validate(); err != nil {
		return wrap(err)
	}
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	if err := p.admit(ctx, pool, f); err != nil {
		return wrap(err)
	}
	for range 8 {
		n, err := p.cfg.API.GetNode(ctx, p.NodeName(id))
		if errors.Is(err, kubeapi.ErrNotFound) {
			return wrap(provider.NewNotFound(id))
		} else if err != nil {
			return wrap(transient(err))
		}
		m := machine(n)
		if !p.ours(n) || m.Pool != pool {
			return wrap(provider.NewNotFound(id))
		}
		write, ack, err := act(n.DeepCopy(), m)
		if err != nil {
			return wrap(err)
		}
		if write == nil {
			return ack, nil
		}
		write.Annotations[annUpdated] = p.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)
		if _, err := p.cfg.API.UpdateNode(ctx, write); errors.Is(err, kubeapi.ErrConflict) {
			continue
		} else if errors.Is(err, kubeapi.ErrNotFound) {
			return wrap(provider.NewNotFound(id))
		} else if err != nil {
			return wrap(transient(err))
		}
		return ack, nil
	}
	return wrap(provider.NewTransient(errors.New("the Node keeps changing"), time.Second))
}

// Configure binds an Idle machine to a cluster; see provider.Provider.
func (p *Provider) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpConfigure, req.Pool, req.MachineID, req.Fence, req.Validate,
		func(n *corev1.Node, m provider.Machine) (*corev1.Node, provider.Ack, error) {
			switch {
			case m.State == provider.Idle:
				n.Annotations[annState] = string(provider.Configured)
				n.Annotations[annCluster] = req.Cluster
				n.Annotations[annBootstrap] = base64.StdEncoding.EncodeToString(req.Bootstrap)
				return n, provider.Ack{MachineID: m.ID, State: provider.Configured}, nil
			case (m.State == provider.Configuring || m.State == provider.Configured) && m.Cluster == req.Cluster:
				return nil, provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
			case m.State == provider.Configuring || m.State == provider.Configured:
				return nil, provider.Ack{}, provider.NewConflict(m.ID, m.State, fmt.Sprintf("bound to cluster %q; drain it first", m.Cluster))
			}
			return nil, provider.Ack{}, provider.NewConflict(m.ID, m.State, "configure needs an idle machine")
		})
}

// Drain unbinds a machine from its cluster; see provider.Provider.
func (p *Provider) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpDrain, req.Pool, req.MachineID, req.Fence, req.Validate,
		func(n *corev1.Node, m provider.Machine) (*corev1.Node, provider.Ack, error) {
			switch m.State {
			case provider.Configuring, provider.Configured:
				n.Annotations[annState] = string(provider.Idle)
				delete(n.Annotations, annCluster)
				delete(n.Annotations, annBootstrap)
				return n, provider.Ack{MachineID: m.ID, State: provider.Idle}, nil
			case provider.Draining, provider.Idle, provider.Creating, provider.Speculative:
				return nil, provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
			}
			return nil, provider.Ack{}, provider.NewConflict(m.ID, m.State, "drain does not apply; delete the machine")
		})
}

// Delete records the id as gone and deletes the Node; see provider.Provider.
func (p *Provider) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	return p.mutate(ctx, tideprovider.OpDelete, req.Pool, req.MachineID, req.Fence, req.Validate,
		func(n *corev1.Node, m provider.Machine) (*corev1.Node, provider.Ack, error) {
			if m.State == provider.Deleting {
				return nil, provider.Ack{MachineID: m.ID, State: m.State, Replayed: true}, nil
			}
			if err := p.changeState(ctx, func(st *state) (bool, error) {
				if slices.Contains(st.Gone, m.ID) {
					return false, nil
				}
				st.Gone = append(st.Gone, m.ID)
				return true, nil
			}); err != nil {
				return nil, provider.Ack{}, err
			}
			if err := p.cfg.API.DeleteNode(ctx, n.Name); err != nil && !errors.Is(err, kubeapi.ErrNotFound) {
				return nil, provider.Ack{}, transient(err)
			}
			return nil, provider.Ack{MachineID: m.ID, State: provider.Deleting}, nil
		})
}

// Get returns one machine; see provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return provider.Machine{}, err
	}
	n, err := p.cfg.API.GetNode(ctx, p.NodeName(id))
	if errors.Is(err, kubeapi.ErrNotFound) {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, provider.NewNotFound(id))
	} else if err != nil {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, transient(err))
	}
	if !p.ours(n) {
		return provider.Machine{}, fmt.Errorf("get machine %q: %w", id, provider.NewNotFound(id))
	}
	return machine(n), nil
}

// List returns the machines passing f, sorted by id; see provider.Provider.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sel := ScopeLabel + "=" + p.cfg.Scope
	if f.Pool != "" {
		sel += "," + demand.PoolLabel + "=" + f.Pool
	}
	nodes, err := p.cfg.API.ListNodes(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", transient(err))
	}
	out := make([]provider.Machine, 0, len(nodes))
	for i := range nodes {
		if !p.ours(&nodes[i]) {
			continue
		}
		if m := machine(&nodes[i]); f.Matches(&m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b provider.Machine) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Sync moves the machines forward, as a cloud's control plane would: a
// Creating machine whose Node kwok reports Ready becomes Idle, and a
// Deleting machine's Node loses its finalizer, so it goes. It returns how
// many machines it moved. Run calls it periodically; until it runs, every
// machine keeps its state.
func (p *Provider) Sync(ctx context.Context) (int, error) {
	nodes, err := p.cfg.API.ListNodes(ctx, ScopeLabel+"="+p.cfg.Scope)
	if err != nil {
		return 0, transient(err)
	}
	var moves []*corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if !p.ours(n) {
			continue
		}
		ok, _ := ready(n)
		switch {
		case n.DeletionTimestamp != nil && slices.Contains(n.Finalizers, Finalizer):
			n.Finalizers = slices.DeleteFunc(n.Finalizers, func(f string) bool { return f == Finalizer })
		case n.DeletionTimestamp == nil && n.Annotations[annState] == string(provider.Creating) && ok:
			n.Annotations[annState] = string(provider.Idle)
			n.Annotations[annUpdated] = p.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)
		default:
			continue
		}
		moves = append(moves, n)
	}
	// The updates touch one Node each: a burst of Nodes turning Ready is
	// moved syncConcurrency at a time, not one after another.
	var (
		mu    sync.Mutex
		done  int
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, syncConcurrency)
	for _, n := range moves {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := p.cfg.API.UpdateNode(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done++
			case errors.Is(err, kubeapi.ErrNotFound), errors.Is(err, kubeapi.ErrConflict):
				done++ // gone, or changed: the next Sync sees it again
			case first == nil:
				first = transient(err)
			}
		}()
	}
	wg.Wait()
	return done, first
}

// syncConcurrency bounds Sync's Node updates in flight.
const syncConcurrency = 16

// Run calls Sync every interval until ctx ends.
func (p *Provider) Run(ctx context.Context, interval time.Duration) {
	t := p.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Sync(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("kwok: syncing machines", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
