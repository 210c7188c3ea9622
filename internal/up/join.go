package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/netns"
	"github.com/tide-project/tide/internal/tlsauto"
)

// machineProvider is a provider this process owns: Shutdown stops every
// machine it started, Close releases it leaving them to be adopted.
type machineProvider interface {
	provider.Provider
	Shutdown(context.Context) error
	Close() error
}

// poolProvider is a pool's provider and the address its machines reach
// the head at (invalid: the head's own listen address).
type poolProvider struct {
	name    string
	prov    machineProvider
	gateway netip.Addr
}

// newProvider builds a pool's provider from its config.
func newProvider(pc config.Pool, cfg Config, log *slog.Logger) (poolProvider, error) {
	plog := log.With("pool", pc.Name)
	root := filepath.Join(cfg.DataDir, "machines", pc.Name)
	switch pc.Provider.Type {
	case "local":
		prov, err := local.New(local.Config{
			Root:      root,
			Command:   local.WorkerCommand(cfg.Binary),
			Offerings: pc.Offerings,
			Logger:    plog.With("component", "local-provider"),
		})
		if err != nil {
			return poolProvider{}, fmt.Errorf("pool %q: %w", pc.Name, err)
		}
		return poolProvider{name: pc.Name, prov: prov}, nil
	case "netns":
		nc := netns.Config{Root: root, Binary: cfg.Binary, Offerings: pc.Offerings, Logger: plog.With("component", "netns-provider")}
		for k, v := range pc.Provider.Options {
			s, ok := v.(string)
			switch {
			case !ok:
				return poolProvider{}, fmt.Errorf("pool %q: provider.options.%s: want a string, got %v", pc.Name, k, v)
			case k == "prefix":
				nc.Prefix = s
			case k == "subnet":
				nc.Subnet = s
			default:
				return poolProvider{}, fmt.Errorf("pool %q: provider.options.%s: unknown option (netns has prefix and subnet)", pc.Name, k)
			}
		}
		prov, err := netns.New(nc)
		if err != nil {
			return poolProvider{}, fmt.Errorf("pool %q: %w", pc.Name, err)
		}
		return poolProvider{name: pc.Name, prov: prov, gateway: prov.Gateway()}, nil
	}
	return poolProvider{}, fmt.Errorf("pool %q: provider.type: tide up runs local and netns pools, got %q", pc.Name, pc.Provider.Type)
}

// headURLFor is the head URL a pool's machines use: the gateway of a
// netns pool with the head's port, else the listen address (127.0.0.1
// when it listens on every address).
func headURLFor(pp poolProvider, scheme string, ln net.Addr) (string, error) {
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host)
	if pp.gateway.IsValid() {
		if ip != nil && ip.IsLoopback() {
			return "", fmt.Errorf("pool %q: its machines cannot reach a head on %s: listen on %s or every address (--addr)",
				pp.name, ln, pp.gateway)
		}
		host = pp.gateway.String()
	} else if ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// joining hands each machine its own bootstrap blob: Configure mints a
// credential scoped to the machine (head.MintBootstrap) and passes the
// blob that carries it instead of the controller's; Delete revokes the
// machine's credentials before the provider deletes it, so its blob
// registers nothing from then on (the head's Forget revokes them too).
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

// checkExposure refuses an admin API beyond loopback without a token.
func checkExposure(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("up: --addr %q: %w", addr, err)
	}
	if token != "" || host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1" {
		return nil
	}
	return fmt.Errorf("up: listening on %q beyond loopback requires an admin token (--token)", addr)
}

// upTLS sets the head's TLS from cfg: "auto" makes (or reuses) a CA and a
// server certificate naming the listen address, every netns gateway and
// cfg.TLSSANs, and hands the CA out in bootstrap blobs.
func upTLS(hc *head.Config, cfg Config, addr string, provs []poolProvider) error {
	switch cfg.TLS {
	case "":
		hc.TLSCertFile, hc.TLSKeyFile = cfg.TLSCertFile, cfg.TLSKeyFile
		return nil
	case "auto":
	default:
		return fmt.Errorf("up: --tls %q: the only mode is auto", cfg.TLS)
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		return errors.New("up: --tls auto makes its own certificate: drop --tls-cert and --tls-key")
	}
	hosts, err := tlsauto.ListenHosts(addr)
	if err != nil {
		return err
	}
	for _, pp := range provs {
		if pp.gateway.IsValid() {
			hosts = append(hosts, pp.gateway.String())
		}
	}
	files, err := tlsauto.Ensure(filepath.Join(cfg.DataDir, "tls"), append(hosts, cfg.TLSSANs...), time.Now())
	if err != nil {
		return err
	}
	hc.TLSCertFile, hc.TLSKeyFile, hc.CACertPEM = files.CertFile, files.KeyFile, files.CAPEM
	return nil
}
