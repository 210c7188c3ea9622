package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
)

// Pools lists every pool with its desired, ready, pending and draining
// nodes, queue and last decision.
func (c *Client) Pools(ctx context.Context) ([]httpapi.PoolJSON, error) {
	var out []httpapi.PoolJSON
	_, err := c.do(ctx, http.MethodGet, "/pools", nil, nil, &out)
	return out, err
}

// Nodes lists the nodes of pool, or of every pool when pool is nil.
func (c *Client) Nodes(ctx context.Context, pool *string) ([]httpapi.NodeJSON, error) {
	q := url.Values{}
	if pool != nil {
		q.Set("pool", *pool)
	}
	var out []httpapi.NodeJSON
	_, err := c.do(ctx, http.MethodGet, "/nodes", q, nil, &out)
	return out, err
}

// EventOptions select events.
type EventOptions struct {
	// Pool, when non-nil, keeps one pool's events ("" is the default pool).
	Pool *string
	// Since keeps only events with a larger ID; without it the newest
	// Limit events are selected.
	Since *int64
	// Limit bounds the answer (1 to httpapi.MaxEventLimit); the head's default
	// (httpapi.DefaultEventLimit) when zero.
	Limit int
}

func (o EventOptions) query() url.Values {
	q := url.Values{}
	if o.Pool != nil {
		q.Set("pool", *o.Pool)
	}
	if o.Since != nil {
		q.Set("since", strconv.FormatInt(*o.Since, 10))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Events lists events, oldest first.
func (c *Client) Events(ctx context.Context, o EventOptions) ([]httpapi.EventJSON, error) {
	var out []httpapi.EventJSON
	_, err := c.do(ctx, http.MethodGet, "/events", o.query(), nil, &out)
	return out, err
}

// FollowOptions tune FollowEvents.
type FollowOptions struct {
	// Clock paces reconnections; clock.Real{} when nil.
	Clock clock.Clock
	// Backoff is the pause before reconnecting after a stream that ended
	// early without an event; 1s when zero.
	Backoff time.Duration
}

// FollowEvents calls fn with the events o selects, then with each new one
// as the head records it, until ctx is done (it returns nil), fn fails (it
// returns fn's error) or the head cannot be reached or answers an error.
// When the head ends a stream (its follow bound), FollowEvents reconnects
// after the last event it saw, so no event is skipped or repeated.
func (c *Client) FollowEvents(ctx context.Context, o EventOptions, fn func(httpapi.EventJSON) error, fo FollowOptions) error {
	if fo.Clock == nil {
		fo.Clock = clock.Real{}
	}
	if fo.Backoff <= 0 {
		fo.Backoff = time.Second
	}
	hc := *c.hc
	hc.Timeout = 0 // a stream lasts as long as the head allows; ctx ends it
	for {
		start := fo.Clock.Now()
		n, err := c.followOnce(ctx, &hc, &o, fn)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 && fo.Clock.Now().Sub(start) < fo.Backoff {
			if err := sleep(ctx, fo.Clock, fo.Backoff); err != nil {
				return nil
			}
		}
	}
}

// followOnce reads one stream; it moves o.Since past every event passed to
// fn and returns how many there were.
func (c *Client) followOnce(ctx context.Context, hc *http.Client, o *EventOptions, fn func(httpapi.EventJSON) error) (int, error) {
	q := o.query()
	q.Set("follow", "1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/events?"+q.Encode(), nil)
	if err != nil {
		return 0, fmt.Errorf("follow events: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, &Error{StatusCode: resp.StatusCode, Detail: detail(data)}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		var ev httpapi.EventJSON
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return n, fmt.Errorf("follow events: decode %q: %w", sc.Text(), err)
		}
		if err := fn(ev); err != nil {
			return n, err
		}
		n++
		id := ev.ID
		o.Since = &id
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return n, fmt.Errorf("follow events: read: %w", err)
	}
	return n, nil
}
