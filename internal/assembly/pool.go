package assembly

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/autoscale"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/policy"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/internal/provider/fleet"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/sdk/provider"
)

// pool is one running pool: its provider, controller and autoscale loop.
type pool struct {
	cfg     config.Pool
	pol     policy.Policy
	prov    provider.Provider // as built, not instrumented
	journal controller.Journal
	ctl     *controller.Controller
	loop    *autoscale.Pool
	cons    *consolidator // nil when the pool does not consolidate

	// retiring is set once the pool left the config: it drains to zero
	// nodes, then stops. Guarded by Assembly.mu.
	retiring bool

	cancel context.CancelFunc // stops the controller and the loop
	wg     sync.WaitGroup
}

// stopsMachines is a provider whose machines stop with it (local worker
// processes): stopping the assembly cancels their work first, and the pool
// restarts from its floor since nothing of it runs any more.
type stopsMachines interface {
	Shutdown(ctx context.Context) error
}

// closer is a provider that holds something to release.
type closer interface {
	Close() error
}

// check checks pools as a whole before anything is built: each pool's
// policy, controller settings and provider section, and, against the
// running pools (nil at start), that no pool changes its provider type.
// It returns each pool's provider builder. Errors name source (the file),
// the pool and the field.
func (a *Assembly) check(source string, pools []config.Pool, running map[string]*pool) ([]func() (provider.Provider, error), error) {
	var errs []error
	builds := make([]func() (provider.Provider, error), len(pools))
	for i, pc := range pools {
		where := fmt.Sprintf("%s: pool %q", source, pc.Name)
		if _, err := policy.New(pc.PolicyConfig()); err != nil {
			errs = append(errs, fmt.Errorf("%s: scaling: %w", where, err))
		}
		cc := a.controllerConfig(pc)
		if len(cc.Bootstrap) == 0 {
			cc.Bootstrap = []byte("checked at start") // made once the head listens
		}
		if err := cc.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		if old, ok := running[pc.Name]; ok && old.cfg.Provider.Type != pc.Provider.Type {
			errs = append(errs, fmt.Errorf("%s: provider.type: cannot change from %q to %q while the pool runs; remove the pool, reload, then add it back",
				where, old.cfg.Provider.Type, pc.Provider.Type))
			continue
		}
		b, err := build.New(pc, a.env)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		builds[i] = b
	}
	return builds, errors.Join(errs...)
}

// controllerConfig is pool pc's controller configuration.
func (a *Assembly) controllerConfig(pc config.Pool) controller.Config {
	lc, launch, register, _ := pc.LifecycleConfig() // validated with the file
	return controller.Config{
		Pool:              pc.Name,
		Reconcile:         pc.ReconcileConfig(),
		Offerings:         pc.Offerings,
		Bootstrap:         a.boot,
		ControllerID:      a.cfg.ControllerID,
		ReconcileInterval: pc.ReconcileEvery(),
		OrphanGrace:       time.Duration(pc.Scaling.OrphanGrace),
		LaunchTimeout:     launch,
		// A machine has joined once its worker registered with the head,
		// not once its process runs or its instance is tagged; machines
		// that run no worker (sim) join when the provider says so.
		RegistrationTimeout: register,
		RequireRegistration: build.RunsNoAgent(pc.Provider.Type) == "",
		Lifecycle:           lc,
		NodeHash:            pc.NodeHashes(nil),
	}
}

// newPool builds pool pc: its provider (prov when given, kept from the
// pool's previous configuration; else built), controller and loop. The
// loop starts from the desired count the controller will restore from the
// journal, so the two agree after a restart.
func (a *Assembly) newPool(ctx context.Context, pc config.Pool, build func() (provider.Provider, error), prov provider.Provider) (*pool, error) {
	plog := a.log.With("pool", pc.Name)
	pol, err := policy.New(pc.PolicyConfig())
	if err != nil {
		return nil, fmt.Errorf("scaling: %w", err)
	}
	journal, err := a.h.Store().Journal(pc.Name)
	if err != nil {
		return nil, err
	}
	js, err := journal.Load(ctx)
	if err != nil {
		return nil, err
	}
	desired := pc.Nodes.Initial()
	if js.HasDesired && pc.Nodes.Elastic {
		desired = pc.Nodes.Clamp(js.Desired)
	}
	if prov == nil {
		if prov, err = build(); err != nil {
			return nil, err
		}
	}
	p := &pool{cfg: pc, pol: pol, prov: prov, journal: journal}
	url, err := poolHeadURL(a.h.Scheme(), a.ln.Addr(), prov)
	if err != nil {
		p.release()
		return nil, err
	}
	emit := func(e controller.Event) {
		if err := a.h.RecordEvent(context.Background(), head.FromController(e)); err != nil {
			plog.Warn("recording an event", "err", err, "event", e.String())
		}
	}
	ctl, err := controller.New(a.controllerConfig(pc), controller.Deps{
		Provider: tideprovider.Instrument(joining{Provider: prov, head: a.h, headURL: url}, a.cfg.Registry, tideprovider.WithName(pc.Provider.Type)),
		Journal:  journal,
		Workload: poolWorkload(a.h.Workload(), pc.Provider.Type),
		Clock:    clock.Real{},
		Logger:   plog.With("component", "controller"),
		Metrics:  a.cfg.Registry,
		Events:   controller.EventFunc(emit),
	})
	if err != nil {
		p.release()
		return nil, err
	}
	p.ctl = ctl
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_autoscaler_decisions_total",
		Help: "Policy evaluations by pool, policy and reason code (changed says whether the desired count moved)."},
		[]string{"pool", "policy", "reason", "changed"})
	if err := a.cfg.Registry.Register(decisions); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			p.release()
			return nil, err
		}
		decisions = are.ExistingCollector.(*prometheus.CounterVec)
	}
	figures, err := autoscale.NewFigureMetrics(a.cfg.Registry)
	if err != nil {
		p.release()
		return nil, err
	}
	loop, err := autoscale.New(autoscale.Config{
		Figures:  figures,
		Pool:     pc.Name,
		Policy:   pol,
		Desired:  desired,
		Interval: pc.EvaluateEvery(),
		Ordinal:  func(id string) (reconcile.NodeID, bool) { return controller.ParseMachineID(pc.Name, id) },
	}, ctl, clock.Real{}, func(e autoscale.Event) {
		decisions.WithLabelValues(e.Pool, pol.Name(), e.Reason, fmt.Sprint(e.Changed)).Inc()
		typ := controller.TypeNormal
		if e.Reason == policy.CodeAtMax || e.Reason == policy.CodeAtLimit {
			typ = controller.TypeWarning
		}
		// The policy's code (scale-up, batching, at-max, ...): kebab-case,
		// like every other event reason.
		emit(controller.Event{Time: e.Time, Pool: e.Pool, Type: typ, Reason: e.Reason, Message: e.Message})
	})
	if err != nil {
		p.release()
		return nil, err
	}
	p.loop = loop
	if p.cons, err = newConsolidator(pc, a.h, ctl, plog.With("component", "consolidate"), emit, a.cfg.Registry); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// poolWorkload is the head's Workload for a pool of provider type typ:
// for machines that run no agent (sim), without its inspection (no worker
// will ever register for them: asking each tick would only load the store).
func poolWorkload(w controller.Workload, typ string) controller.Workload {
	if build.RunsNoAgent(typ) == "" {
		return w
	}
	return agentless{w}
}

// agentless is a Workload that is neither an Inspector nor an Evacuator.
type agentless struct{ w controller.Workload }

func (a agentless) Cordon(ctx context.Context, n controller.Node) error { return a.w.Cordon(ctx, n) }
func (a agentless) Uncordon(ctx context.Context, n controller.Node) error {
	return a.w.Uncordon(ctx, n)
}
func (a agentless) Busy(ctx context.Context, n controller.Node) (bool, error) {
	return a.w.Busy(ctx, n)
}

// Forget forwards to the head's Forget (controller.Forgetter).
func (a agentless) Forget(ctx context.Context, n controller.Node) error {
	if f, ok := a.w.(controller.Forgetter); ok {
		return f.Forget(ctx, n)
	}
	return nil
}

// MachineDeleted forwards to the head's (controller.DeletionObserver).
func (a agentless) MachineDeleted(ctx context.Context, n controller.Node) error {
	if o, ok := a.w.(controller.DeletionObserver); ok {
		return o.MachineDeleted(ctx, n)
	}
	return nil
}

// start runs the pool's controller and loop under ctx. Called with
// Assembly.mu held.
func (p *pool) start(ctx context.Context, a *Assembly) {
	ctx, p.cancel = context.WithCancel(ctx)
	run := func(f func(context.Context) error) {
		a.wg.Add(1)
		p.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer p.wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				select {
				case a.errs <- fmt.Errorf("pool %q: %w", p.cfg.Name, err):
				default:
				}
			}
		}()
	}
	run(p.ctl.Run)
	run(p.loop.Run)
	if p.cons != nil {
		run(p.cons.run)
	}
}

// halt stops the pool's controller and loop and waits for them; the
// provider and its machines are left as they are.
func (p *pool) halt() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

// release lets the provider go without stopping its machines (a later
// provider on the same state adopts them).
func (p *pool) release() {
	if c, ok := p.prov.(closer); ok {
		c.Close()
	}
}

// shutdown stops the provider. A provider whose machines stop with it
// leaves the pool with nothing running: the journal's desired count goes
// back to the pool's floor, so the next start launches nothing until work
// asks for it (issue 17: a restart relaunched the idle workers).
func (p *pool) shutdown(ctx context.Context, log *slog.Logger) {
	s, ok := p.prov.(stopsMachines)
	if !ok {
		p.release()
		return
	}
	if err := s.Shutdown(ctx); err != nil {
		log.Error("stopping machines", "pool", p.cfg.Name, "err", err)
		return
	}
	js, err := p.journal.Load(ctx)
	if err == nil && js.HasDesired && js.Desired != p.cfg.Nodes.Initial() {
		err = p.journal.SetDesired(ctx, js.Epoch, p.cfg.Nodes.Initial())
	}
	if err != nil {
		log.Warn("resetting the desired count", "pool", p.cfg.Name, "err", err)
	}
}

// releaseMachines is the stopping pool's last reconcile: with its
// controller halted, it sets the bounds to zero, reports which nodes still
// run work (after cancelWork, none should), and ticks the controller
// until every machine is drained and deleted or ctx ends. A provider whose
// machines stop with it leaves nothing behind this way: a restart finds no
// machine to adopt and relaunches nothing (issue 17). Providers whose
// machines outlive the assembly are left alone.
func (p *pool) releaseMachines(ctx context.Context, busy func(machine string) bool) {
	if _, ok := p.prov.(stopsMachines); !ok || !p.ctl.Status().Started {
		return
	}
	p.ctl.SetBounds(capacity.Fixed(0))
	for ctx.Err() == nil {
		// The loop that reported busy nodes is stopped: say it here, for
		// every node (one not yet seen joined gets it once it joins).
		for _, n := range p.ctl.Status().Nodes {
			p.ctl.ReportBusy(n.ID, busy(n.MachineID))
		}
		if err := p.ctl.Tick(ctx); err != nil {
			return
		}
		st := p.ctl.Status()
		if len(st.Nodes) == 0 && len(st.Deleting) == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// status is the pool as `tide pools` and `tide nodes` show it; retiring is
// read under Assembly.mu by the caller.
func (p *pool) status(retiring bool) head.PoolStatus {
	cs, as := p.ctl.Status(), p.loop.Status()
	ps := head.PoolStatus{Name: p.cfg.Name, Provider: p.cfg.Provider.Type, Policy: p.pol.Name(), Nodes: p.cfg.Nodes,
		Desired: cs.Desired, Ready: cs.Current, Pending: cs.Pending, Draining: cs.Draining,
		Reason: as.Reason, DecidedAt: as.At, Offerings: p.cfg.Offerings, Selector: p.cfg.Selector.Labels}
	if f, ok := p.prov.(interface{ Status() fleet.Status }); ok {
		st := f.Status()
		fp := &httpapi.FleetPoolJSON{Cluster: st.Cluster, Shard: st.Shard, Short: st.Short, Why: st.Why,
			LastSent: st.LastSend, LastError: st.LastError}
		for _, n := range st.Asked {
			fp.Asked += n
		}
		for _, n := range st.Granted {
			fp.Granted += n
		}
		ps.Fleet = fp
	}
	if retiring {
		ps.Nodes = capacity.Fixed(0)
		ps.Reason = "removed from the config: draining its nodes"
	}
	for _, n := range cs.Nodes {
		state := head.NodePending
		switch {
		case n.Draining:
			state = head.NodeDraining
		case n.Joined:
			state = head.NodeReady
		}
		ps.Machines = append(ps.Machines, head.MachineStatus{Ordinal: int(n.ID), MachineID: n.MachineID,
			Offering: n.Offering, State: state, Resources: offeringResources(p.cfg.Offerings, n.Offering),
			PricePerHour: offeringPrice(p.cfg.Offerings, n.Offering),
			Unhealthy:    n.Unhealthy, Replacing: n.Replacing, Disruption: n.Disruption})
	}
	return ps
}

// offeringPrice returns the price per hour of the named offering.
func offeringPrice(offs []capacity.Offering, name string) float64 {
	for _, o := range offs {
		if o.Name() == name {
			return o.PricePerHour
		}
	}
	return 0
}

// offeringResources returns the resources of the named offering.
func offeringResources(offs []capacity.Offering, name string) capacity.Resources {
	for _, o := range offs {
		if o.Name() == name {
			return o.Resources
		}
	}
	return capacity.Resources{}
}

// cancelWork cancels the running instances on the machines of pools whose
// provider stops them, with the head's default grace period, records an
// event for each, and waits until each is recorded as ended (bounded by the
// grace period and a margin): work is stopped, not killed, and its end is
// on record before the machines go.
func (a *Assembly) cancelWork(pools []*pool) {
	machines := map[string]string{} // worker name -> pool
	for _, p := range pools {
		if _, ok := p.prov.(stopsMachines); !ok {
			continue
		}
		for _, n := range p.ctl.Status().Nodes {
			machines[n.MachineID] = p.cfg.Name
		}
	}
	if len(machines) == 0 {
		return
	}
	ctx := context.Background()
	grace := cmp.Or(a.cfg.Head.DefaultGracePeriod, 30*time.Second)
	var ids []string
	for _, s := range []store.Status{store.StatusAssigned, store.StatusRunning} {
		ins, err := a.h.Instances(ctx, store.Filter{Status: s})
		if err != nil {
			a.log.Error("listing the running instances", "err", err)
			continue
		}
		for _, in := range ins {
			pool, ok := machines[in.AssignedWorker]
			if !ok {
				continue
			}
			if _, err := a.h.Cancel(ctx, in.ID, &grace); err != nil {
				a.log.Error("cancelling an instance", "instance", in.ID, "err", err)
				continue
			}
			ids = append(ids, in.ID)
			name := in.ID
			if in.Name != "" && in.Name != in.ID {
				name = fmt.Sprintf("%s (%s)", in.ID, in.Name)
			}
			if err := a.h.RecordEvent(ctx, head.Event{Pool: pool, Node: in.AssignedWorker, Type: controller.TypeNormal,
				Reason: "cancelled", Message: fmt.Sprintf("instance %s cancelled: %s is stopping (grace period %s)", name, a.cfg.Name, grace)}); err != nil {
				a.log.Warn("recording an event", "err", err)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	a.log.Info(a.cfg.Name+" is stopping: cancelling running instances (Ctrl-C again to exit at once)", "instances", len(ids), "grace", grace)
	deadline := time.Now().Add(grace + 10*time.Second)
	for time.Now().Before(deadline) {
		left := 0
		for _, id := range ids {
			in, err := a.h.Instance(ctx, id)
			if err == nil && !in.Status.Terminal() {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.log.Warn("instances did not stop within their grace period; their machines are stopped now", "instances", len(ids))
}
