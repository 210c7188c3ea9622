package plugin

import (
	"context"
	"errors"
	"maps"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/provider"
	sdk "github.com/tide-project/tide/sdk/provider"
)

// FromSDK returns p, a public SDK Provider (a plugin Client, a Subprocess, a
// plugin author's provider), as tide's internal provider.Provider. Typed
// SDK errors become the internal typed errors of the same kind.
func FromSDK(p sdk.Provider) provider.Provider { return fromSDK{p} }

// ToSDK returns p, one of tide's providers, as a public SDK Provider, to
// serve it as a plugin. Internal typed errors become SDK typed errors.
func ToSDK(p provider.Provider) sdk.Provider { return toSDK{p} }

type fromSDK struct{ p sdk.Provider }

func (a fromSDK) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	offs, err := a.p.Offerings(ctx)
	if err != nil {
		return nil, ErrFromSDK(err)
	}
	out := make([]capacity.Offering, len(offs))
	for i, o := range offs {
		out[i] = capacity.Offering{Type: o.Type, Zone: o.Zone, Kind: capacity.Kind(o.Kind), PricePerHour: o.PricePerHour,
			InterruptionProbability: o.InterruptionProbability, InterruptionPenalty: o.InterruptionPenalty,
			Resources: capacity.Resources{MilliCPU: o.Resources.MilliCPU, Memory: o.Resources.Memory,
				GPUs: o.Resources.GPUs, Extended: maps.Clone(o.Resources.Extended)}}
	}
	return out, nil
}

func ackFromSDK(a sdk.Ack, err error) (provider.Ack, error) {
	if err != nil {
		return provider.Ack{}, ErrFromSDK(err)
	}
	return provider.Ack{MachineID: a.MachineID, State: provider.State(a.State), Replayed: a.Replayed}, nil
}

func fenceToSDK(f provider.Fence) sdk.Fence {
	return sdk.Fence{Controller: f.Controller, Epoch: f.Epoch, Seq: f.Seq}
}

func fenceFromSDK(f sdk.Fence) provider.Fence {
	return provider.Fence{Controller: f.Controller, Epoch: f.Epoch, Seq: f.Seq}
}

func (a fromSDK) Create(ctx context.Context, r provider.CreateRequest) (provider.Ack, error) {
	return ackFromSDK(a.p.Create(ctx, sdk.CreateRequest{Fence: fenceToSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID,
		Offering: r.Offering, Labels: r.Labels}))
}

func (a fromSDK) Configure(ctx context.Context, r provider.ConfigureRequest) (provider.Ack, error) {
	return ackFromSDK(a.p.Configure(ctx, sdk.ConfigureRequest{Fence: fenceToSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID,
		Cluster: r.Cluster, Bootstrap: r.Bootstrap}))
}

func (a fromSDK) Drain(ctx context.Context, r provider.DrainRequest) (provider.Ack, error) {
	return ackFromSDK(a.p.Drain(ctx, sdk.DrainRequest{Fence: fenceToSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID}))
}

func (a fromSDK) Delete(ctx context.Context, r provider.DeleteRequest) (provider.Ack, error) {
	return ackFromSDK(a.p.Delete(ctx, sdk.DeleteRequest{Fence: fenceToSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID}))
}

func machineFromSDK(m *sdk.Machine) provider.Machine {
	return provider.Machine{ID: m.ID, Pool: m.Pool, Offering: m.Offering, State: provider.State(m.State), Host: m.Host,
		Cluster: m.Cluster, Bootstrap: m.Bootstrap, Labels: m.Labels, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		ReclaimAt: m.ReclaimAt, Reason: m.Reason}
}

func machineToSDK(m *provider.Machine) sdk.Machine {
	return sdk.Machine{ID: m.ID, Pool: m.Pool, Offering: m.Offering, State: sdk.State(m.State), Host: m.Host,
		Cluster: m.Cluster, Bootstrap: m.Bootstrap, Labels: m.Labels, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		ReclaimAt: m.ReclaimAt, Reason: m.Reason}
}

func (a fromSDK) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := a.p.Get(ctx, id)
	if err != nil {
		return provider.Machine{}, ErrFromSDK(err)
	}
	return machineFromSDK(&m), nil
}

func (a fromSDK) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	sf := sdk.Filter{Pool: f.Pool}
	for _, s := range f.States {
		sf.States = append(sf.States, sdk.State(s))
	}
	ms, err := a.p.List(ctx, sf)
	if err != nil {
		return nil, ErrFromSDK(err)
	}
	out := make([]provider.Machine, len(ms))
	for i := range ms {
		out[i] = machineFromSDK(&ms[i])
	}
	return out, nil
}

// Close closes the wrapped provider when it has a Close method.
func (a fromSDK) Close() error {
	if c, ok := a.p.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

type toSDK struct{ p provider.Provider }

func (a toSDK) Offerings(ctx context.Context) ([]sdk.Offering, error) {
	offs, err := a.p.Offerings(ctx)
	if err != nil {
		return nil, ErrToSDK(err)
	}
	out := make([]sdk.Offering, len(offs))
	for i, o := range offs {
		out[i] = sdk.Offering{Type: o.Type, Zone: o.Zone, Kind: string(o.Kind), PricePerHour: o.PricePerHour,
			InterruptionProbability: o.InterruptionProbability, InterruptionPenalty: o.InterruptionPenalty,
			Resources: sdk.Resources{MilliCPU: o.Resources.MilliCPU, Memory: o.Resources.Memory,
				GPUs: o.Resources.GPUs, Extended: maps.Clone(o.Resources.Extended)}}
	}
	return out, nil
}

func ackToSDK(a provider.Ack, err error) (sdk.Ack, error) {
	if err != nil {
		return sdk.Ack{}, ErrToSDK(err)
	}
	return sdk.Ack{MachineID: a.MachineID, State: sdk.State(a.State), Replayed: a.Replayed}, nil
}

func (a toSDK) Create(ctx context.Context, r sdk.CreateRequest) (sdk.Ack, error) {
	return ackToSDK(a.p.Create(ctx, provider.CreateRequest{Fence: fenceFromSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID,
		Offering: r.Offering, Labels: r.Labels}))
}

func (a toSDK) Configure(ctx context.Context, r sdk.ConfigureRequest) (sdk.Ack, error) {
	return ackToSDK(a.p.Configure(ctx, provider.ConfigureRequest{Fence: fenceFromSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID,
		Cluster: r.Cluster, Bootstrap: r.Bootstrap}))
}

func (a toSDK) Drain(ctx context.Context, r sdk.DrainRequest) (sdk.Ack, error) {
	return ackToSDK(a.p.Drain(ctx, provider.DrainRequest{Fence: fenceFromSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID}))
}

func (a toSDK) Delete(ctx context.Context, r sdk.DeleteRequest) (sdk.Ack, error) {
	return ackToSDK(a.p.Delete(ctx, provider.DeleteRequest{Fence: fenceFromSDK(r.Fence), Pool: r.Pool, MachineID: r.MachineID}))
}

func (a toSDK) Get(ctx context.Context, id string) (sdk.Machine, error) {
	m, err := a.p.Get(ctx, id)
	if err != nil {
		return sdk.Machine{}, ErrToSDK(err)
	}
	return machineToSDK(&m), nil
}

func (a toSDK) List(ctx context.Context, f sdk.Filter) ([]sdk.Machine, error) {
	pf := provider.Filter{Pool: f.Pool}
	for _, s := range f.States {
		pf.States = append(pf.States, provider.State(s))
	}
	ms, err := a.p.List(ctx, pf)
	if err != nil {
		return nil, ErrToSDK(err)
	}
	out := make([]sdk.Machine, len(ms))
	for i := range ms {
		out[i] = machineToSDK(&ms[i])
	}
	return out, nil
}

// ErrFromSDK converts an SDK typed error (at any depth of err) into the
// internal typed error of the same kind; other errors pass unchanged.
func ErrFromSDK(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := sdk.As[*sdk.StaleFenceError](err); ok {
		return provider.NewStaleFence(e.Pool, fenceFromSDK(e.Got), fenceFromSDK(e.Highest))
	}
	if e, ok := sdk.As[*sdk.InvalidError](err); ok {
		return provider.NewInvalid(e.Field, e.Detail)
	}
	if e, ok := sdk.As[*sdk.NotFoundError](err); ok {
		return provider.NewNotFound(e.MachineID)
	}
	if e, ok := sdk.As[*sdk.ConflictError](err); ok {
		return provider.NewConflict(e.MachineID, provider.State(e.State), e.Detail)
	}
	if e, ok := sdk.As[*sdk.QuotaExceededError](err); ok {
		return provider.NewQuotaExceeded(e.Offering, e.Limit, e.Err)
	}
	if e, ok := sdk.As[*sdk.InsufficientCapacityError](err); ok {
		return provider.NewInsufficientCapacity(e.Offering, e.Err)
	}
	if e, ok := sdk.As[*sdk.TransientError](err); ok {
		return provider.NewTransient(e.Err, e.RetryAfter)
	}
	return err
}

// ErrToSDK converts an internal typed error into the SDK typed error of the
// same kind; other errors pass unchanged.
func ErrToSDK(err error) error {
	if err == nil {
		return nil
	}
	var (
		stale *provider.StaleFenceError
		inv   *provider.InvalidError
		nf    *provider.NotFoundError
		conf  *provider.ConflictError
		quota *provider.QuotaExceededError
		ic    *provider.InsufficientCapacityError
		tr    *provider.TransientError
	)
	switch {
	case errors.As(err, &stale):
		return sdk.NewStaleFence(stale.Pool, fenceToSDK(stale.Got), fenceToSDK(stale.Highest))
	case errors.As(err, &inv):
		return sdk.NewInvalid(inv.Field, inv.Detail)
	case errors.As(err, &nf):
		return sdk.NewNotFound(nf.MachineID)
	case errors.As(err, &conf):
		return sdk.NewConflict(conf.MachineID, sdk.State(conf.State), conf.Detail)
	case errors.As(err, &quota):
		return sdk.NewQuotaExceeded(quota.Offering, quota.Limit, quota.Err)
	case errors.As(err, &ic):
		return sdk.NewInsufficientCapacity(ic.Offering, ic.Err)
	case errors.As(err, &tr):
		return sdk.NewTransient(tr.Err, tr.RetryAfter)
	}
	return err
}
