package autoscale

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/policy"
)

// The metric names of a target-tracking pool's figures (seed 002: ECS
// cluster auto scaling publishes CapacityProviderReservation = M/N×100 every
// minute, and tide's pools do on every evaluation).
const (
	MetricReservation = "tide_pool_capacity_provider_reservation_percent"
	MetricM           = "tide_pool_target_tracking_m_nodes"
	MetricN           = "tide_pool_target_tracking_n_nodes"
)

// FigureMetrics exports the figures of target-tracking decisions as gauges
// per pool. Its methods are safe for concurrent use; a nil *FigureMetrics
// records nothing.
type FigureMetrics struct {
	reservation, m, n *prometheus.GaugeVec
}

// NewFigureMetrics registers the gauges on reg (reusing them when another
// pool's loop registered them already); nil reg: nil, no metrics.
func NewFigureMetrics(reg prometheus.Registerer) (*FigureMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	var errs []error
	gauge := func(name, help string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"})
		if err := reg.Register(g); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				if existing, ok := dup.ExistingCollector.(*prometheus.GaugeVec); ok {
					return existing
				}
			}
			errs = append(errs, fmt.Errorf("autoscale: register %s: %w", name, err))
		}
		return g
	}
	f := &FigureMetrics{
		reservation: gauge(MetricReservation, "CapacityProviderReservation of a target-tracking pool: M/N×100 (100 for 0/0, 200 for M>0 and N=0)."),
		m:           gauge(MetricM, "M of a target-tracking pool: the nodes its running and provisioning work needs (seed 002)."),
		n:           gauge(MetricN, "N of a target-tracking pool: its nodes that are up (seed 002)."),
	}
	return f, errors.Join(errs...)
}

// Observe records d's target-tracking figures for pool (nothing for other
// policies' decisions).
func (f *FigureMetrics) Observe(pool string, d policy.Decision) {
	if f == nil || d.TargetTracking == nil {
		return
	}
	tt := d.TargetTracking
	f.reservation.WithLabelValues(pool).Set(tt.Reservation)
	f.m.WithLabelValues(pool).Set(float64(tt.M))
	f.n.WithLabelValues(pool).Set(float64(tt.N))
}

// Forget drops pool's series (the pool was removed).
func (f *FigureMetrics) Forget(pool string) {
	if f == nil {
		return
	}
	for _, g := range []*prometheus.GaugeVec{f.reservation, f.m, f.n} {
		g.DeleteLabelValues(pool)
	}
}
