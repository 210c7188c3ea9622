// Package client is a small HTTP client for the head's API (PyLet's paths
// and shapes plus tide's extensions), used by the CLI and by tests.
//
// Errors from the head come back as *Error with the HTTP status and the
// head's {"detail": ...}; use IsNotFound for 404s. Every method takes a
// context; the client adds no timeout of its own beyond its http.Client's.
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// Environment variables and the default head address (PyLet's port).
const (
	EnvHead     = "TIDE_HEAD"
	EnvToken    = "TIDE_TOKEN"
	DefaultHead = "http://127.0.0.1:8000"
)

// Client talks to one head. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// New returns a client for the head at headURL ("http://host:port", or
// PyLet's "host:port"). token is sent as a bearer token when non-empty; the
// password of a URL with userinfo ("http://:TOKEN@host:port", PyLet's way of
// passing a token) is the token when token is empty. A nil hc means a
// client with a 60s timeout.
func New(headURL, token string, hc *http.Client) (*Client, error) {
	if headURL == "" {
		return nil, errors.New("client: head URL is empty")
	}
	if !strings.Contains(headURL, "://") {
		headURL = "http://" + headURL
	}
	u, err := url.Parse(headURL)
	if err != nil {
		return nil, fmt.Errorf("client: head URL %q: %w", headURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: head URL %q must be http(s)://host:port", headURL)
	}
	if u.User != nil {
		// PyLet's form "http://:TOKEN@head:8000": the password is the token.
		// It is kept out of the base URL, which error messages print.
		if p, ok := u.User.Password(); ok && token == "" {
			token = p
		}
		u.User = nil
	}
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	return &Client{base: strings.TrimSuffix(u.String(), "/"), token: token, hc: hc}, nil
}

// FromEnv returns a client for $TIDE_HEAD (default http://127.0.0.1:8000)
// with the token in $TIDE_TOKEN.
func FromEnv() (*Client, error) {
	head := os.Getenv(EnvHead)
	if head == "" {
		head = DefaultHead
	}
	return New(head, os.Getenv(EnvToken), nil)
}

// BaseURL returns the head's base URL.
func (c *Client) BaseURL() string { return c.base }

// Error is an error answer from the head.
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Detail is the head's detail message (a 422's list as JSON text).
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("head answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("head answered %d: %s", e.StatusCode, e.Detail)
}

// IsNotFound reports whether err is a 404 from the head.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// statusOf returns the HTTP status of a head error, or 0.
func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// do sends a request and decodes a 2xx JSON answer into out (when non-nil).
// It returns the status code.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &Error{StatusCode: resp.StatusCode, Detail: detail(data)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// detail extracts {"detail": ...} from an error body.
func detail(data []byte) string {
	var e struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(data, &e) != nil || len(e.Detail) == 0 {
		return strings.TrimSpace(string(data))
	}
	var s string
	if json.Unmarshal(e.Detail, &s) == nil {
		return s
	}
	return string(e.Detail)
}

// Health checks that the head answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/health", nil, nil, nil)
	return err
}

// Submit submits instances; the answer holds the new id (and every id with
// replicas).
func (c *Client) Submit(ctx context.Context, req *httpapi.SubmitRequest) (httpapi.SubmitResponse, error) {
	var out httpapi.SubmitResponse
	_, err := c.do(ctx, http.MethodPost, "/instances", nil, req, &out)
	return out, err
}

// Instance returns one instance by id.
func (c *Client) Instance(ctx context.Context, id string) (*httpapi.InstanceJSON, error) {
	var out httpapi.InstanceJSON
	if _, err := c.do(ctx, http.MethodGet, "/instances/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// InstanceByName returns one instance by name.
func (c *Client) InstanceByName(ctx context.Context, name string) (*httpapi.InstanceJSON, error) {
	var out httpapi.InstanceJSON
	if _, err := c.do(ctx, http.MethodGet, "/instances/by-name/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListOptions filter Instances; every label must match.
type ListOptions struct {
	Status string
	Labels map[string]string
	Pool   *string
}

// Instances lists instances, newest first.
func (c *Client) Instances(ctx context.Context, o ListOptions) ([]httpapi.InstanceJSON, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	for k, v := range o.Labels {
		q.Add("label", k+"="+v)
	}
	if o.Pool != nil {
		q.Set("pool", *o.Pool)
	}
	var out []httpapi.InstanceJSON
	_, err := c.do(ctx, http.MethodGet, "/instances", q, nil, &out)
	return out, err
}

// Endpoint returns an instance's "host:port".
func (c *Client) Endpoint(ctx context.Context, id string) (string, error) {
	var out struct {
		Endpoint string `json:"endpoint"`
	}
	_, err := c.do(ctx, http.MethodGet, "/instances/"+url.PathEscape(id)+"/endpoint", nil, nil, &out)
	return out.Endpoint, err
}

// Result is an instance's outcome.
type Result struct {
	// Done is false while the instance has not finished (PyLet's 202).
	Done bool `json:"done"`
	// Status is COMPLETED, FAILED or CANCELLED when done.
	Status        string  `json:"status,omitempty"`
	ExitCode      *int    `json:"exit_code"`
	FailureReason *string `json:"failure_reason,omitempty"`
}

// Result returns an instance's outcome (Done false while it runs).
func (c *Client) Result(ctx context.Context, id string) (Result, error) {
	var raw struct {
		Result *struct {
			ExitCode *int `json:"exit_code"`
		} `json:"result"`
		Error *struct {
			ExitCode      *int    `json:"exit_code"`
			FailureReason *string `json:"failure_reason"`
		} `json:"error"`
		Cancelled bool `json:"cancelled"`
	}
	code, err := c.do(ctx, http.MethodGet, "/instances/"+url.PathEscape(id)+"/result", nil, nil, &raw)
	if err != nil {
		return Result{}, err
	}
	switch {
	case code == http.StatusAccepted:
		return Result{}, nil
	case raw.Result != nil:
		return Result{Done: true, Status: "COMPLETED", ExitCode: raw.Result.ExitCode}, nil
	case raw.Error != nil:
		return Result{Done: true, Status: "FAILED", ExitCode: raw.Error.ExitCode, FailureReason: raw.Error.FailureReason}, nil
	case raw.Cancelled:
		return Result{Done: true, Status: "CANCELLED"}, nil
	}
	return Result{}, fmt.Errorf("result %s: unrecognised answer", id)
}

// Cancel cancels an instance; grace nil means the head's default. It
// returns "cancelling" or "already_cancelling".
func (c *Client) Cancel(ctx context.Context, id string, grace *time.Duration) (string, error) {
	q := url.Values{}
	if grace != nil {
		q.Set("grace_period_seconds", strconv.FormatFloat(grace.Seconds(), 'f', -1, 64))
	}
	var out struct {
		Status string `json:"status"`
	}
	_, err := c.do(ctx, http.MethodPost, "/instances/"+url.PathEscape(id)+"/cancel", q, nil, &out)
	return out.Status, err
}

type deleted struct {
	Deleted []string `json:"deleted"`
}

// DeleteInstance deletes a finished instance by id.
func (c *Client) DeleteInstance(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/instances/"+url.PathEscape(id), nil, nil, &deleted{})
	return err
}

// DeleteInstanceByName deletes a finished instance by name.
func (c *Client) DeleteInstanceByName(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/instances/by-name/"+url.PathEscape(name), nil, nil, &deleted{})
	return err
}

// DeleteInstances deletes every finished instance, or those in status.
func (c *Client) DeleteInstances(ctx context.Context, status string) ([]string, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	var out deleted
	_, err := c.do(ctx, http.MethodDelete, "/instances", q, nil, &out)
	return out.Deleted, err
}

// Workers lists workers.
func (c *Client) Workers(ctx context.Context) ([]httpapi.WorkerJSON, error) {
	var out []httpapi.WorkerJSON
	_, err := c.do(ctx, http.MethodGet, "/workers", nil, nil, &out)
	return out, err
}

// Worker returns one worker.
func (c *Client) Worker(ctx context.Context, id string) (*httpapi.WorkerJSON, error) {
	var out httpapi.WorkerJSON
	if _, err := c.do(ctx, http.MethodGet, "/workers/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWorker deletes an OFFLINE worker.
func (c *Client) DeleteWorker(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/workers/"+url.PathEscape(id), nil, nil, &deleted{})
	return err
}

// DeleteOfflineWorkers deletes every OFFLINE worker.
func (c *Client) DeleteOfflineWorkers(ctx context.Context) ([]string, error) {
	var out deleted
	_, err := c.do(ctx, http.MethodDelete, "/workers", url.Values{"status": {"OFFLINE"}}, nil, &out)
	return out.Deleted, err
}

// LogChunk is a decoded piece of an instance's log.
type LogChunk struct {
	// AvailableOffset is the oldest offset the worker still has.
	AvailableOffset int64
	// TotalSize is the offset one past the last byte written.
	TotalSize int64
	Content   []byte
}

// Logs reads up to limit bytes of an instance's log from offset (the worker
// clamps offset to what it retains).
func (c *Client) Logs(ctx context.Context, id string, offset, limit int64) (*LogChunk, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}
	var raw httpapi.LogChunk
	if _, err := c.do(ctx, http.MethodGet, "/instances/"+url.PathEscape(id)+"/logs", q, nil, &raw); err != nil {
		return nil, err
	}
	content, err := base64.StdEncoding.DecodeString(raw.Content)
	if err != nil {
		return nil, fmt.Errorf("logs %s: content is not base64: %w", id, err)
	}
	return &LogChunk{AvailableOffset: raw.AvailableOffset, TotalSize: raw.TotalSize, Content: content}, nil
}
