package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/client"
)

// clientFlags are the flags every command that talks to a head shares.
type clientFlags struct {
	head, token, caCert string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.head, "head", "", "head URL (env "+client.EnvHead+", default "+client.DefaultHead+")")
	fl.StringVar(&f.token, "token", "", "admin token (env "+client.EnvToken+")")
	fl.StringVar(&f.caCert, "ca-cert", "", "PEM file of the CA that signed the head's TLS certificate")
}

// client builds a head client from the flags, then the environment.
func (f *clientFlags) client() (*client.Client, error) {
	head := f.head
	if head == "" {
		head = os.Getenv(client.EnvHead)
	}
	if head == "" {
		head = client.DefaultHead
	}
	token := f.token
	if token == "" {
		token = os.Getenv(client.EnvToken)
	}
	hc, err := httpClient(f.caCert, 60*time.Second)
	if err != nil {
		return nil, badInput(err)
	}
	c, err := client.New(head, token, hc)
	if err != nil {
		return nil, badInput(fmt.Errorf("--head: %w", err))
	}
	return c, nil
}

// httpClient returns a client that trusts caFile (PEM) in addition to the
// system roots when it is set.
func httpClient(caFile string, timeout time.Duration) (*http.Client, error) {
	hc := &http.Client{Timeout: timeout}
	if caFile == "" {
		return hc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-cert: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-cert: %s holds no PEM certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	hc.Transport = tr
	return hc, nil
}

// headError turns a head's 4xx answer (bad request, unknown instance) into
// an input error (exit 2); anything else stays a run-time error (exit 1).
func headError(err error) error {
	var he *client.Error
	if errors.As(err, &he) && he.StatusCode >= 400 && he.StatusCode < 500 &&
		he.StatusCode != http.StatusUnauthorized && he.StatusCode != http.StatusForbidden {
		return badInput(err)
	}
	return err
}

// askHead is the shape every client command shares: check -o (out is empty
// for a command without one), build the client, make the call (a 4xx answer
// is bad input, exit 2), then print the answer as JSON or with print. A new
// read command is its flags plus one askHead.
func askHead[T any](ctx context.Context, s Streams, cf *clientFlags, out string,
	call func(*client.Client, context.Context) (T, error), print func(io.Writer, T) error) error {
	if out != "" {
		if err := checkOutput(out); err != nil {
			return err
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	v, err := call(c, ctx)
	if err != nil {
		return headError(err)
	}
	if out == "json" {
		return writeJSONOut(s.Out, v)
	}
	return print(s.Out, v)
}

// outputFlag registers -o table|json.
func outputFlag(cmd *cobra.Command, out *string) {
	cmd.Flags().StringVarP(out, "output", "o", "table", "output format: table or json")
}

func checkOutput(out string) error {
	if out != "table" && out != "json" {
		return badInput(fmt.Errorf("-o: want table or json, got %q", out))
	}
	return nil
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseKV reads repeated key=value flags; flag names the flag in errors.
func parseKV(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, badInput(fmt.Errorf("--%s %q: want key=value", flag, v))
		}
		out[k] = val
	}
	return out, nil
}

func deref[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}
