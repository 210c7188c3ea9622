package operator

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/autoscale"
	"github.com/tide-project/tide/internal/controller"
)

// Metric names, in the head's conventions (tide_<part>_<what>_<unit>).
const (
	MetricLoopSeconds   = "tide_kube_loop_seconds"
	MetricPendingPods   = "tide_kube_pending_pods"
	MetricUnmatchedPods = "tide_kube_unmatched_pods"
	// MetricUnmodelledPods counts the waiting pods whose placement rules
	// tide models only in part (counted by their requests alone).
	MetricUnmodelledPods = "tide_kube_unmodelled_pods"
	MetricMarkedNodes    = "tide_kube_marked_nodes"
	MetricScaleUpLatency = "tide_kube_unschedulable_to_create_seconds"
	// MetricProvisioningRequests counts the ProvisioningRequests tide
	// answers, by class and state (provreq.State*).
	MetricProvisioningRequests = "tide_kube_provisioning_requests"
)

type metrics struct {
	loop      prometheus.Histogram
	pending   *prometheus.GaugeVec
	markedN   *prometheus.GaugeVec
	unmatched prometheus.Gauge
	// unmodelled: MetricUnmodelledPods
	unmodelled prometheus.Gauge
	latency    prometheus.Histogram
	// provreqs: MetricProvisioningRequests
	provreqs *prometheus.GaugeVec
	// figures are the target-tracking pools' M, N and
	// CapacityProviderReservation (autoscale.FigureMetrics).
	figures *autoscale.FigureMetrics
	// disrupted is tide_nodes_disrupted_total{pool,reason}, shared with the
	// pool controllers (nil without a registry).
	disrupted *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		loop: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricLoopSeconds,
			Help: "Duration of one pass of tide kube over every NodePool.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPendingPods,
			Help: "Unschedulable pods matched to the pool."}, []string{"pool"}),
		markedN: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricMarkedNodes,
			Help: "Nodes of the pool carrying the deletion-candidate taint."}, []string{"pool"}),
		unmatched: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricUnmatchedPods,
			Help: "Unschedulable pods no NodePool can run."}),
		unmodelled: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricUnmodelledPods,
			Help: "Unschedulable pods whose placement rules tide models only in part: counted by their requests alone."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricScaleUpLatency,
			Help:    "Time from a pod seen Unschedulable to the pass that launched nodes for it (provider Create).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		provreqs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricProvisioningRequests,
			Help: "ProvisioningRequests tide kube answers, by provisioning class and state (waiting, provisioned, consumed, no-capacity, booking-expired, failed, invalid)."},
			[]string{"class", "state"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	var err error
	m.figures, err = autoscale.NewFigureMetrics(reg)
	errs = append(errs, err)
	m.disrupted, err = controller.DisruptedCounter(reg)
	errs = append(errs, err)
	for _, c := range []prometheus.Collector{m.loop, m.pending, m.markedN, m.unmatched, m.unmodelled, m.latency, m.provreqs} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

func (m *metrics) observeLoop(d time.Duration) { m.loop.Observe(d.Seconds()) }

func (m *metrics) pool(name string, pending, marked int) {
	m.pending.WithLabelValues(name).Set(float64(pending))
	m.markedN.WithLabelValues(name).Set(float64(marked))
}

func (m *metrics) forget(name string) {
	m.figures.Forget(name)
	m.pending.DeleteLabelValues(name)
	m.markedN.DeleteLabelValues(name)
}

// requests sets MetricProvisioningRequests to the pass's counts by
// (class, state); nil: none.
func (m *metrics) requests(counts map[[2]string]int) {
	m.provreqs.Reset()
	for k, n := range counts {
		m.provreqs.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}
