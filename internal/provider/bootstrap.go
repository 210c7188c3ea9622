package provider

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode"

	sdk "github.com/tide-project/tide/sdk/provider"
)

// BootstrapVersion is the version of the Bootstrap wire form this package writes.
const BootstrapVersion = 1

// Field limits of a Bootstrap, in bytes; with them an encoded blob always
// fits in sdk.MaxBootstrapSize.
const (
	maxBootstrapHead  = 2048
	maxBootstrapToken = 4096
)

// Bootstrap is what a tide worker needs to join its cluster (BigFleet §13):
// the head's address and a join token; for a machine that joins over the
// network also the CA certificate that signed the head's TLS certificate,
// the pool and machine id it joins as, and the token the head presents to
// its log server. Token is then a credential scoped to that one machine
// (see DESIGN.md "Credentials"). Providers never look inside: they carry
// the encoded blob from ConfigureRequest.Bootstrap to the machine (an
// environment variable, cloud user-data), and the worker decodes it with
// ParseBootstrap.
type Bootstrap struct {
	// Head is the head's base URL, e.g. "http://10.0.0.1:8000".
	Head string `json:"head"`
	// Token is the join token the worker presents to the head.
	Token string `json:"token"`
	// CA is the PEM certificate of the CA the worker trusts for the head's
	// https URL; empty: the system's roots.
	CA string `json:"ca,omitempty"`
	// Pool and Machine are the pool and worker name the machine joins as;
	// a machine credential registers no other.
	Pool    string `json:"pool,omitempty"`
	Machine string `json:"machine,omitempty"`
	// LogToken is what the head presents to the worker's log server.
	LogToken string `json:"log_token,omitempty"`
}

type bootstrapWire struct {
	Version  int    `json:"version"`
	Head     string `json:"head"`
	Token    string `json:"token"`
	CA       string `json:"ca,omitempty"`
	Pool     string `json:"pool,omitempty"`
	Machine  string `json:"machine,omitempty"`
	LogToken string `json:"log_token,omitempty"`
}

// LogToken derives the token a head presents to worker's log server from
// the head's secret (its join token, else its admin token): a worker that
// knows the secret recomputes it, a machine that joined with a bootstrap
// blob gets only its own.
func LogToken(secret, worker string) string {
	if secret == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("tide-log-token\x00" + worker))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Validate checks the fields; errors name the field.
func (b Bootstrap) Validate() error {
	var errs []error
	if b.Head == "" {
		errs = append(errs, errors.New("bootstrap head: must be set"))
	} else if u, err := url.Parse(b.Head); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap head: %w", err))
	} else if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("bootstrap head: %q is not an http or https URL with a host", b.Head))
	}
	if len(b.Head) > maxBootstrapHead {
		errs = append(errs, fmt.Errorf("bootstrap head: %d bytes, at most %d allowed", len(b.Head), maxBootstrapHead))
	}
	if len(b.Token) > maxBootstrapToken {
		errs = append(errs, fmt.Errorf("bootstrap token: %d bytes, at most %d allowed", len(b.Token), maxBootstrapToken))
	}
	if b.Token == "" {
		errs = append(errs, errors.New("bootstrap token: must be set"))
	}
	if b.CA != "" {
		blk, _ := pem.Decode([]byte(b.CA))
		if blk == nil || blk.Type != "CERTIFICATE" {
			errs = append(errs, errors.New("bootstrap ca: not a PEM certificate"))
		} else if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			errs = append(errs, fmt.Errorf("bootstrap ca: %w", err))
		}
	}
	if b.Pool != "" {
		if err := sdk.ValidName("pool", b.Pool); err != nil {
			errs = append(errs, fmt.Errorf("bootstrap %w", err))
		}
	}
	if b.Machine != "" {
		if err := sdk.ValidName("machine", b.Machine); err != nil {
			errs = append(errs, fmt.Errorf("bootstrap %w", err))
		}
	}
	if len(b.LogToken) > maxBootstrapToken || strings.ContainsFunc(b.LogToken, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		errs = append(errs, errors.New("bootstrap log_token: too long, or has spaces or control characters"))
	}
	for _, r := range b.Token {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			errs = append(errs, errors.New("bootstrap token: must not contain spaces or control characters"))
			break
		}
	}
	return errors.Join(errs...)
}

// Marshal validates b and encodes it as the blob for ConfigureRequest.Bootstrap.
func (b Bootstrap) Marshal() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(bootstrapWire{Version: BootstrapVersion, Head: b.Head, Token: b.Token,
		CA: b.CA, Pool: b.Pool, Machine: b.Machine, LogToken: b.LogToken}); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > sdk.MaxBootstrapSize {
		return nil, fmt.Errorf("bootstrap: encoded size %d exceeds %d bytes", len(out), sdk.MaxBootstrapSize)
	}
	return out, nil
}

// ParseBootstrap decodes and validates a blob written by Bootstrap.Marshal.
// Unknown fields, other versions, trailing data and oversized blobs are
// errors that name what is wrong.
func ParseBootstrap(data []byte) (Bootstrap, error) {
	if len(data) > sdk.MaxBootstrapSize {
		return Bootstrap{}, fmt.Errorf("bootstrap: size %d exceeds %d bytes", len(data), sdk.MaxBootstrapSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w bootstrapWire
	if err := dec.Decode(&w); err != nil {
		return Bootstrap{}, fmt.Errorf("bootstrap: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Bootstrap{}, errors.New("bootstrap: trailing data after the JSON object")
	}
	if w.Version != BootstrapVersion {
		return Bootstrap{}, fmt.Errorf("bootstrap version: got %d, want %d", w.Version, BootstrapVersion)
	}
	b := Bootstrap{Head: w.Head, Token: w.Token, CA: w.CA, Pool: w.Pool, Machine: w.Machine, LogToken: w.LogToken}
	if err := b.Validate(); err != nil {
		return Bootstrap{}, err
	}
	return b, nil
}

// NodeJoinKind is the "kind" of the other blob a machine may find in its
// bootstrap slot: a Kubernetes join document minted by `tide kube`
// (internal/kube/nodeagent.Join: an apiserver, a token of the machine's
// own ServiceAccount, the Node to register). `tide worker --bootstrap`
// given one registers the machine as that Node (the node agent, `tide kube
// node`) instead of joining a head, so every provider that starts a tide
// worker with its blob (local, netns, serve-local, EC2 user data) joins
// Kubernetes clusters unchanged.
const NodeJoinKind = "tide.dev/node-join"

// IsNodeJoin reports whether blob is a Kubernetes join document: a JSON
// object whose kind is NodeJoinKind. Its fields are the node agent's to
// check.
func IsNodeJoin(blob []byte) bool {
	if len(blob) > sdk.MaxBootstrapSize {
		return false
	}
	var k struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(bytes.TrimSpace(blob), &k) == nil && k.Kind == NodeJoinKind
}
