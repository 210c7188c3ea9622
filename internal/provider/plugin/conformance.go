package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

// SimOfferings are the offerings of the sim provider served as a plugin:
// an on-demand and a spot m8 in zone z1.
func SimOfferings() []capacity.Offering {
	res := capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}
	return []capacity.Offering{
		{Type: "m8", Zone: "z1", Kind: capacity.OnDemand, Resources: res, PricePerHour: 0.4},
		{Type: "m8", Zone: "z1", Kind: capacity.Spot, Resources: res, PricePerHour: 0.12,
			InterruptionProbability: 0.05, InterruptionPenalty: 2},
	}
}

// NewSim returns the simulated cloud that `tide provider serve-sim` serves:
// the offerings (SimOfferings when nil), every transition taking latency
// on the real clock.
func NewSim(offerings []capacity.Offering, latency time.Duration, seed uint64) (*sim.Cloud, error) {
	if offerings == nil {
		offerings = SimOfferings()
	}
	offs := make([]sim.Offering, len(offerings))
	for i, o := range offerings {
		offs[i] = sim.Offering{Offering: o, Boot: sim.Fixed(latency), Configure: sim.Fixed(latency),
			Drain: sim.Fixed(latency), Delete: sim.Fixed(latency)}
	}
	return sim.New(sim.Config{Offerings: offs}, clock.Real{}, rand.New(rand.NewPCG(seed, seed^0x5eed)))
}

// Namespace gives one conformance subtest a fresh view of a shared
// provider: valid pool names and machine ids get prefix on the way in and
// lose it on the way out, and List shows only the namespace's machines.
// Invalid names pass unchanged, so the provider still refuses them.
func Namespace(p provider.Provider, prefix string) provider.Provider {
	return &namespaced{p: p, prefix: prefix}
}

type namespaced struct {
	p      provider.Provider
	prefix string
}

func (n *namespaced) in(name string) string {
	if !validName(name) || len(n.prefix+name) > 63 {
		return name
	}
	return n.prefix + name
}

// validName mirrors provider's name rule: letters, digits, '-', '_', '.',
// starting with a letter or digit.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return s != ""
}

func (n *namespaced) out(name string) string { return strings.TrimPrefix(name, n.prefix) }

func (n *namespaced) ack(a provider.Ack, err error) (provider.Ack, error) {
	a.MachineID = n.out(a.MachineID)
	return a, err
}

func (n *namespaced) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	return n.p.Offerings(ctx)
}

func (n *namespaced) Create(ctx context.Context, r provider.CreateRequest) (provider.Ack, error) {
	r.Pool, r.MachineID = n.in(r.Pool), n.in(r.MachineID)
	return n.ack(n.p.Create(ctx, r))
}

func (n *namespaced) Configure(ctx context.Context, r provider.ConfigureRequest) (provider.Ack, error) {
	r.Pool, r.MachineID = n.in(r.Pool), n.in(r.MachineID)
	return n.ack(n.p.Configure(ctx, r))
}

func (n *namespaced) Drain(ctx context.Context, r provider.DrainRequest) (provider.Ack, error) {
	r.Pool, r.MachineID = n.in(r.Pool), n.in(r.MachineID)
	return n.ack(n.p.Drain(ctx, r))
}

func (n *namespaced) Delete(ctx context.Context, r provider.DeleteRequest) (provider.Ack, error) {
	r.Pool, r.MachineID = n.in(r.Pool), n.in(r.MachineID)
	return n.ack(n.p.Delete(ctx, r))
}

func (n *namespaced) strip(m *provider.Machine) {
	m.ID, m.Pool = n.out(m.ID), n.out(m.Pool)
}

func (n *namespaced) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := n.p.Get(ctx, n.in(id))
	if err == nil {
		n.strip(&m)
	}
	return m, err
}

func (n *namespaced) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	if f.Pool != "" {
		f.Pool = n.in(f.Pool)
	}
	ms, err := n.p.List(ctx, f)
	if err != nil {
		return nil, err
	}
	out := ms[:0]
	for _, m := range ms {
		if strings.HasPrefix(m.ID, n.prefix) && strings.HasPrefix(m.Pool, n.prefix) {
			n.strip(&m)
			out = append(out, m)
		}
	}
	return out, nil
}

// PollSettle returns a Settle for a provider on the real clock: it polls
// List until no machine is in a transitional state, for at most timeout.
func PollSettle(ctx context.Context, p provider.Provider, timeout time.Duration) func() {
	return func() {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			ms, err := p.List(ctx, provider.Filter{})
			busy := err != nil
			for _, m := range ms {
				busy = busy || m.State.Transitional()
			}
			if !busy {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// StableOffering picks the offering the suite creates machines with: the
// named one when name is set (it must exist), else the first that is never
// interrupted.
func StableOffering(ctx context.Context, p provider.Provider, name string) (string, error) {
	offs, err := p.Offerings(ctx)
	if err != nil {
		return "", fmt.Errorf("Offerings: %w", err)
	}
	for _, o := range offs {
		if name != "" && o.Name() == name || name == "" && o.InterruptionProbability == 0 {
			return o.Name(), nil
		}
	}
	if name != "" {
		return "", fmt.Errorf("the plugin does not offer %q", name)
	}
	return "", fmt.Errorf("the plugin offers nothing that is never interrupted; name one with --offering")
}

// Conform runs the conformance suite against one plugin provider p (shared
// by every subtest, each in its own Namespace), settling by polling for at
// most settle per call. offering may be empty (see StableOffering).
func Conform(ctx context.Context, p provider.Provider, offering string, settle, timeout time.Duration) ([]providertest.Result, error) {
	off, err := StableOffering(ctx, p, offering)
	if err != nil {
		return nil, err
	}
	run := fmt.Sprintf("c%04x", rand.Uint32()&0xffff)
	i := 0
	return providertest.Check(ctx, timeout, func(string) (providertest.Harness, func(), error) {
		i++
		ns := Namespace(p, fmt.Sprintf("%s-%02d-", run, i))
		return providertest.Harness{Provider: ns, Offering: off, Settle: PollSettle(ctx, ns, settle)}, nil, nil
	}), nil
}
