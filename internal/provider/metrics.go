package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdk "github.com/tide-project/tide/sdk/provider"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/clock"
)

// Op names a sdk.Provider method, as a metric label and in call logs.
type Op string

// The operations of a sdk.Provider.
const (
	OpOfferings Op = "offerings"
	OpCreate    Op = "create"
	OpConfigure Op = "configure"
	OpDrain     Op = "drain"
	OpDelete    Op = "delete"
	OpGet       Op = "get"
	OpList      Op = "list"
)

// Ops lists every operation.
var Ops = []Op{OpOfferings, OpCreate, OpConfigure, OpDrain, OpDelete, OpGet, OpList}

// The metric names Instrument registers.
const (
	MetricDuration = "tide_provider_operation_duration_seconds"
	MetricErrors   = "tide_provider_operation_errors_total"
)

// InstrumentOption configures Instrument.
type InstrumentOption func(*instrumentConfig)

type instrumentConfig struct {
	name  string
	clock clock.Clock
}

// WithName sets the "provider" label (default "default"), so that several
// instrumented providers can share one registry.
func WithName(name string) InstrumentOption {
	return func(c *instrumentConfig) { c.name = name }
}

// WithClock sets the clock that times calls (default the wall clock); the
// simulator passes its virtual clock.
func WithClock(clk clock.Clock) InstrumentOption {
	return func(c *instrumentConfig) { c.clock = clk }
}

// Instrument wraps p so that every call records its latency in the histogram
// tide_provider_operation_duration_seconds{provider, operation} and every
// failed call increments tide_provider_operation_errors_total{provider,
// operation, error}, where error is sdk.Kind(err). The metrics are registered on
// reg (nil: not registered); wrapping several providers on one registry
// shares the collectors. Instrument panics if reg already holds different
// metrics under these names, a programming error like
// prometheus.MustRegister's. The wrapper adds no behaviour of its own.
func Instrument(p sdk.Provider, reg prometheus.Registerer, opts ...InstrumentOption) sdk.Provider {
	cfg := instrumentConfig{name: "default", clock: clock.Real{}}
	for _, o := range opts {
		o(&cfg)
	}
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricDuration,
		Help:    "Latency of capacity provider calls, by provider and operation.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"provider", "operation"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricErrors,
		Help: "Failed capacity provider calls, by provider, operation and error kind.",
	}, []string{"provider", "operation", "error"})
	if reg != nil {
		duration = registerShared(reg, duration)
		errs = registerShared(reg, errs)
	}
	m := &instrumented{next: p, clock: cfg.clock, duration: make(map[Op]prometheus.Observer, len(Ops))}
	for _, op := range Ops {
		m.duration[op] = duration.WithLabelValues(cfg.name, string(op))
	}
	m.errs = errs.MustCurryWith(prometheus.Labels{"provider": cfg.name})
	return m
}

func registerShared[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(T); ok {
			return existing
		}
	}
	panic(fmt.Errorf("provider: register metrics: %w", err))
}

type instrumented struct {
	next     sdk.Provider
	clock    clock.Clock
	duration map[Op]prometheus.Observer
	errs     *prometheus.CounterVec
}

var _ sdk.Provider = (*instrumented)(nil)

func (m *instrumented) record(op Op, start time.Time, err error) {
	m.duration[op].Observe(m.clock.Now().Sub(start).Seconds())
	if err != nil {
		m.errs.WithLabelValues(string(op), sdk.Kind(err)).Inc()
	}
}

func (m *instrumented) Offerings(ctx context.Context) ([]sdk.Offering, error) {
	start := m.clock.Now()
	out, err := m.next.Offerings(ctx)
	m.record(OpOfferings, start, err)
	return out, err
}

func (m *instrumented) Create(ctx context.Context, req sdk.CreateRequest) (sdk.Ack, error) {
	start := m.clock.Now()
	ack, err := m.next.Create(ctx, req)
	m.record(OpCreate, start, err)
	return ack, err
}

func (m *instrumented) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.Ack, error) {
	start := m.clock.Now()
	ack, err := m.next.Configure(ctx, req)
	m.record(OpConfigure, start, err)
	return ack, err
}

func (m *instrumented) Drain(ctx context.Context, req sdk.DrainRequest) (sdk.Ack, error) {
	start := m.clock.Now()
	ack, err := m.next.Drain(ctx, req)
	m.record(OpDrain, start, err)
	return ack, err
}

func (m *instrumented) Delete(ctx context.Context, req sdk.DeleteRequest) (sdk.Ack, error) {
	start := m.clock.Now()
	ack, err := m.next.Delete(ctx, req)
	m.record(OpDelete, start, err)
	return ack, err
}

func (m *instrumented) Get(ctx context.Context, id string) (sdk.Machine, error) {
	start := m.clock.Now()
	out, err := m.next.Get(ctx, id)
	m.record(OpGet, start, err)
	return out, err
}

func (m *instrumented) List(ctx context.Context, f sdk.Filter) ([]sdk.Machine, error) {
	start := m.clock.Now()
	out, err := m.next.List(ctx, f)
	m.record(OpList, start, err)
	return out, err
}
