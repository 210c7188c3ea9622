package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/config"

	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/sdk/provider"
)

// Options are the settings of a `provider: {type: plugin, options: {...}}`:
// either command (a subprocess plugin) or address (a remote one).
type Options struct {
	// Command is the plugin's argv, for a subprocess plugin.
	Command []string `json:"command,omitempty"`
	// Env is added to a subprocess plugin's environment (KEY=VALUE).
	Env []string `json:"env,omitempty"`
	// Address is host:port of a remote plugin.
	Address string `json:"address,omitempty"`
	// TLS configures TLS (with cert_file and key_file: mutual TLS) to a
	// remote plugin.
	TLS *TLSFiles `json:"tls,omitempty"`
	// TokenFile holds the bearer token for a remote plugin.
	TokenFile string `json:"token_file,omitempty"`
	// CallTimeout bounds each call (default 10s).
	CallTimeout config.Duration `json:"call_timeout,omitempty"`
}

// TLSFiles names the PEM files of a TLS configuration.
type TLSFiles struct {
	// CAFile verifies the peer's certificate (the server's for tide, the
	// clients' for a plugin requiring mutual TLS).
	CAFile string `json:"ca_file,omitempty"`
	// CertFile and KeyFile are this side's certificate and key.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// ServerName overrides the name checked in the server's certificate.
	ServerName string `json:"server_name,omitempty"`
}

// ParseOptions reads a plugin provider's options; errors name the field
// (under provider.options).
func ParseOptions(raw map[string]any) (Options, error) {
	var o Options
	b, err := json.Marshal(raw)
	if err != nil {
		return o, fmt.Errorf("provider.options: %w", err)
	}
	if err := strictjson.Decode(b, &o); err != nil {
		return o, fmt.Errorf("provider.options: %w", err)
	}
	switch {
	case len(o.Command) == 0 && o.Address == "":
		return o, errors.New("provider.options: a plugin needs command (a subprocess) or address (a remote plugin)")
	case len(o.Command) > 0 && o.Address != "":
		return o, errors.New("provider.options: set command or address, not both")
	case len(o.Command) > 0 && (o.TLS != nil || o.TokenFile != ""):
		return o, errors.New("provider.options: tls and token_file apply to a remote plugin (address) only")
	}
	return o, nil
}

// ClientTLS builds the TLS configuration tide dials a remote plugin with.
func (f *TLSFiles) ClientTLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ServerTLS builds a remote plugin's TLS configuration; with CAFile set
// it requires client certificates signed by it (mutual TLS).
func (f *TLSFiles) ServerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls cert/key: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls client ca: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return pool, nil
}

// ReadToken reads a bearer token file (surrounding space trimmed).
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s: empty token", path)
	}
	return tok, nil
}

// Open starts (command) or dials (address) the plugin o names and returns
// it as a Provider with the means to stop it: what a pool with
// `provider: {type: plugin}` runs on.
func Open(ctx context.Context, o Options, log *slog.Logger) (provider.Provider, io.Closer, error) {
	if len(o.Command) > 0 {
		s, err := StartSubprocess(SubprocessConfig{Command: o.Command, Env: o.Env, Logger: log,
			CallTimeout: time.Duration(o.CallTimeout)})
		if err != nil {
			return nil, nil, err
		}
		return s, s, nil
	}
	dc := provider.DialConfig{CallTimeout: time.Duration(o.CallTimeout)}
	if o.TLS != nil {
		t, err := o.TLS.ClientTLS()
		if err != nil {
			return nil, nil, fmt.Errorf("provider.options.%w", err)
		}
		dc.TLS = t
	}
	if o.TokenFile != "" {
		tok, err := ReadToken(o.TokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("provider.options.token_file: %w", err)
		}
		dc.Token = tok
	}
	c, err := provider.Dial(ctx, o.Address, dc)
	if err != nil {
		return nil, nil, err
	}
	return c, c, nil
}
