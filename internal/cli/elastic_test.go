package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
)

var elasticStart = time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC)

// elasticHead starts a head (token "tok", fake clock) with one autoscaled
// pool "cpu" of two machines, one of them joined and running an instance,
// and a worker of the default pool no autoscaler knows.
func elasticHead(t *testing.T) (*head.Head, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(elasticStart)
	h, err := head.New(context.Background(), head.Config{DataDir: t.TempDir(), Token: "tok", Clock: clk, ReserveAfter: -1,
		PoolStatus: func() []head.PoolStatus {
			return []head.PoolStatus{{Name: "cpu", Provider: "local", Policy: "tide", Nodes: capacity.Elastic(0, 4),
				Desired: 2, Ready: 1, Pending: 1, Reason: "2 queued need 2 nodes", DecidedAt: elasticStart.Add(-5 * time.Minute),
				Machines: []head.MachineStatus{
					{Ordinal: 0, MachineID: "cpu-0-1", Offering: "local-8", State: head.NodeReady, CreatedAt: elasticStart.Add(-2 * time.Hour)},
					{Ordinal: 1, MachineID: "cpu-1-2", Offering: "local-8", State: head.NodeMarked,
						MarkedAt: elasticStart.Add(-time.Minute), Resources: capacity.Resources{MilliCPU: 8000, Memory: 16 << 30}},
				}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() { srv.Close(); h.Close() })
	t.Setenv("TIDE_HEAD", srv.URL)
	t.Setenv("TIDE_TOKEN", "tok")
	c, err := client.New(srv.URL, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, w := range []struct{ id, pool string }{{"cpu-0-1", "cpu"}, {"solo", ""}} {
		// Registration is the worker's call; the admin token is accepted.
		if err := registerWorker(srv.URL, w.id, w.pool); err != nil {
			t.Fatal(err)
		}
	}
	cmd, pool := "serve", "cpu"
	cpu := 2.0
	if _, err := c.Submit(ctx, &httpapi.SubmitRequest{Command: &cmd, Pool: &pool, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu}}); err != nil {
		t.Fatal(err)
	}
	if n, err := h.ScheduleOnce(ctx); err != nil || n != 1 {
		t.Fatalf("schedule: %d %v", n, err)
	}
	for i, r := range []string{"desired-changed", "provision", "joined"} {
		if err := h.RecordEvent(ctx, head.Event{Time: elasticStart.Add(time.Duration(i) * time.Second), Pool: "cpu",
			Type: "Normal", Reason: r, Message: "step " + r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.RecordEvent(ctx, head.Event{Pool: "gpu", Type: "Warning", Reason: "at-max", Node: "gpu-3-9",
		Message: "held at max 4"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	return h, clk
}

func registerWorker(url, id, pool string) error {
	body, err := json.Marshal(httpapi.RegisterRequest{WorkerID: id, Host: "127.0.0.1", Pool: pool,
		Resources: &httpapi.ResourceSpec{CPUCores: ptr(8.0), MemoryMB: ptr(int64(16384))}})
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, url+"/workers", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("register %s: %d", id, resp.StatusCode)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func TestPoolsNodesEventsCommands(t *testing.T) {
	elasticHead(t)
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(args...)
		if code != 0 {
			t.Fatalf("tide %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	tests := []struct {
		args []string
		want []string // substrings, in order
	}{
		{[]string{"pools"}, []string{"POOL", "DESIRED", "READY", "PENDING", "DRAINING",
			"cpu", "tide", "0/0/4", "2", "1", "1", "0", "1", "0", "1", "2/8", "2 queued need 2 nodes (5m ago)",
			"(default)", "-", "-", "-", "1"}},
		{[]string{"nodes", "--pool", "cpu"}, []string{"NODE", "STATE", "MARKED", "AGE",
			"cpu-0-1", "ready", "ONLINE", "2/8", "512/16384", "1", "2h0m",
			"cpu-1-2", "marked", "-", "0/8", "2026-07-08 09:09:11", "-"}},
		{[]string{"nodes"}, []string{"cpu-0-1", "cpu-1-2", "(default)", "solo", "ready", "30s"}},
		{[]string{"events"}, []string{"ID", "REASON", "1", "2026-07-08 09:10:11", "cpu", "Normal", "desired-changed",
			"step desired-changed", "provision", "joined", "gpu", "Warning", "at-max", "gpu-3-9", "held at max 4"}},
		{[]string{"events", "--pool", "cpu", "--since", "1", "--limit", "1"}, []string{"provision"}},
	}
	for _, tc := range tests {
		out := must(tc.args...)
		rest := out
		for _, w := range tc.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Fatalf("tide %s: %q missing (in order) from:\n%s", strings.Join(tc.args, " "), w, out)
			}
			rest = rest[i+len(w):]
		}
	}
	if out := must("events", "--pool", "cpu", "--since", "1", "--limit", "1"); strings.Contains(out, "joined") {
		t.Fatalf("--limit 1 printed more: %s", out)
	}
	var pools []httpapi.PoolJSON
	if err := json.Unmarshal([]byte(must("pools", "-o", "json")), &pools); err != nil || len(pools) != 2 ||
		pools[0].Name != "cpu" || pools[0].Marked != 1 || pools[0].Inflight != 1 || pools[1].Workers != 1 {
		t.Fatalf("pools -o json: %+v %v", pools, err)
	}
	var nodes []httpapi.NodeJSON
	if err := json.Unmarshal([]byte(must("nodes", "--pool", "", "-o", "json")), &nodes); err != nil || len(nodes) != 1 ||
		nodes[0].ID != "solo" || nodes[0].Managed {
		t.Fatalf("nodes --pool '' -o json: %+v %v", nodes, err)
	}
	var evs []httpapi.EventJSON
	if err := json.Unmarshal([]byte(must("events", "-o", "json", "--pool", "gpu")), &evs); err != nil || len(evs) != 1 ||
		evs[0].Node != "gpu-3-9" {
		t.Fatalf("events -o json: %+v %v", evs, err)
	}
	errCases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pools", "-o", "yaml"}, ExitUsage, "-o"},
		{[]string{"nodes", "extra"}, ExitUsage, "unknown command"},
		{[]string{"events", "--limit", "-1"}, ExitUsage, "--limit"},
		{[]string{"events", "--since", "-2"}, ExitUsage, "--since"},
		{[]string{"events", "--token", "wrong"}, ExitError, "401"},
	}
	for _, c := range errCases {
		code, _, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("tide %s: exit %d, stderr %q; want exit %d mentioning %q", strings.Join(c.args, " "), code, errs, c.code, c.want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine,
// which signals each write.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until the buffer holds n lines.
func (l *lockedBuffer) waitFor(t *testing.T, n int) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if s := l.String(); strings.Count(s, "\n") >= n {
			return s
		}
		select {
		case <-l.wrote:
		case <-timeout:
			t.Fatalf("waited for %d lines, have:\n%s", n, l.String())
		}
	}
}

// TestEventsFollowCommand: `tide events -f -o json` prints the backlog then
// each new event as one JSON line, and Ctrl-C (ctx) ends it with exit 0.
func TestEventsFollowCommand(t *testing.T) {
	h, _ := elasticHead(t)
	for _, format := range []string{"json", "table"} {
		t.Run(format, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			out := &lockedBuffer{wrote: make(chan struct{}, 1)}
			done := make(chan int, 1)
			go func() {
				done <- Main(ctx, []string{"events", "-f", "--pool", "cpu", "--limit", "2", "-o", format},
					Streams{In: strings.NewReader(""), Out: out, Err: out})
			}()
			header := 0
			if format == "table" {
				header = 1
			}
			out.waitFor(t, header+2)
			if err := h.RecordEvent(context.Background(), head.Event{Pool: "cpu", Type: "Normal", Reason: "drain",
				Message: "draining " + format}); err != nil {
				t.Fatal(err)
			}
			if err := h.RecordEvent(context.Background(), head.Event{Pool: "other", Type: "Normal", Reason: "x"}); err != nil {
				t.Fatal(err)
			}
			got := out.waitFor(t, header+3)
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d: %s", code, out.String())
			}
			lines := strings.Split(strings.TrimSpace(got), "\n")[header:]
			if format == "table" {
				if len(lines) != 3 || !strings.Contains(lines[2], "draining table") || !strings.Contains(lines[1], "cpu") {
					t.Fatalf("table follow:\n%s", got)
				}
				return
			}
			var reasons []string
			for _, l := range lines {
				var e httpapi.EventJSON
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				reasons = append(reasons, e.Reason)
			}
			if strings.Join(reasons, ",") != "provision,joined,drain" {
				t.Fatalf("followed reasons %v", reasons)
			}
		})
	}
}
