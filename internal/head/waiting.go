package head

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/store"
)

// PoolCapacity is what WaitingReason knows of one pool: what it can launch
// (an autoscaled pool's offerings, selector and size) and the workers it
// has now.
type PoolCapacity struct {
	Name string
	// Managed pools are autoscaled: they launch nodes of Offerings, up to
	// Max, for instances whose labels match Selector.
	Managed   bool
	Offerings []capacity.Offering
	Selector  map[string]string
	Max       int
	// Ready and Pending count the managed pool's nodes: joined, and on
	// their way.
	Ready, Pending int
	// Workers are the pool's registered workers that are not offline.
	Workers []WorkerCapacity
}

// WorkerCapacity is one worker's name and total resources.
type WorkerCapacity struct {
	Name      string
	Resources capacity.Resources
}

// WaitRequest is a pending instance as WaitingReason sees it.
type WaitRequest struct {
	// Pool is the pool the instance asks for; "" when it names none and no
	// pool's selector and offerings took it at submit.
	Pool   string
	Labels map[string]string
	// Requests are the instance's resources, GPUs as a count.
	Requests capacity.Resources
	// Targeted is set for an instance bound to one worker (target_worker
	// or gpu_indices): only the scheduler can say why it waits.
	Targeted bool
	// Scheduler is the scheduler's reason, from the current workers only.
	Scheduler string
}

// WaitingReason says why a pending instance is not placed, from its request
// and the pools alone (no I/O, no clock). never reports that no pool can
// ever run it as things are configured: it fits no offering of any pool
// that may launch nodes for it and no worker that has joined, or its pool
// does not exist. Otherwise the reason says what it waits for: nodes on
// their way, a pool at its maximum, a scale-up, or the scheduler's reason.
func WaitingReason(req WaitRequest, pools []PoolCapacity) (reason string, never bool) {
	if req.Targeted {
		return req.Scheduler, false
	}
	managed := false
	for i := range pools {
		managed = managed || pools[i].Managed
	}
	var cands []*PoolCapacity
	if req.Pool != "" {
		for i := range pools {
			if pools[i].Name == req.Pool {
				cands = append(cands, &pools[i])
			}
		}
		if len(cands) == 0 {
			if !managed && len(pools) == 0 {
				return req.Scheduler, false // nothing known yet: workers may join it
			}
			return fmt.Sprintf("pool %s does not exist", req.Pool), true
		}
	} else {
		for i := range pools {
			p := &pools[i]
			if (p.Managed && selects(p.Selector, req.Labels)) || (p.Name == "" && len(p.Workers) > 0) {
				cands = append(cands, p)
			}
		}
		if len(cands) == 0 {
			if !managed {
				return req.Scheduler, false // no worker yet, none launched for it
			}
			return "no pool selects labels " + labelList(req.Labels), true
		}
	}
	for _, p := range cands {
		if !p.fits(req.Requests) {
			continue
		}
		switch {
		case !p.Managed:
			return req.Scheduler, false
		case p.Pending > 0:
			return fmt.Sprintf("waiting for capacity on its way: pool %s has %s starting", p.Name, plural(p.Pending, "node")), false
		case p.Max > 0 && p.Ready+p.Pending >= p.Max:
			return fmt.Sprintf("waiting for room: pool %s is at its maximum of %s", p.Name, plural(p.Max, "node")), false
		case req.Scheduler != "" && p.Ready > 0 && req.Scheduler != "insufficient free resources" &&
			!strings.HasPrefix(req.Scheduler, "no worker in pool"):
			return req.Scheduler, false
		}
		return fmt.Sprintf("waiting for pool %s to scale up", p.Name), false
	}
	subject := "no pool can fit "
	if req.Pool != "" {
		subject = fmt.Sprintf("pool %s cannot fit ", req.Pool)
	}
	return subject + shortfall(req.Requests, cands), true
}

// fits reports whether one of the pool's offerings (when it launches
// nodes) or one of its workers could ever hold r.
func (p *PoolCapacity) fits(r capacity.Resources) bool {
	if p.Managed {
		for _, o := range p.Offerings {
			if r.Fits(o.Resources) {
				return true
			}
		}
	}
	for _, w := range p.Workers {
		if r.Fits(w.Resources) {
			return true
		}
	}
	return false
}

// dimension is one resource of a request: its name, how it reads in a
// reason, and its amount in a Resources.
type dimension struct {
	name   string
	format func(int64) string
	of     func(capacity.Resources) int64
}

func dimensions(r capacity.Resources) []dimension {
	ds := []dimension{
		{"cpu", func(v int64) string { return fmt.Sprintf("%g", float64(v)/1000) }, func(x capacity.Resources) int64 { return x.MilliCPU }},
		{"memory", func(v int64) string { return fmt.Sprintf("%d MB", v>>20) }, func(x capacity.Resources) int64 { return x.Memory }},
		{"gpus", func(v int64) string { return fmt.Sprint(v) }, func(x capacity.Resources) int64 { return x.GPUs }},
	}
	for _, name := range r.ExtendedNames() {
		ds = append(ds, dimension{name, func(v int64) string { return fmt.Sprint(v) },
			func(x capacity.Resources) int64 { return x.Extended[name] }})
	}
	return ds
}

// shortfall names the first resource of r that exceeds every offering and
// worker of pools, and the largest of them in it: "cpu 4: largest offering
// local-1cpu has 1". When each resource fits somewhere but never all at
// once, it says so.
func shortfall(r capacity.Resources, pools []*PoolCapacity) string {
	for _, d := range dimensions(r) {
		want := d.of(r)
		if want <= 0 {
			continue
		}
		best, bestName, found := int64(0), "", false
		consider := func(name string, have int64) {
			if !found || have > best {
				best, bestName, found = have, name, true
			}
		}
		for _, p := range pools {
			if p.Managed {
				for _, o := range p.Offerings {
					consider("offering "+o.Type, d.of(o.Resources))
				}
			}
			for _, w := range p.Workers {
				consider("worker "+w.Name, d.of(w.Resources))
			}
		}
		if !found {
			return fmt.Sprintf("%s %s: no offering or worker to run it", d.name, d.format(want))
		}
		if want > best {
			return fmt.Sprintf("%s %s: largest %s has %s", d.name, d.format(want), bestName, d.format(best))
		}
	}
	var parts []string
	for _, d := range dimensions(r) {
		if v := d.of(r); v > 0 {
			parts = append(parts, d.name+" "+d.format(v))
		}
	}
	return strings.Join(parts, ", ") + ": no single offering or worker has all of it"
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func labelList(m map[string]string) string {
	if len(m) == 0 {
		return "(none)"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// poolCapacities joins the autoscalers' pools with the head's workers.
func (h *Head) poolCapacities(workers []*store.Worker) []PoolCapacity {
	statuses := h.poolStatuses()
	out := make([]PoolCapacity, 0, len(statuses)+1)
	index := map[string]int{}
	for _, ps := range statuses {
		if _, dup := index[ps.Name]; dup {
			continue
		}
		index[ps.Name] = len(out)
		out = append(out, PoolCapacity{Name: ps.Name, Managed: true, Offerings: ps.Offerings, Selector: ps.Selector,
			Max: max(ps.Nodes.Max, ps.Nodes.Min), Ready: ps.Ready, Pending: ps.Pending})
	}
	for _, w := range workers {
		if w.Status == store.WorkerOffline {
			continue
		}
		i, ok := index[w.Pool]
		if !ok {
			i = len(out)
			index[w.Pool] = i
			out = append(out, PoolCapacity{Name: w.Pool})
		}
		out[i].Workers = append(out[i].Workers, WorkerCapacity{Name: w.ID, Resources: w.Capacity})
	}
	return out
}

// waitRequest is the WaitRequest of a stored pending instance.
func (h *Head) waitRequest(in *store.Instance) WaitRequest {
	r := in.Requests.Clone()
	if len(in.RequestedGPUIndices) > 0 {
		r.GPUs = int64(len(in.RequestedGPUIndices))
	}
	h.mu.Lock()
	why := h.waiting[in.ID]
	h.mu.Unlock()
	if strings.HasPrefix(why, "held until") && instanceHeld(in, h.clk.Now()) == "" {
		// The last pass saw a fence hold that is over now, or was
		// released (its worker's machine deleted): not a reason any more.
		why = ""
	}
	return WaitRequest{Pool: in.Pool, Labels: in.Labels, Requests: r,
		Targeted: in.TargetWorker != "" || len(in.RequestedGPUIndices) > 0, Scheduler: why}
}

// WaitingReasons says why each PENDING instance of ins waits ("" for the
// others); GET /instances and GET /instances/{id} show it as
// waiting_reason.
func (h *Head) WaitingReasons(ctx context.Context, ins []*store.Instance) []string {
	out := make([]string, len(ins))
	var pools []PoolCapacity
	loaded := false
	for i, in := range ins {
		if in.Status != store.StatusPending || !in.CancelRequestedAt.IsZero() {
			continue
		}
		if why := instanceHeld(in, h.clk.Now()); why != "" {
			out[i] = why
			continue
		}
		if !loaded {
			loaded = true
			ws, err := h.st.ListWorkers(ctx)
			if err != nil {
				h.log.Warn("waiting reasons: list workers", "err", err)
			}
			pools = h.poolCapacities(ws)
		}
		out[i], _ = WaitingReason(h.waitRequest(in), pools)
	}
	return out
}

// knownPool reports whether name is an autoscaled pool or the pool of a
// registered worker; names lists the pools the head knows ("" is the
// default pool of workers that name none). Before the first worker of a
// head without autoscalers joins, it knows none.
func (h *Head) knownPool(ctx context.Context, name string) (known bool, names []string, err error) {
	seen := map[string]bool{}
	for _, ps := range h.poolStatuses() {
		if ps.Name == name {
			return true, nil, nil
		}
		seen[ps.Name] = true
	}
	ws, err := h.st.ListWorkers(ctx)
	if err != nil {
		return false, nil, err
	}
	for _, w := range ws {
		if w.Pool == name {
			return true, nil, nil
		}
		seen[w.Pool] = true
	}
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return false, names, nil
}

// reportUnfit records one event for each newly unplaced instance that no
// pool can ever fit (WaitingReason's never). Each pending instance is
// checked once; labels are read from the store only for an instance that
// names no pool and fits no worker, the one case where they decide.
func (h *Head) reportUnfit(ctx context.Context, st *store.SchedulingState, waiting map[string]string) {
	h.checkMu.Lock()
	defer h.checkMu.Unlock()
	if h.checked == nil {
		h.checked = map[string]bool{}
	}
	if len(h.checked) > 0 {
		pending := make(map[string]bool, len(st.Pending))
		for _, p := range st.Pending {
			pending[p.ID] = true
		}
		for id := range h.checked {
			if !pending[id] {
				delete(h.checked, id)
			}
		}
	}
	var pools []PoolCapacity
	managed := len(h.poolStatuses()) > 0
	for _, p := range st.Pending {
		why, unplaced := waiting[p.ID]
		if !unplaced || h.checked[p.ID] || p.TargetWorker != "" || len(p.RequestedGPUIndices) > 0 {
			continue
		}
		h.checked[p.ID] = true
		if pools == nil {
			pools = h.poolCapacities(st.Workers)
		}
		req := WaitRequest{Pool: p.Pool, Requests: p.Requests, Scheduler: why}
		if p.Pool == "" && managed { // only then do selectors decide
			in, err := h.st.GetInstance(ctx, p.ID)
			if err != nil {
				continue
			}
			req.Labels = in.Labels
		}
		reason, never := WaitingReason(req, pools)
		if !never {
			continue
		}
		if err := h.RecordEvent(ctx, Event{Pool: p.Pool, Type: "Warning", Reason: "unschedulable",
			Message: fmt.Sprintf("instance %s: %s", p.ID, reason)}); err != nil {
			h.log.Warn("record unschedulable event", "instance", p.ID, "err", err)
		}
	}
}
