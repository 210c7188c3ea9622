package provider

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	sdk "github.com/tide-project/tide/sdk/provider"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tide-project/tide/internal/clock"
)

// timedStub is a sdk.Provider whose calls take a fixed fake-clock time and fail
// with a scripted error.
type timedStub struct {
	clk  *clock.Fake
	took time.Duration
	err  error
}

func (s *timedStub) step() error { s.clk.Advance(s.took); return s.err }

func (s *timedStub) Offerings(context.Context) ([]sdk.Offering, error) { return nil, s.step() }
func (s *timedStub) Create(_ context.Context, r sdk.CreateRequest) (sdk.Ack, error) {
	return sdk.Ack{MachineID: r.MachineID, State: sdk.Creating}, s.step()
}
func (s *timedStub) Configure(_ context.Context, r sdk.ConfigureRequest) (sdk.Ack, error) {
	return sdk.Ack{MachineID: r.MachineID}, s.step()
}
func (s *timedStub) Drain(_ context.Context, r sdk.DrainRequest) (sdk.Ack, error) {
	return sdk.Ack{MachineID: r.MachineID}, s.step()
}
func (s *timedStub) Delete(_ context.Context, r sdk.DeleteRequest) (sdk.Ack, error) {
	return sdk.Ack{MachineID: r.MachineID}, s.step()
}
func (s *timedStub) Get(_ context.Context, id string) (sdk.Machine, error) {
	return sdk.Machine{ID: id}, s.step()
}
func (s *timedStub) List(context.Context, sdk.Filter) ([]sdk.Machine, error) { return nil, s.step() }

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func findMetric(mf *dto.MetricFamily, want map[string]string) *dto.Metric {
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		got := labelsOf(m)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

var fence1 = sdk.Fence{Controller: "c1", Epoch: 1, Seq: 1}

func TestInstrumentRecordsLatencyAndErrorsByKind(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(0, 0))
	stub := &timedStub{clk: clk, took: 250 * time.Millisecond}
	reg := prometheus.NewRegistry()
	p := Instrument(stub, reg, WithName("sim"), WithClock(clk))

	req := sdk.CreateRequest{Fence: fence1, Pool: "p", MachineID: "m", Offering: "o"}
	ack, err := p.Create(ctx, req)
	if err != nil || ack.MachineID != "m" || ack.State != sdk.Creating {
		t.Fatalf("Create through the decorator = %+v, %v; want the wrapped provider's answer", ack, err)
	}
	stub.err = sdk.NewInsufficientCapacity("o", nil)
	if _, err := p.Create(ctx, req); !sdk.IsInsufficientCapacity(err) {
		t.Fatalf("Create error = %v; the decorator must return the wrapped error unchanged", err)
	}
	stub.err = sdk.NewTransient(errors.New("throttled"), 0)
	stub.took = time.Second
	if _, err := p.Get(ctx, "m"); !sdk.IsTransient(err) {
		t.Fatalf("Get error = %v", err)
	}
	stub.err = sdk.NewNotFound("m")
	if _, err := p.Delete(ctx, sdk.DeleteRequest{Fence: fence1, Pool: "p", MachineID: "m"}); !sdk.IsNotFound(err) {
		t.Fatalf("Delete error = %v", err)
	}

	mfs := gather(t, reg)
	hist := []struct {
		op    Op
		count uint64
		sum   float64
	}{
		{OpCreate, 2, 0.5},
		{OpGet, 1, 1},
		{OpDelete, 1, 1},
		{OpList, 0, 0},
	}
	for _, h := range hist {
		m := findMetric(mfs[MetricDuration], map[string]string{"provider": "sim", "operation": string(h.op)})
		if m == nil {
			t.Fatalf("no %s series for %s", MetricDuration, h.op)
		}
		if got := m.GetHistogram().GetSampleCount(); got != h.count {
			t.Errorf("%s: sample count %d, want %d", h.op, got, h.count)
		}
		if got := m.GetHistogram().GetSampleSum(); math.Abs(got-h.sum) > 1e-9 {
			t.Errorf("%s: sample sum %v s, want %v s (fake-clock time of the calls)", h.op, got, h.sum)
		}
	}
	errs := []struct {
		op   Op
		kind string
		want float64
	}{
		{OpCreate, sdk.KindInsufficientCapacity, 1},
		{OpGet, sdk.KindTransient, 1},
		{OpDelete, sdk.KindNotFound, 1},
	}
	for _, e := range errs {
		m := findMetric(mfs[MetricErrors], map[string]string{"provider": "sim", "operation": string(e.op), "error": e.kind})
		if m == nil || m.GetCounter().GetValue() != e.want {
			t.Errorf("%s{%s,%s} = %v, want %v", MetricErrors, e.op, e.kind, m, e.want)
		}
	}
	if n := len(mfs[MetricErrors].GetMetric()); n != 3 {
		t.Errorf("%d error series, want 3 (successful calls count no error)", n)
	}
}

func TestInstrumentSharesARegistry(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(0, 0))
	reg := prometheus.NewRegistry()
	a := Instrument(&timedStub{clk: clk}, reg, WithName("a"), WithClock(clk))
	b := Instrument(&timedStub{clk: clk, err: sdk.NewNotFound("x")}, reg, WithName("b"), WithClock(clk))
	_, _ = a.List(ctx, sdk.Filter{})
	_, _ = b.List(ctx, sdk.Filter{})
	_, _ = b.List(ctx, sdk.Filter{})
	mfs := gather(t, reg)
	for name, want := range map[string]uint64{"a": 1, "b": 2} {
		m := findMetric(mfs[MetricDuration], map[string]string{"provider": name, "operation": "list"})
		if m.GetHistogram().GetSampleCount() != want {
			t.Errorf("provider %s: %d list calls recorded, want %d", name, m.GetHistogram().GetSampleCount(), want)
		}
	}
	if m := findMetric(mfs[MetricErrors], map[string]string{"provider": "a"}); m != nil {
		t.Errorf("provider a has an error series: %v", m)
	}

	// A different metric under the same name is a programming error.
	bad := prometheus.NewRegistry()
	bad.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: MetricErrors, Help: "other"}))
	defer func() {
		if recover() == nil {
			t.Error("Instrument on a registry with a clashing metric did not panic")
		}
	}()
	Instrument(&timedStub{clk: clk}, bad)
}

func TestInstrumentWithoutRegistry(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	p := Instrument(&timedStub{clk: clk}, nil, WithClock(clk))
	if _, err := p.Offerings(context.Background()); err != nil {
		t.Fatal(err)
	}
}
