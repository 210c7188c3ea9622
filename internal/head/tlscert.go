package head

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tide-project/tide/internal/tlsauto"
)

// serverCert is the certificate the head's TLS listener presents. It is
// read on every handshake, so a certificate reissued under --tls auto (a
// pool added by a reload names a new address) is served without a restart.
type serverCert struct {
	cur atomic.Pointer[tls.Certificate]
	// mu serializes reissues; hosts are the extra names of the current one.
	mu    sync.Mutex
	hosts []string
}

// load reads the certificate and key files into the served certificate.
func (c *serverCert) load(certFile, keyFile string) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("head: tls: %w", err)
	}
	c.cur.Store(&pair)
	return nil
}

// tlsConfig serves the current certificate.
func (c *serverCert) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }}
}

// AddTLSHosts makes the --tls auto certificate name hosts (IP addresses or
// DNS names) as well, reissuing it from the same CA when it does not name
// them yet; handshakes from then on get the new one, and bootstrap blobs
// handed out before stay valid (they carry the CA). A head that serves its
// own certificate files, or none, is left alone: its names are its
// operator's to choose.
func (h *Head) AddTLSHosts(hosts ...string) error {
	if !h.cfg.TLSAuto {
		return nil
	}
	c := &h.cert
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hosts == nil {
		c.hosts = slices.Clone(h.cfg.TLSHosts)
	}
	want := slices.Clone(c.hosts)
	for _, host := range hosts {
		if !slices.Contains(want, host) {
			want = append(want, host)
		}
	}
	if len(want) == len(c.hosts) {
		return nil
	}
	listen, err := tlsauto.ListenHosts(h.cfg.Addr)
	if err != nil {
		return fmt.Errorf("head: tls auto: %w", err)
	}
	files, err := tlsauto.Ensure(filepath.Join(h.cfg.DataDir, "tls"), append(listen, want...), h.clk.Now())
	if err != nil {
		return fmt.Errorf("head: tls auto: %w", err)
	}
	if err := c.load(files.CertFile, files.KeyFile); err != nil {
		return err
	}
	c.hosts = want
	h.log.Info("tls certificate reissued", "hosts", want)
	return nil
}
