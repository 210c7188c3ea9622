package client

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// headOnly is a head on loopback with a fake clock and no worker.
func headOnly(t *testing.T, mod func(*head.Config)) (*Client, *head.Head, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	cfg := head.Config{DataDir: t.TempDir(), Token: adminToken, Clock: clk}
	if mod != nil {
		mod(&cfg)
	}
	h, err := head.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() { srv.Close(); h.Close() })
	c, err := New(srv.URL, adminToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, h, clk
}

func record(t *testing.T, h *head.Head, pool, msg string) {
	t.Helper()
	if err := h.RecordEvent(context.Background(), head.Event{Pool: pool, Type: "Normal", Reason: "r", Message: msg}); err != nil {
		t.Fatal(err)
	}
}

func TestPoolsNodesAndEvents(t *testing.T) {
	ctx := context.Background()
	c, h, _ := headOnly(t, func(cfg *head.Config) {
		cfg.PoolStatus = func() []head.PoolStatus {
			return []head.PoolStatus{{Name: "p", Policy: "tide", Nodes: capacity.Elastic(0, 2), Desired: 1, Pending: 1,
				Machines: []head.MachineStatus{{Ordinal: 0, MachineID: "p-0-1", State: head.NodePending}}}}
		}
	})
	pools, err := c.Pools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Name != "p" || pools[0].Desired != 1 || pools[0].NodeSpec.Max != 2 {
		t.Fatalf("pools: %+v %v", pools, err)
	}
	p := "p"
	nodes, err := c.Nodes(ctx, &p)
	if err != nil || len(nodes) != 1 || nodes[0].ID != "p-0-1" || nodes[0].State != "pending" {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	other := "other"
	if nodes, err := c.Nodes(ctx, &other); err != nil || len(nodes) != 0 {
		t.Fatalf("nodes of an unknown pool: %+v %v", nodes, err)
	}
	for _, m := range []string{"1", "2", "3"} {
		record(t, h, "p", m)
	}
	record(t, h, "q", "4")
	since := int64(1)
	tests := []struct {
		name string
		o    EventOptions
		want []string
	}{
		{"newest", EventOptions{}, []string{"1", "2", "3", "4"}},
		{"pool", EventOptions{Pool: &p}, []string{"1", "2", "3"}},
		{"since and limit", EventOptions{Since: &since, Limit: 2}, []string{"2", "3"}},
		{"newest 1", EventOptions{Limit: 1}, []string{"4"}},
	}
	for _, tc := range tests {
		evs, err := c.Events(ctx, tc.o)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Message)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
	if _, err := c.Events(ctx, EventOptions{Limit: -3}); statusOf(err) != 400 {
		t.Fatalf("bad limit: %v", err)
	}
}

// TestFollowEventsReconnects: when the head ends a stream at its follow
// bound, the client resumes after the last event: nothing is skipped or
// repeated. It stops when ctx ends, when fn fails, and on an error answer.
func TestFollowEventsReconnects(t *testing.T) {
	c, h, clk := headOnly(t, func(cfg *head.Config) { cfg.EventFollowMax = time.Minute })
	record(t, h, "p", "1")
	record(t, h, "q", "skip")
	record(t, h, "p", "2")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan httpapi.EventJSON)
	done := make(chan error, 1)
	pool := "p"
	since := int64(0)
	go func() {
		done <- c.FollowEvents(ctx, EventOptions{Pool: &pool, Since: &since}, func(e httpapi.EventJSON) error {
			select {
			case got <- e:
			case <-ctx.Done():
			}
			return nil
		}, FollowOptions{})
	}()
	want := func(msg string) {
		t.Helper()
		select {
		case e := <-got:
			if e.Message != msg || e.Pool != "p" {
				t.Fatalf("got %+v, want message %q", e, msg)
			}
		case err := <-done:
			t.Fatalf("follow ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %q", msg)
		}
	}
	want("1")
	want("2")
	// The first stream's bound passes: the head ends it; the event recorded
	// meanwhile comes through the next stream, once.
	clk.Advance(time.Minute)
	record(t, h, "p", "3")
	want("3")
	clk.Advance(time.Minute)
	record(t, h, "p", "4")
	want("4")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow after cancel: %v", err)
	}
	select {
	case e := <-got:
		t.Fatalf("extra event %+v", e)
	default:
	}

	stop := errors.New("enough")
	err := c.FollowEvents(context.Background(), EventOptions{}, func(httpapi.EventJSON) error { return stop }, FollowOptions{})
	if !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	bad, _ := New(c.BaseURL(), "wrong", nil)
	err = bad.FollowEvents(context.Background(), EventOptions{}, func(httpapi.EventJSON) error { return nil }, FollowOptions{})
	if statusOf(err) != 401 {
		t.Fatalf("wrong token: %v", err)
	}
}
