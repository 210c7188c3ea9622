package head

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/store"
)

// DefaultCredentialTTL is how long a machine's join credential stays good
// while unused: long enough for a cloud machine to boot and run its
// user-data, short enough that a leaked, never-used blob soon means nothing.
const DefaultCredentialTTL = 30 * time.Minute

// MintBootstrap mints a join credential scoped to one machine of a pool and
// returns the encoded bootstrap blob that carries it: headURL, the head's
// CA certificate, the pool, the machine id, the credential and the token
// the head presents to the machine's log server. The head keeps only the
// credential's hash. The credential registers no other worker name or
// pool, expires after Config.CredentialTTL unless used, and stops working
// when RevokeMachine is called for the machine.
func (h *Head) MintBootstrap(ctx context.Context, pool, machine, headURL string) ([]byte, error) {
	b := provider.Bootstrap{Head: headURL, Token: "-", CA: string(h.cfg.CACertPEM), Pool: pool, Machine: machine,
		LogToken: provider.LogToken(h.joinToken(), machine)}
	if pool == "" || machine == "" {
		return nil, bad("bootstrap: pool and machine must be set")
	}
	if err := b.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	b.Token = tok
	blob, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	now := h.clk.Now()
	if err := h.st.AddCredential(ctx, store.Credential{Hash: hashToken(tok), MachineID: machine, Pool: pool,
		CreatedAt: now, ExpiresAt: now.Add(h.cfg.CredentialTTL)}); err != nil {
		return nil, err
	}
	h.log.Info("machine credential minted", "machine", machine, "pool", pool, "expires_unused", now.Add(h.cfg.CredentialTTL))
	return blob, nil
}

// RevokeMachine removes every join credential of a machine: it was
// deleted, and its blob must not register anything any more.
func (h *Head) RevokeMachine(ctx context.Context, machine string) error {
	n, err := h.st.RevokeCredentials(ctx, machine)
	if err == nil && n > 0 {
		h.log.Info("machine credentials revoked", "machine", machine, "count", n)
	}
	return err
}

// authMachine is the API's check of a machine credential at registration.
func (h *Head) authMachine(ctx context.Context, token, worker, pool string) bool {
	err := h.st.UseCredential(ctx, hashToken(token), worker, pool, h.clk.Now())
	if err != nil {
		if !errors.Is(err, store.ErrCredential) {
			h.log.Error("checking a machine credential", "worker", worker, "err", err)
		} else {
			h.log.Warn("registration refused: invalid machine credential", "worker", worker, "pool", pool)
		}
		return false
	}
	return true
}

// bootstrapRequest is the body of POST /bootstrap.
type bootstrapRequest struct {
	Pool    string `json:"pool"`
	Machine string `json:"machine"`
	// HeadURL overrides the head URL put in the blob.
	HeadURL string `json:"head_url,omitempty"`
}

// serveBootstrap is POST /bootstrap (admin): it mints a machine's blob and
// answers it as the body. The head URL is the request's, the configured
// AdvertiseURL, or the one the admin reached.
func (h *Head) serveBootstrap(w http.ResponseWriter, r *http.Request) {
	var req bootstrapRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"detail": msg})
	}
	if err := dec.Decode(&req); err != nil {
		fail(http.StatusUnprocessableEntity, fmt.Sprintf("bootstrap request: %v", err))
		return
	}
	url := req.HeadURL
	if url == "" {
		url = h.cfg.AdvertiseURL
	}
	if url == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		url = scheme + "://" + r.Host
	}
	blob, err := h.MintBootstrap(r.Context(), req.Pool, req.Machine, url)
	if err != nil {
		var ae *httpapi.Error
		if errors.As(err, &ae) {
			fail(ae.Code, ae.Detail)
			return
		}
		h.log.Error("minting a bootstrap blob", "machine", req.Machine, "err", err)
		fail(http.StatusInternalServerError, "Internal server error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(blob, '\n'))
}
