package assembly

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/sdk/provider"
)

// joining hands each machine its own bootstrap blob: Configure mints a
// credential scoped to the machine (head.MintBootstrap) and passes the
// blob that carries it instead of the controller's, which names the head
// only; Delete revokes the machine's credentials before the provider
// deletes it, so its blob registers nothing from then on (the head's
// Forget revokes them too).
//
// A provider whose machines boot their worker by themselves (selfJoining:
// EC2 user data) needs the blob before the machine exists: Create mints
// it and passes it in CreateRequest.Bootstrap, and revokes it when the
// Create failed such that no machine has the id (nothing was launched);
// Configure then only records the binding.
type joining struct {
	provider.Provider
	head    *head.Head
	headURL string
}

// selfJoining is a provider whose machines start their worker at boot
// from a bootstrap handed over at Create.
type selfJoining interface {
	JoinsAtCreate() bool
}

func (j joining) selfJoining() bool {
	s, ok := j.Provider.(selfJoining)
	return ok && s.JoinsAtCreate()
}

// Create mints the machine's blob first when the machine boots its worker
// by itself. A replayed Create mints a spare credential that expires
// unused (the head's credential TTL); the machine keeps the first one.
func (j joining) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if !j.selfJoining() || req.Validate() != nil {
		return j.Provider.Create(ctx, req)
	}
	blob, err := j.head.MintBootstrap(ctx, req.Pool, req.MachineID, j.headURL)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: bootstrap: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	req.Bootstrap = blob
	ack, err := j.Provider.Create(ctx, req)
	switch provider.Kind(err) {
	case provider.KindInvalid, provider.KindInsufficientCapacity, provider.KindQuotaExceeded:
		// Nothing has the id: its credential must not outlive the attempt.
		if rerr := j.head.RevokeMachine(ctx, req.MachineID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("revoking its credential: %w", rerr))
		}
	}
	return ack, err
}

// Configure mints the machine's blob and configures it with it; a
// machine that booted with its blob keeps it.
func (j joining) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	if j.selfJoining() {
		return j.Provider.Configure(ctx, req)
	}
	blob, err := j.head.MintBootstrap(ctx, req.Pool, req.MachineID, j.headURL)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("configure machine %q: bootstrap: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	req.Bootstrap = blob
	return j.Provider.Configure(ctx, req)
}

// Delete revokes the machine's credentials, then deletes it: a worker
// still running on it can no longer register.
func (j joining) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	if err := req.Validate(); err == nil {
		if err := j.head.RevokeMachine(ctx, req.MachineID); err != nil {
			return provider.Ack{}, fmt.Errorf("delete machine %q: revoke its credentials: %w", req.MachineID, provider.NewTransient(err, 0))
		}
	}
	return j.Provider.Delete(ctx, req)
}

// gatewayed is a provider whose machines reach the head at an address of
// its own (a netns pool's bridge) rather than at the head's listen address.
type gatewayed interface {
	Gateway() netip.Addr
}

// poolHeadURL is the head URL pool's machines use: the gateway of a
// provider that has one, with the head's port, else the listen address
// (127.0.0.1 when the head listens on every address).
func poolHeadURL(scheme string, ln net.Addr, prov provider.Provider) (string, error) {
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host)
	if g, ok := prov.(gatewayed); ok {
		if ip != nil && ip.IsLoopback() {
			return "", fmt.Errorf("its machines cannot reach a head on %s: listen on %s or every address (--addr)", ln, g.Gateway())
		}
		host = g.Gateway().String()
	} else if ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// joinBlob mints the blob that joins one machine of a fleet-backed pool to
// this head: the fleet asks for it when it configures a machine for the
// pool. headURL "" is the head's own address.
func (a *Assembly) joinBlob(ctx context.Context, pool, machine, _, headURL string) ([]byte, error) {
	addr := a.listening.Load()
	if addr == nil || a.h == nil {
		return nil, errors.New("the head does not listen yet")
	}
	if headURL == "" {
		var err error
		if headURL, err = poolHeadURL(a.h.Scheme(), *addr, nil); err != nil {
			return nil, err
		}
	}
	return a.h.MintBootstrap(ctx, pool, machine, headURL)
}

// preempt is the fleet taking a machine of a fleet-backed pool back: the
// head cordons its worker and moves its restartable work off now; the rest
// runs until the fleet drains the machine.
func (a *Assembly) preempt(ctx context.Context, pool, machine, why string, grace time.Duration) error {
	if a.h == nil {
		return errors.New("the head is not running yet")
	}
	_, err := a.h.Preempt(ctx, pool, machine, why, grace)
	return err
}
