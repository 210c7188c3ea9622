package plugin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/plugin"
	sdk "github.com/tide-project/tide/sdk/provider"
)

// pki writes a CA, a server certificate for 127.0.0.1 and two client
// certificates (one from another CA) as PEM files in dir.
type pki struct{ dir string }

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newCA returns a CA certificate and key, written as name.pem.
func newCA(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return cert, key
}

// leaf writes name.pem and name-key.pem signed by the CA.
func leaf(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
}

func newPKI(t *testing.T) pki {
	dir := t.TempDir()
	ca, caKey := newCA(t, dir, "ca")
	leaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	leaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	other, otherKey := newCA(t, dir, "other-ca")
	leaf(t, dir, "intruder", other, otherKey, x509.ExtKeyUsageClientAuth)
	return pki{dir: dir}
}

func (p pki) f(name string) string { return filepath.Join(p.dir, name) }

// serveRemote serves the sim provider (real clock) as a remote plugin.
func serveRemote(t *testing.T, cfg sdk.RemoteConfig) string {
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
		_ = sdk.ListenAndServe(ctx, plugin.ToSDK(cloud), "127.0.0.1:0", cfg, func(a net.Addr) { addrc <- a.String() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return <-addrc
}

// TestConformanceRemoteMTLS: the sim provider as a remote plugin that
// requires client certificates passes the suite over mutual TLS; a client
// without a certificate, or with one from another CA, is refused.
func TestConformanceRemoteMTLS(t *testing.T) {
	k := newPKI(t)
	srv := &plugin.TLSFiles{CertFile: k.f("server.pem"), KeyFile: k.f("server-key.pem"), CAFile: k.f("ca.pem")}
	stls, err := srv.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRemote(t, sdk.RemoteConfig{TLS: stls})

	p, closer, err := plugin.Open(t.Context(), plugin.Options{Address: addr,
		TLS: &plugin.TLSFiles{CAFile: k.f("ca.pem"), CertFile: k.f("client.pem"), KeyFile: k.f("client-key.pem")}}, nil)
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
		"no client certificate":          {CAFile: k.f("ca.pem")},
		"certificate from another CA":    {CAFile: k.f("ca.pem"), CertFile: k.f("intruder.pem"), KeyFile: k.f("intruder-key.pem")},
		"server not trusted (no CA set)": {CertFile: k.f("client.pem"), KeyFile: k.f("client-key.pem")},
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
	addr := serveRemote(t, sdk.RemoteConfig{Token: "s3cret-token"})
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
