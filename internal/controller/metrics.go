package controller

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The metric names the controller registers.
const (
	MetricDesired  = "tide_pool_desired_nodes"
	MetricCurrent  = "tide_pool_current_nodes"
	MetricPending  = "tide_pool_pending_nodes"
	MetricDraining = "tide_pool_draining_nodes"
	MetricEvents   = "tide_controller_events_total"
	// MetricDisrupted counts the nodes a pool replaced or emptied on
	// purpose, by reason (repair, drift, expired, replace, consolidate).
	MetricDisrupted = "tide_nodes_disrupted_total"
	// MetricUnhealthy is the pool's joined nodes that are unhealthy now.
	MetricUnhealthy = "tide_pool_unhealthy_nodes"
	// MetricBreaker is 1 while the repair breaker holds the pool's repairs.
	MetricBreaker = "tide_pool_repair_breaker_open"
)

// DisruptedCounter returns tide_nodes_disrupted_total{pool,reason} on reg
// (registered once, shared by every pool and by the consolidators).
func DisruptedCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return registerShared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricDisrupted,
		Help: "Nodes disrupted on purpose (replaced, or emptied by consolidation), by pool and reason.",
	}, []string{"pool", "reason"}))
}

// poolMetrics are one pool's children of the shared collectors. A nil
// *poolMetrics records nothing.
type poolMetrics struct {
	desired, current, pending, draining prometheus.Gauge
	events                              *prometheus.CounterVec // curried with the pool
	disrupted                           *prometheus.CounterVec // curried with the pool
	unhealthy, breaker                  prometheus.Gauge
}

// newPoolMetrics registers (or reuses) the collectors on reg and returns the
// pool's children; nil when reg is nil. Controllers of many pools share one
// registry.
func newPoolMetrics(reg prometheus.Registerer, pool string) (*poolMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	gauge := func(name, help string) (*prometheus.GaugeVec, error) {
		return registerShared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"}))
	}
	var errs []error
	var vecs [6]*prometheus.GaugeVec
	for i, m := range []struct{ name, help string }{
		{MetricDesired, "Desired node count of the pool's reconciler."},
		{MetricCurrent, "Joined nodes of the pool, draining ones included."},
		{MetricPending, "Nodes of the pool being launched: provision calls in flight and booting machines."},
		{MetricDraining, "Nodes of the pool being drained."},
		{MetricUnhealthy, "Joined nodes of the pool that are unhealthy (worker OFFLINE, Node NotReady or a named condition)."},
		{MetricBreaker, "1 while more of the pool's nodes are unhealthy than its repair breaker allows: nothing is repaired."},
	} {
		v, err := gauge(m.name, m.help)
		errs = append(errs, err)
		vecs[i] = v
	}
	events, err := registerShared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricEvents,
		Help: "Events of pool controllers, by pool, type (Normal or Warning) and reason.",
	}, []string{"pool", "type", "reason"}))
	errs = append(errs, err)
	disrupted, err := DisruptedCounter(reg)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &poolMetrics{
		desired: vecs[0].WithLabelValues(pool), current: vecs[1].WithLabelValues(pool),
		pending: vecs[2].WithLabelValues(pool), draining: vecs[3].WithLabelValues(pool),
		events:    events.MustCurryWith(prometheus.Labels{"pool": pool}),
		disrupted: disrupted.MustCurryWith(prometheus.Labels{"pool": pool}),
		unhealthy: vecs[4].WithLabelValues(pool), breaker: vecs[5].WithLabelValues(pool),
	}, nil
}

func registerShared[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("metrics: %w", err)
}

func (m *poolMetrics) set(desired, current, pending, draining int) {
	if m == nil {
		return
	}
	m.desired.Set(float64(desired))
	m.current.Set(float64(current))
	m.pending.Set(float64(pending))
	m.draining.Set(float64(draining))
}

func (m *poolMetrics) event(typ, reason string) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(typ, reason).Inc()
}

func (m *poolMetrics) disrupt(reason string) {
	if m == nil {
		return
	}
	m.disrupted.WithLabelValues(reason).Inc()
}

func (m *poolMetrics) health(unhealthy int, breaker bool) {
	if m == nil {
		return
	}
	m.unhealthy.Set(float64(unhealthy))
	b := 0.0
	if breaker {
		b = 1
	}
	m.breaker.Set(b)
}
