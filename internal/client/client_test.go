package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/agent"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
)

const adminToken = "admin-token"

// cluster is a head on loopback with one in-process worker.
func cluster(t *testing.T, mod func(*agent.Config)) (*Client, *head.Head) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := head.New(context.Background(), head.Config{DataDir: t.TempDir(), Token: adminToken,
		PollTimeout: 2 * time.Second, SuspectAfter: 12 * time.Second, OfflineAfter: 13 * time.Second,
		SchedulerInterval: 200 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	loops := make(chan struct{})
	go func() { h.RunLoops(ctx); close(loops) }()
	cfg := agent.Config{HeadURL: srv.URL, Name: "w1", JoinToken: adminToken, DataDir: t.TempDir(),
		LogAddr: "127.0.0.1:0", Resources: capacity.Resources{MilliCPU: 2000, Memory: 2 << 30},
		PortMin: 22600, PortMax: 22650, HeartbeatTimeout: 5 * time.Second, RetryMin: 20 * time.Millisecond,
		RetryMax: 200 * time.Millisecond, StopOnExit: true, Logger: logger}
	if mod != nil {
		mod(&cfg)
	}
	ready := make(chan struct{})
	cfg.OnReady = func(agent.Info) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		<-loops
		srv.Close()
		h.Close()
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("worker: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("worker not ready")
	}
	c, err := New(srv.URL, adminToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

func submit(t *testing.T, c *Client, cmd string, mod func(*httpapi.SubmitRequest)) string {
	t.Helper()
	cpu, mem := 0.1, int64(16)
	req := &httpapi.SubmitRequest{Command: &cmd, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}}
	if mod != nil {
		mod(req)
	}
	res, err := c.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("submit %q: %v", cmd, err)
	}
	return res.InstanceID
}

func waitDone(t *testing.T, c *Client, id string) Result {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		r, err := c.Result(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("instance %s did not finish", id)
	return Result{}
}

func TestClientAgainstHead(t *testing.T) {
	c, _ := cluster(t, nil)
	ctx := context.Background()
	ok := submit(t, c, "echo hi", func(r *httpapi.SubmitRequest) {
		n := "greeter"
		r.Name, r.Labels = &n, map[string]string{"app": "demo", "tier": "web"}
	})
	bad := submit(t, c, "exit 4", func(r *httpapi.SubmitRequest) { r.Labels = map[string]string{"app": "demo"} })
	long := submit(t, c, "exec sleep 60", nil)

	if r := waitDone(t, c, ok); r.Status != "COMPLETED" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("ok result %+v", r)
	}
	if r := waitDone(t, c, bad); r.Status != "FAILED" || *r.ExitCode != 4 {
		t.Fatalf("bad result %+v", r)
	}
	if r, err := c.Result(ctx, long); err != nil || r.Done {
		t.Fatalf("running result %+v, %v: want not done (202)", r, err)
	}
	in, err := c.InstanceByName(ctx, "greeter")
	if err != nil || in.InstanceID != ok {
		t.Fatalf("by name: %+v %v", in, err)
	}
	both, err := c.Instances(ctx, ListOptions{Labels: map[string]string{"app": "demo"}})
	if err != nil || len(both) != 2 {
		t.Fatalf("label app=demo: %d, %v", len(both), err)
	}
	one, err := c.Instances(ctx, ListOptions{Labels: map[string]string{"app": "demo", "tier": "web"}})
	if err != nil || len(one) != 1 || one[0].InstanceID != ok {
		t.Fatalf("two labels: %+v, %v", one, err)
	}
	failed, err := c.Instances(ctx, ListOptions{Status: "FAILED"})
	if err != nil || len(failed) != 1 || failed[0].InstanceID != bad {
		t.Fatalf("status FAILED: %+v, %v", failed, err)
	}
	grace := 100 * time.Millisecond
	if st, err := c.Cancel(ctx, long, &grace); err != nil || st != "cancelling" {
		t.Fatalf("cancel: %q %v", st, err)
	}
	if r := waitDone(t, c, long); r.Status != "CANCELLED" {
		t.Fatalf("cancelled result %+v", r)
	}
	_, err = c.Cancel(ctx, long, nil)
	var he *Error
	if !errors.As(err, &he) || he.StatusCode != 400 || !strings.Contains(he.Detail, "terminal state: CANCELLED") {
		t.Fatalf("cancel of a finished instance: %v", err)
	}
	ws, err := c.Workers(ctx)
	if err != nil || len(ws) != 1 || ws[0].WorkerID != "w1" || ws[0].Status != "ONLINE" {
		t.Fatalf("workers: %+v %v", ws, err)
	}
	if err := c.DeleteInstance(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Instance(ctx, bad); !IsNotFound(err) {
		t.Fatalf("deleted instance: %v", err)
	}
	gone, err := c.DeleteInstances(ctx, "COMPLETED")
	if err != nil || len(gone) != 1 || gone[0] != ok {
		t.Fatalf("delete completed: %v %v", gone, err)
	}
	if err := c.DeleteWorker(ctx, "w1"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("deleting an online worker: %v", err)
	}
	anon, err := New(c.BaseURL(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Workers(ctx); statusOf(err) != 401 {
		t.Fatalf("no token: %v, want 401", err)
	}
	if err := anon.Health(ctx); err != nil {
		t.Fatalf("health needs no token: %v", err)
	}
}

func TestNewValidatesURL(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://"} {
		if _, err := New(u, "", nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := New("127.0.0.1:8000", "", nil)
	if err != nil || c.BaseURL() != "http://127.0.0.1:8000" {
		t.Fatalf("PyLet host:port: %v %v", c, err)
	}
}

// TestFollowAcrossRotation: `tide logs -f` on an instance whose log rotates
// many times while it is followed gets every byte once, in order (A14.12).
func TestFollowAcrossRotation(t *testing.T) {
	c, _ := cluster(t, func(cfg *agent.Config) { cfg.LogSegmentBytes, cfg.LogMaxFiles = 4096, 16 })
	var want bytes.Buffer
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "line %04d the quick brown fox jumps over the lazy dog\n", i)
	}
	id := submit(t, c, `i=1; while [ $i -le 3000 ]; do printf 'line %04d the quick brown fox jumps over the lazy dog\n' $i; `+
		`if [ $((i % 100)) -eq 0 ]; then sleep 0.05; fi; i=$((i+1)); done`, nil)
	var got bytes.Buffer
	gaps := 0
	end, err := c.ReadLogs(context.Background(), id, &got, ReadOptions{Follow: true, Poll: 10 * time.Millisecond,
		Chunk: 8192, OnGap: func(from, to int64) { gaps++ }})
	if err != nil {
		t.Fatal(err)
	}
	if gaps != 0 || !bytes.Equal(got.Bytes(), want.Bytes()) || end != int64(want.Len()) {
		t.Fatalf("followed %d bytes with %d gaps, end %d; want the %d bytes written", got.Len(), gaps, end, want.Len())
	}
	// The log did rotate: its start is gone now, and a late reader is told.
	chunk, err := c.Logs(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if chunk.AvailableOffset == 0 || chunk.TotalSize != int64(want.Len()) {
		t.Fatalf("after the run: available %d total %d", chunk.AvailableOffset, chunk.TotalSize)
	}
	var late bytes.Buffer
	var gapFrom, gapTo int64 = -1, -1
	if _, err := c.ReadLogs(context.Background(), id, &late, ReadOptions{OnGap: func(f, to int64) { gapFrom, gapTo = f, to }}); err != nil {
		t.Fatal(err)
	}
	if gapFrom != 0 || gapTo != chunk.AvailableOffset || !bytes.Equal(late.Bytes(), want.Bytes()[gapTo:]) {
		t.Fatalf("late reader: gap [%d,%d), %d bytes", gapFrom, gapTo, late.Len())
	}
	lastLine := "line 3000 the quick brown fox jumps over the lazy dog\n"
	tail := int64(len(lastLine))
	var last bytes.Buffer
	if _, err := c.ReadLogs(context.Background(), id, &last, ReadOptions{Tail: &tail}); err != nil {
		t.Fatal(err)
	}
	if last.String() != lastLine {
		t.Fatalf("tail = %q", last.String())
	}
}
