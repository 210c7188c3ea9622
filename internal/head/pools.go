package head

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// Node states of MachineStatus.State.
const (
	// NodeReady: joined and serving.
	NodeReady = "ready"
	// NodePending: its machine is being created or configured; not joined.
	NodePending = "pending"
	// NodeDraining: cordoned, its work finishing, then terminated.
	NodeDraining = "draining"
	// NodeMarked: marked for deletion, removed after the scale-down delay
	// unless demand returns.
	NodeMarked = "marked"
)

// PoolStatus is an autoscaled pool as its wiring reports it through
// Config.PoolStatus or SetPoolStatus. The head adds what it knows itself:
// the queued and inflight counts of its last pressure report, the pool's
// workers, and each node's use.
type PoolStatus struct {
	Name string
	// Provider names the pool's provider type ("local", "sim", ...).
	Provider string
	// Policy names the scaling policy.
	Policy string
	// Nodes is the node spec: min, desired (readiness), max.
	Nodes capacity.NodeSpec
	// Desired is the current desired node count.
	Desired int
	// Ready, Pending and Draining count the pool's nodes in each state.
	Ready, Pending, Draining int
	// Reason says why the last scaling decision was taken (or not);
	// DecidedAt is when.
	Reason    string
	DecidedAt time.Time
	// Machines are the pool's nodes, by ordinal.
	Machines []MachineStatus
	// Offerings are the machine kinds the pool may launch, and Selector the
	// labels an instance needs for the pool to serve it: waiting instances
	// that no pool can ever fit are told so (WaitingReason).
	Offerings []capacity.Offering
	Selector  map[string]string
	// Fleet is set for a pool whose machines come from the fleet tier.
	Fleet *httpapi.FleetPoolJSON
}

// MachineStatus is one node of an autoscaled pool.
type MachineStatus struct {
	// ID is the name its worker registers with; MachineID when empty.
	ID string
	// Ordinal is the node's rank in its pool.
	Ordinal int
	// MachineID is the provider's machine id.
	MachineID string
	// Offering names the machine's offering.
	Offering string
	// State is NodeReady, NodePending, NodeDraining or NodeMarked; when
	// empty, ready if its worker is ONLINE, else pending.
	State string
	// Resources is the offering's capacity, shown until the worker
	// registers its own.
	Resources capacity.Resources
	// CreatedAt is when the machine was created; the worker's registration
	// time is used when zero.
	CreatedAt time.Time
	// MarkedAt is when the node was marked for deletion; zero when unmarked.
	MarkedAt time.Time
	// PricePerHour is what the machine costs per hour (its offering's
	// price); the pool's cost per hour sums it.
	PricePerHour float64
	// Unhealthy says why the node is unhealthy ("" when healthy);
	// Replacing names why it is being replaced (repair, drift, expired);
	// Disruption says why it is, or is due to be, replaced and what it
	// waits for.
	Unhealthy, Replacing, Disruption string
}

// SetPoolStatus replaces Config.PoolStatus, for wiring that builds its
// pools after the head. f is called on HTTP goroutines and must be safe for
// concurrent use; nil lists only the pools the head sees.
func (h *Head) SetPoolStatus(f func() []PoolStatus) {
	h.poolStatus.Store(&f)
}

func (h *Head) poolStatuses() []PoolStatus {
	if f := h.poolStatus.Load(); f != nil && *f != nil {
		return (*f)()
	}
	return nil
}

// workerUse is what the active instances on one worker hold.
type workerUse struct {
	used               capacity.Resources
	gpus               map[int]bool
	instances, daemons int
}

// fleetView is one consistent read of the head's workers and their use.
type fleetView struct {
	now      time.Time
	workers  []*store.Worker
	byID     map[string]*store.Worker
	use      map[string]*workerUse
	pressure map[string]capacity.Pressure
}

func (h *Head) fleetView(ctx context.Context) (*fleetView, error) {
	st, err := h.st.SchedulingState(ctx)
	if err != nil {
		return nil, err
	}
	v := &fleetView{now: h.clk.Now(), workers: st.Workers, byID: make(map[string]*store.Worker, len(st.Workers)),
		use: map[string]*workerUse{}, pressure: h.Pressure()}
	for _, w := range st.Workers {
		v.byID[w.ID] = w
	}
	for _, a := range st.Active {
		u := v.use[a.Worker]
		if u == nil {
			u = &workerUse{gpus: map[int]bool{}}
			v.use[a.Worker] = u
		}
		u.used = u.used.Add(capacity.Resources{MilliCPU: a.Requests.MilliCPU, Memory: a.Requests.Memory})
		for _, g := range a.GPUIndices {
			u.gpus[g] = true
		}
		if a.Daemon {
			u.daemons++
		} else {
			u.instances++
		}
	}
	return v, nil
}

func (v *fleetView) used(w *store.Worker) capacity.Resources {
	u := v.use[w.ID]
	if u == nil {
		return capacity.Resources{}
	}
	r := u.used
	r.GPUs = int64(len(u.gpus))
	return r
}

func seconds(now, t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(now.Sub(t), 0).Seconds()
}

// workerState is an unmanaged worker's state.
func workerState(w *store.Worker) string {
	switch {
	case w.Status == store.WorkerOffline:
		return "offline"
	case w.Cordoned():
		return "cordoned"
	case w.Status == store.WorkerSuspect:
		return "suspect"
	}
	return "ready"
}

// node renders one node: ns is nil for a worker no autoscaler knows, w is
// nil for a managed node whose worker has not registered.
func (v *fleetView) node(pool string, ns *MachineStatus, w *store.Worker) httpapi.NodeJSON {
	out := httpapi.NodeJSON{Pool: pool}
	if ns != nil {
		out.Managed = true
		out.ID = ns.ID
		if out.ID == "" {
			out.ID = ns.MachineID
		}
		out.Ordinal, out.MachineID, out.Offering = ns.Ordinal, ns.MachineID, ns.Offering
		out.State = ns.State
		// A node whose worker has joined is ready, though its provider
		// may not have said so yet.
		if out.State == "" || out.State == NodePending {
			out.State = NodePending
			if w != nil && w.Status == store.WorkerOnline {
				out.State = NodeReady
			}
		}
		out.TotalResources = httpapi.ResourcesFrom(ns.Resources)
		out.CreatedAt, out.MarkedAt = ns.CreatedAt.UTC(), ns.MarkedAt.UTC()
		out.Unhealthy, out.Replacing, out.Disruption = ns.Unhealthy, ns.Replacing, ns.Disruption
	}
	if w != nil {
		if ns == nil {
			out.ID, out.Ordinal, out.State = w.ID, w.Ordinal, workerState(w)
		}
		out.WorkerStatus, out.Host, out.Cordoned, out.Labels = string(w.Status), w.Host, w.Cordoned(), w.Labels
		out.TotalResources, out.UsedResources = httpapi.ResourcesFrom(w.Capacity), httpapi.ResourcesFrom(v.used(w))
		if u := v.use[w.ID]; u != nil {
			out.Instances, out.Daemons = u.instances, u.daemons
		}
		if out.CreatedAt.IsZero() {
			out.CreatedAt = w.RegisteredAt.UTC()
		}
		out.LastSeen = w.LastHeartbeatAt.UTC()
	}
	out.AgeSeconds = seconds(v.now, out.CreatedAt)
	return out
}

// assemble merges the autoscalers' pools with the head's view: managed
// pools first in the order given, then the other pools of workers and of
// the pressure report by name. Each node is listed once, under its pool.
func (h *Head) assemble(ctx context.Context) ([]httpapi.PoolJSON, [][]httpapi.NodeJSON, error) {
	v, err := h.fleetView(ctx)
	if err != nil {
		return nil, nil, err
	}
	statuses := h.poolStatuses()
	var (
		pools []httpapi.PoolJSON
		nodes [][]httpapi.NodeJSON
		index = map[string]int{}
		seen  = map[string]bool{}
	)
	for i := range statuses {
		ps := &statuses[i]
		if _, dup := index[ps.Name]; dup {
			continue
		}
		index[ps.Name] = len(pools)
		p := httpapi.PoolJSON{Name: ps.Name, Managed: true, Provider: ps.Provider, Policy: ps.Policy,
			NodeSpec: &httpapi.NodeSpecJSON{Min: ps.Nodes.Min, Desired: ps.Nodes.Desired, Max: ps.Nodes.Max, Elastic: ps.Nodes.Elastic},
			Desired:  ps.Desired, Ready: ps.Ready, Pending: ps.Pending, Draining: ps.Draining, Fleet: ps.Fleet}
		if ps.Reason != "" || !ps.DecidedAt.IsZero() {
			p.LastDecision = &httpapi.DecisionJSON{Reason: ps.Reason, Time: ps.DecidedAt.UTC(),
				AgeSeconds: seconds(v.now, ps.DecidedAt)}
		}
		var ns []httpapi.NodeJSON
		for j := range ps.Machines {
			n := &ps.Machines[j]
			name := n.ID
			if name == "" {
				name = n.MachineID
			}
			w := v.byID[name]
			if w != nil && !seen[w.ID] {
				seen[w.ID] = true
			} else {
				w = nil
			}
			if n.State == NodeMarked || !n.MarkedAt.IsZero() {
				p.Marked++
			}
			ns = append(ns, v.node(ps.Name, n, w))
		}
		if len(ns) > 0 {
			// Count from the merged nodes, so each is counted once, in the
			// state `tide nodes` shows (a draining node is not also ready).
			p.Ready, p.Pending, p.Draining = 0, 0, 0
			for _, n := range ns {
				switch n.State {
				case NodeDraining:
					p.Draining++
				case NodePending:
					p.Pending++
				case NodeMarked: // serving if its worker is, else still joining
					if n.WorkerStatus == string(store.WorkerOnline) {
						p.Ready++
					} else {
						p.Pending++
					}
				default:
					p.Ready++
				}
			}
		}
		pools = append(pools, p)
		nodes = append(nodes, ns)
	}
	managed := len(pools)
	extra := func(name string) int {
		if i, ok := index[name]; ok {
			return i
		}
		index[name] = len(pools)
		pools = append(pools, httpapi.PoolJSON{Name: name})
		nodes = append(nodes, nil)
		return len(pools) - 1
	}
	for _, w := range v.workers {
		i := extra(w.Pool)
		if !seen[w.ID] {
			seen[w.ID] = true
			nodes[i] = append(nodes[i], v.node(w.Pool, nil, w))
		}
		if w.Status == store.WorkerOffline {
			continue
		}
		p := &pools[i]
		p.Workers++
		p.TotalResources = addOut(p.TotalResources, httpapi.ResourcesFrom(w.Capacity))
		p.UsedResources = addOut(p.UsedResources, httpapi.ResourcesFrom(v.used(w)))
		if !p.Managed {
			if w.Cordoned() {
				p.Draining++
			} else if w.Status == store.WorkerOnline {
				p.Ready++
			}
		}
	}
	for name := range v.pressure {
		extra(name)
	}
	for i := range pools {
		pr := v.pressure[pools[i].Name]
		pools[i].Queued, pools[i].Inflight = pr.Queued(), pr.Inflight()
	}
	// Unmanaged pools after the managed ones, by name; nodes by ordinal.
	order := make([]int, 0, len(pools)-managed)
	for i := managed; i < len(pools); i++ {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(pools[a].Name, pools[b].Name) })
	outP, outN := pools[:managed:managed], nodes[:managed:managed]
	for _, i := range order {
		outP, outN = append(outP, pools[i]), append(outN, nodes[i])
	}
	for _, ns := range outN {
		slices.SortStableFunc(ns, func(a, b httpapi.NodeJSON) int {
			if a.Managed != b.Managed {
				if a.Managed {
					return -1
				}
				return 1
			}
			if a.Ordinal != b.Ordinal {
				return a.Ordinal - b.Ordinal
			}
			return strings.Compare(a.ID, b.ID)
		})
	}
	return outP, outN, nil
}

func addOut(a, b httpapi.ResourcesOut) httpapi.ResourcesOut {
	return httpapi.ResourcesOut{CPUCores: a.CPUCores + b.CPUCores, GPUUnits: a.GPUUnits + b.GPUUnits, MemoryMB: a.MemoryMB + b.MemoryMB}
}

// Pools lists every pool: the autoscaled ones (Config.PoolStatus) merged
// with the head's workers and last pressure report, then the pools that
// only the head knows (workers that joined by themselves, or queued
// instances no pool serves).
func (h *Head) Pools(ctx context.Context) ([]httpapi.PoolJSON, error) {
	pools, _, err := h.assemble(ctx)
	return pools, err
}

// Nodes lists the nodes of pool (of every pool when pool is nil): each
// autoscaled node merged with the worker of its name, then the workers no
// autoscaler lists.
func (h *Head) Nodes(ctx context.Context, pool *string) ([]httpapi.NodeJSON, error) {
	pools, nodes, err := h.assemble(ctx)
	if err != nil {
		return nil, err
	}
	out := []httpapi.NodeJSON{}
	for i := range pools {
		if pool == nil || pools[i].Name == *pool {
			out = append(out, nodes[i]...)
		}
	}
	return out, nil
}
