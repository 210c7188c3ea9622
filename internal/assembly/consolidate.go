package assembly

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/consolidate"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/store"
)

// EventConsolidate is the reason of the event a consolidation move records:
// which node is emptied, which instances move, the saving it expects and
// the work it loses.
const EventConsolidate = "consolidate"

// consolidator runs one pool's consolidation: every Config.Every it
// evaluates consolidate.Decide on the pool's joined nodes and carries the
// moves out through the head (cordon, then requeue the restartable
// instances elsewhere). The emptied node is then an idle node like any
// other: the pool's policy releases it and its controller drains and
// deletes it. A node it emptied that scale-down does not take (the pool's
// floor) is uncordoned after a grace of a few periods.
type consolidator struct {
	pool  config.Pool
	cfg   consolidate.Config
	h     *head.Head
	ctl   *controller.Controller
	clk   clock.Clock
	log   *slog.Logger
	emit  func(controller.Event)
	moved map[string]time.Time // worker -> when this consolidator emptied it
	// disrupted is tide_nodes_disrupted_total (nil: not counted).
	disrupted *prometheus.CounterVec
}

// newConsolidator returns the pool's consolidator, or nil when the pool
// does not consolidate. The karpenter policy consolidates by its own rule
// (consolidate.Karpenter); the seed policies never do.
func newConsolidator(pc config.Pool, h *head.Head, ctl *controller.Controller, log *slog.Logger, emit func(controller.Event),
	reg prometheus.Registerer) (*consolidator, error) {
	cfg, err := pc.Consolidation()
	if err != nil {
		return nil, err
	}
	switch pc.PolicyConfig().Policy {
	case policy.Karpenter:
		cfg = consolidate.Karpenter()
	case "", policy.Tide:
	default:
		return nil, nil
	}
	if !cfg.Enabled {
		return nil, nil
	}
	c := &consolidator{pool: pc, cfg: cfg, h: h, ctl: ctl, clk: clock.Real{}, log: log, emit: emit,
		moved: map[string]time.Time{}}
	if reg != nil {
		if c.disrupted, err = controller.DisruptedCounter(reg); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// run evaluates every Config.Every until ctx ends.
func (c *consolidator) run(ctx context.Context) error {
	t := c.clk.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if err := c.pass(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("consolidation pass", "err", err)
		}
	}
}

// pass is one evaluation and its moves.
func (c *consolidator) pass(ctx context.Context) error {
	st := c.ctl.Status()
	if !st.Started || st.Deposed {
		return nil
	}
	now := c.clk.Now()
	var workers []string
	ordinal := map[string]int{}
	offering := map[string]string{}
	present := map[string]bool{}
	disrupting := 0
	for _, n := range st.Nodes {
		present[n.MachineID] = true
		if n.Draining {
			disrupting++
			continue
		}
		if !n.Joined {
			continue
		}
		workers = append(workers, n.MachineID)
		ordinal[n.MachineID], offering[n.MachineID] = int(n.ID), n.Offering
	}
	view, err := c.h.ConsolidationNodes(ctx, workers)
	if err != nil {
		return err
	}
	// Nodes emptied earlier: gone, still draining their work, or kept by
	// scale-down (then uncordoned after a grace).
	for w, at := range c.moved {
		n := view[w]
		switch {
		case !present[w] || n == nil:
			delete(c.moved, w)
		case !busy(n) && now.Sub(at) > c.grace():
			if err := c.h.Cordon(ctx, w, false); err != nil {
				return err
			}
			n.Cordoned = false
			delete(c.moved, w)
			c.log.Info("consolidated node kept by scale-down: uncordoned", "worker", w)
		default:
			disrupting++
		}
	}
	pr := c.h.Pressure()[c.pool.Name]
	in := consolidate.Input{Now: now, Disrupting: disrupting, MinNodes: c.pool.Nodes.Min, Pending: pr.Queued()}
	for _, w := range workers {
		n := view[w]
		if n == nil {
			continue
		}
		n.Ordinal = ordinal[w]
		n.PricePerHour = offeringPrice(c.pool.Offerings, offering[w])
		n.Protected = c.pool.Scaling.ProtectFirstNode && n.Ordinal == 0
		in.Nodes = append(in.Nodes, *n)
	}
	slices.SortFunc(in.Nodes, func(a, b consolidate.Node) int { return a.Ordinal - b.Ordinal })
	d := consolidate.Decide(c.cfg, in)
	var errs []error
	for _, m := range d.Moves {
		targets := make(map[string]string, len(m.Targets))
		for _, t := range m.Targets {
			targets[t.Instance] = t.Node
		}
		ids, err := c.h.MoveOff(ctx, m.Node, targets)
		if errors.Is(err, head.ErrNotMovable) {
			c.log.Info("consolidation move abandoned", "worker", m.Node, "err", err)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.moved[m.Node] = now
		if c.disrupted != nil {
			c.disrupted.WithLabelValues(c.pool.Name, EventConsolidate).Inc()
		}
		c.emit(controller.Event{Time: now, Pool: c.pool.Name, Type: controller.TypeNormal, Reason: EventConsolidate,
			Message: fmt.Sprintf("%s; moved %s (their attempts end with %s, new attempts placed elsewhere)",
				m, strings.Join(ids, ", "), store.ReasonMoved)})
	}
	return errors.Join(errs...)
}

// grace is how long an emptied node may stay before it is uncordoned:
// long enough for the policy's idle timeout and a drain.
func (c *consolidator) grace() time.Duration {
	pc := c.pool.PolicyConfig()
	_ = pc.Validate()
	return 3*c.cfg.Every + 2*pc.IdleTimeout + 2*c.pool.ReconcileEvery()
}

func busy(n *consolidate.Node) bool {
	for _, in := range n.Instances {
		if !in.Daemon {
			return true
		}
	}
	return false
}
