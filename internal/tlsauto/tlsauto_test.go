package tlsauto

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func TestEnsureCreatesThenKeeps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	f, err := Ensure(dir, []string{"127.0.0.1", "localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.CAFile, f.CertFile, f.KeyFile, filepath.Join(dir, caKeyName)} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := os.Stat(f.KeyFile); st.Mode().Perm() != 0o600 {
		t.Errorf("server key mode %v, want 0600", st.Mode().Perm())
	}
	cert1, _ := os.ReadFile(f.CertFile)
	// A restart with the same hosts keeps everything.
	g, err := Ensure(dir, []string{"127.0.0.1"}, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert2, _ := os.ReadFile(g.CertFile)
	if string(g.CAPEM) != string(f.CAPEM) || string(cert1) != string(cert2) {
		t.Fatal("a restart changed the CA or the server certificate")
	}
	// A new address: the server certificate is reissued from the same CA.
	h, err := Ensure(dir, []string{"127.0.0.1", "10.231.9.1"}, now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert3, _ := os.ReadFile(h.CertFile)
	if string(h.CAPEM) != string(f.CAPEM) || string(cert3) == string(cert1) {
		t.Fatal("a new listen address did not reissue the certificate from the same CA")
	}
	c, err := loadCert(h.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.CAPEM)
	for _, host := range []string{"127.0.0.1", "10.231.9.1"} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now.Add(3 * time.Hour)}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.9.9.9", CurrentTime: now.Add(3 * time.Hour)}); err == nil {
		t.Error("the certificate names an address it was not issued for")
	}
	// Near its end, it is renewed.
	r, err := Ensure(dir, []string{"127.0.0.1", "10.231.9.1"}, now.Add(ServerValidity-RenewBefore/2))
	if err != nil {
		t.Fatal(err)
	}
	if cert4, _ := os.ReadFile(r.CertFile); string(cert4) == string(cert3) {
		t.Error("a certificate near its end was not renewed")
	}
}

// TestServesTLS: the files serve HTTPS that a client trusting only the CA
// accepts on loopback.
func TestServesTLS(t *testing.T) {
	f, err := Ensure(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })}
	go srv.ServeTLS(ln, f.CertFile, f.KeyFile)
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.CAPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := c.Get("https://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := http.Get("https://" + ln.Addr().String()); err == nil {
		t.Error("a client without the CA trusted the certificate")
	}
}

func TestListenHosts(t *testing.T) {
	h, err := ListenHosts("10.231.4.1:8000")
	if err != nil || len(h) != 3 || h[2] != "10.231.4.1" {
		t.Fatalf("%v %v", h, err)
	}
	all, err := ListenHosts("0.0.0.0:8000")
	if err != nil || len(all) < 2 {
		t.Fatalf("%v %v", all, err)
	}
}
