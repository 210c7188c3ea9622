package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Bootstrap asks the head (admin) to mint a join credential for one machine
// of a pool and returns the encoded bootstrap blob that carries it.
// headURL, when set, is the head URL the blob names; otherwise the head
// picks (its advertised URL, or the one this client reached).
func (c *Client) Bootstrap(ctx context.Context, pool, machine, headURL string) ([]byte, error) {
	var raw json.RawMessage
	body := map[string]string{"pool": pool, "machine": machine}
	if headURL != "" {
		body["head_url"] = headURL
	}
	if _, err := c.do(ctx, http.MethodPost, "/bootstrap", nil, body, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}
