package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"

	"github.com/tide-project/tide/internal/provider"
)

// UseBootstrap sets what a bootstrap blob says (`tide worker --bootstrap`):
// the head's URL, the credential the worker registers with, the worker's
// name and pool when the blob names them, the token the head presents to
// the log server, and an HTTP client that trusts the blob's CA for the
// head's https URL. What the blob names wins over what cfg had: a machine
// credential registers no other name or pool.
func (cfg *Config) UseBootstrap(b provider.Bootstrap) error {
	if err := b.Validate(); err != nil {
		return err
	}
	cfg.HeadURL, cfg.JoinToken, cfg.LogToken = b.Head, b.Token, b.LogToken
	if b.Machine != "" {
		cfg.Name = b.Machine
	}
	if b.Pool != "" {
		cfg.Pool = b.Pool
	}
	if b.CA == "" {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(b.CA)) {
		return errors.New("bootstrap ca: no PEM certificate")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		return fmt.Errorf("bootstrap ca: the worker already has an HTTP transport (--ca-cert and a blob with a CA?)")
	}
	cfg.HTTPClient = &http.Client{Transport: tr}
	return nil
}
