package plugin_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/internal/provider/plugin/plugintest"
	"github.com/tide-project/tide/sdk/provider"
)

func newPKI(t *testing.T) plugintest.PKI {
	t.Helper()
	k, err := plugintest.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// serveRemote serves the sim provider (real clock) as a remote plugin.
func serveRemote(t *testing.T, cfg provider.RemoteConfig) string {
	t.Helper()
	cloud, err := plugin.NewSim(nil, pluginLatency, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = provider.ListenAndServe(ctx, cloud, "127.0.0.1:0", cfg, func(a net.Addr) { addrc <- a.String() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return <-addrc
}

// TestConformanceRemoteMTLS: the sim provider as a remote plugin that
// requires client certificates passes the suite over mutual TLS; a client
// without a certificate, or with one from another CA, is refused.
func TestConformanceRemoteMTLS(t *testing.T) {
	k := newPKI(t)
	srv := &plugin.TLSFiles{CertFile: k.ServerCert, KeyFile: k.ServerKey, CAFile: k.CA}
	stls, err := srv.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRemote(t, provider.RemoteConfig{TLS: stls})

	p, closer, err := plugin.Open(t.Context(), plugin.Options{Address: addr,
		TLS: &plugin.TLSFiles{CAFile: k.CA, CertFile: k.ClientCert, KeyFile: k.ClientKey}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rs, err := plugin.Conform(t.Context(), p, "", 20*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if f := failures(rs); len(f) > 0 {
		t.Fatalf("conformance failures over mTLS:\n%s", strings.Join(f, "\n"))
	}

	for name, files := range map[string]*plugin.TLSFiles{
		"no client certificate":          {CAFile: k.CA},
		"certificate from another CA":    {CAFile: k.CA, CertFile: k.IntruderCert, KeyFile: k.IntruderKey},
		"server not trusted (no CA set)": {CertFile: k.ClientCert, KeyFile: k.ClientKey},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if _, c, err := plugin.Open(ctx, plugin.Options{Address: addr, TLS: files}, nil); err == nil {
			c.Close()
			t.Errorf("%s: connected, want a refusal", name)
		}
		cancel()
	}
}

// TestRemoteBearerToken: a remote plugin with a token refuses calls
// without it or with another one, and serves calls that carry it.
func TestRemoteBearerToken(t *testing.T) {
	addr := serveRemote(t, provider.RemoteConfig{Token: "s3cret-token"})
	dir := t.TempDir()
	for tok, ok := range map[string]bool{"s3cret-token": true, "wrong": false} {
		path := filepath.Join(dir, tok)
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, c, err := plugin.Open(t.Context(), plugin.Options{Address: addr, TokenFile: path}, nil)
		if ok != (err == nil) {
			t.Fatalf("token %q: Open = %v, want ok=%v", tok, err, ok)
		}
		if ok {
			if _, err := p.List(t.Context(), provider.Filter{}); err != nil {
				t.Fatalf("List with the token: %v", err)
			}
			c.Close()
		}
	}
	if _, _, err := plugin.Open(t.Context(), plugin.Options{Address: addr}, nil); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("Open without a token = %v, want a refusal naming the token", err)
	}
}
