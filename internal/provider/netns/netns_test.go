package netns

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/netnstest"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/sdk/provider"
)

var testOffering = capacity.Offering{Type: "ns1", Kind: capacity.OnDemand, Resources: capacity.CPU(1000)}

func skipUnlessSupported(t *testing.T) {
	t.Helper()
	if why := Supported(); why != "" {
		t.Skip("skipping: " + why)
	}
}

// newTest opens a provider whose machines run sleep in their namespace,
// and checks at cleanup that it left no namespace or link behind.
func newTest(t *testing.T, root string) *Provider {
	p, _ := newTestGated(t, root, false)
	return p
}

func newTestGated(t *testing.T, root string, gated bool) (*Provider, *local.Gate) {
	t.Helper()
	skipUnlessSupported(t)
	n := netnstest.Reserve(t, 100, 200) // internal/up takes 200-249, internal/assembly 250-254
	p, g, err := newProvider(Config{
		Root:   root,
		Prefix: fmt.Sprintf("tt%d", n),
		Subnet: fmt.Sprintf("10.231.%d.0/24", n),
		Command: func(local.Worker) (*exec.Cmd, error) {
			return exec.Command("sleep", "3600"), nil
		},
		Offerings:    []capacity.Offering{testOffering},
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
		DrainTimeout: 5 * time.Second,
	}, gated)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		wantNothingLeft(t, p)
	})
	return p, g
}

// wantNothingLeft fails when a namespace or link with p's prefix exists.
func wantNothingLeft(t *testing.T, p *Provider) {
	t.Helper()
	nss, err := p.namespaces(p.prefix)
	if err != nil || len(nss) > 0 {
		t.Errorf("namespaces left behind: %v (%v)", nss, err)
	}
	links, err := p.links(p.prefix)
	if err != nil || len(links) > 0 {
		t.Errorf("links left behind: %v (%v)", links, err)
	}
}

func TestConformance(t *testing.T) {
	skipUnlessSupported(t)
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		p, g := newTestGated(t, t.TempDir(), true)
		return providertest.Harness{
			Provider: p,
			Offering: testOffering.Name(),
			Settle: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				g.Set(true)
				defer g.Set(false)
				if err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

var fence = provider.Fence{Controller: "test", Epoch: 1}

// TestMachineIsANamespace: a configured machine's process runs in its own
// namespace with its own address on the bridge, reachable from the host;
// Delete removes the namespace and the link.
func TestMachineIsANamespace(t *testing.T) {
	p := newTest(t, t.TempDir())
	ctx := t.Context()
	if _, err := p.Create(ctx, provider.CreateRequest{Fence: fence, Pool: "p", MachineID: "m-1", Offering: testOffering.Name()}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Configure(ctx, provider.ConfigureRequest{Fence: fence, Pool: "p", MachineID: "m-1", Cluster: "c", Bootstrap: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitState(t, p, "m-1", provider.Configured)
	m, _ := p.Get(ctx, "m-1")
	if m.Host != p.Address("m-1") || m.Host == "" || m.Host == p.Gateway().String() {
		t.Fatalf("machine host %q, address %q, gateway %s", m.Host, p.Address("m-1"), p.Gateway())
	}
	if out, err := exec.Command("ip", "netns", "exec", p.Namespace("m-1"), "ping", "-c1", "-W2", p.Gateway().String()).CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath("ping"); lerr == nil {
			t.Fatalf("the namespace cannot reach the gateway: %v\n%s", err, out)
		}
	}
	if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: fence, Pool: "p", MachineID: "m-1"}); err != nil {
		t.Fatal(err)
	}
	if p.nsExists(p.Namespace("m-1")) || p.HostLink("m-1") != "" {
		t.Fatalf("namespace or link of a deleted machine left")
	}
	links, _ := p.links(p.prefix)
	if len(links) != 1 || links[0] != p.Bridge() {
		t.Fatalf("links after delete: %v, want only the bridge", links)
	}
}

// TestVanishedNamespaceFailsTheMachine: a namespace deleted under its
// worker makes the machine Failed.
func TestVanishedNamespaceFailsTheMachine(t *testing.T) {
	p := newTest(t, t.TempDir())
	ctx := t.Context()
	p.Create(ctx, provider.CreateRequest{Fence: fence, Pool: "p", MachineID: "m-1", Offering: testOffering.Name()})
	p.Configure(ctx, provider.ConfigureRequest{Fence: fence, Pool: "p", MachineID: "m-1", Cluster: "c", Bootstrap: []byte("x")})
	waitState(t, p, "m-1", provider.Configured)
	if out, err := exec.Command("ip", "netns", "del", p.Namespace("m-1")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m, err := p.Get(ctx, "m-1")
	if err != nil || m.State != provider.Failed {
		t.Fatalf("machine after its namespace went: %+v %v", m, err)
	}
	if ms, _ := p.List(ctx, provider.Filter{States: []provider.State{provider.Failed}}); len(ms) != 1 {
		t.Fatalf("List of failed machines: %v", ms)
	}
}

// TestRestartAdoptsOrRemovesLeftovers: a provider that went away without
// Shutdown (a kill -9) leaves namespaces; the next one on the root adopts
// those of its machines and removes the rest (a namespace and a link with
// its prefix that no machine owns).
func TestRestartAdoptsOrRemovesLeftovers(t *testing.T) {
	skipUnlessSupported(t)
	root := t.TempDir()
	p := newTest(t, root)
	ctx := t.Context()
	p.Create(ctx, provider.CreateRequest{Fence: fence, Pool: "p", MachineID: "m-1", Offering: testOffering.Name()})
	p.Configure(ctx, provider.ConfigureRequest{Fence: fence, Pool: "p", MachineID: "m-1", Cluster: "c", Bootstrap: []byte("x")})
	waitState(t, p, "m-1", provider.Configured)
	prefix := p.prefix
	// Leftovers of a crash: a namespace and a veth that no machine owns.
	for _, args := range [][]string{{"netns", "add", prefix + "-ghost"}, {"link", "add", prefix + "h99", "type", "veth", "peer", "name", prefix + "p99"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if err := p.Close(); err != nil { // the process "dies": nothing is stopped
		t.Fatal(err)
	}
	q, err := New(Config{Root: root, Command: p.cfg.Command, Offerings: p.cfg.Offerings, Logger: p.cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := q.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		wantNothingLeft(t, q)
	})
	if q.prefix != prefix {
		t.Fatalf("prefix %q after restart, want %q", q.prefix, prefix)
	}
	m, err := q.Get(ctx, "m-1")
	if err != nil || m.State != provider.Configured || !q.nsExists(q.Namespace("m-1")) {
		t.Fatalf("adopted machine: %+v %v (namespace there: %v)", m, err, q.nsExists(q.Namespace("m-1")))
	}
	if q.nsExists(prefix+"-ghost") || q.linkExists(prefix+"h99") || q.linkExists(prefix+"p99") {
		t.Fatal("leftovers of no machine were not removed")
	}
}

func waitState(t *testing.T, p *Provider, id string, want provider.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := p.Get(t.Context(), id)
		if err == nil && m.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %s: %+v %v, want %s", id, m, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
