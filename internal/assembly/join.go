package assembly

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/provider"
)

// joining hands each machine its own bootstrap blob: Configure mints a
// credential scoped to the machine (head.MintBootstrap) and passes the
// blob that carries it instead of the controller's, which names the head
// only; Delete revokes the machine's credentials before the provider
// deletes it, so its blob registers nothing from then on (the head's
// Forget revokes them too).
type joining struct {
	provider.Provider
	head    *head.Head
	headURL string
}

// Configure mints the machine's blob and configures it with it.
func (j joining) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
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
