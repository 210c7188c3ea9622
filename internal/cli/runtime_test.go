package cli

import (
	"context"
	"encoding/json"
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

// runtimeCluster starts a head (admin token "tok") on loopback and one
// in-process worker "w1"; it returns the head URL.
func runtimeCluster(t *testing.T) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := head.New(context.Background(), head.Config{DataDir: t.TempDir(), Token: "tok", PollTimeout: 2 * time.Second,
		SuspectAfter: 12 * time.Second, OfflineAfter: 13 * time.Second, SchedulerInterval: 200 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	loops := make(chan struct{})
	go func() { h.RunLoops(ctx); close(loops) }()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{HeadURL: srv.URL, Name: "w1", JoinToken: "tok", DataDir: t.TempDir(),
			LogAddr: "127.0.0.1:0", Resources: capacity.Resources{MilliCPU: 2000, Memory: 2 << 30}, PortMin: 23600,
			PortMax: 23650, HeartbeatTimeout: 5 * time.Second, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
			StopOnExit: true, Logger: logger, OnReady: func(agent.Info) { close(ready) }})
	}()
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
	return srv.URL
}

// TestInstanceCommandsEndToEnd drives the client commands against a real
// head and worker: submit, ls (status and several labels), get, logs,
// result, cancel, delete, workers; and their exit codes.
func TestInstanceCommandsEndToEnd(t *testing.T) {
	url := runtimeCluster(t)
	t.Setenv("TIDE_HEAD", url)
	t.Setenv("TIDE_TOKEN", "tok")
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(args...)
		if code != 0 {
			t.Fatalf("tide %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	id := strings.TrimSpace(must("submit", "--name", "hello", "--label", "app=demo", "--label", "tier=web",
		"--", "echo", "hello", "world"))
	other := strings.TrimSpace(must("submit", "--label", "app=demo", "--", "exit", "3"))
	long := strings.TrimSpace(must("submit", "--", "exec", "sleep", "60"))
	if out := must("result", id, "--wait", "--poll", "20ms"); !strings.Contains(out, "COMPLETED exit_code=0") {
		t.Fatalf("result: %q", out)
	}
	if out := must("result", "--name", "hello", "-o", "json"); !strings.Contains(out, `"status": "COMPLETED"`) {
		t.Fatalf("result json: %q", out)
	}
	if out := must("logs", id); out != "hello world\n" {
		t.Fatalf("logs: %q", out)
	}
	if out := must("logs", "--name", "hello", "--tail", "6"); out != "world\n" {
		t.Fatalf("logs --tail: %q", out)
	}
	if code, out, _ := runCLI("result", other, "--wait", "--poll", "20ms"); code != ExitError || !strings.Contains(out, "FAILED exit_code=3") {
		t.Fatalf("result of a failed instance: exit %d, %q", code, out)
	}
	if out := must("ls", "-q", "--label", "app=demo", "--label", "tier=web"); out != id+"\n" {
		t.Fatalf("ls with two labels: %q", out)
	}
	var listed []httpapi.InstanceJSON
	if err := json.Unmarshal([]byte(must("ls", "--label", "app=demo", "-o", "json")), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("ls json: %v %d", err, len(listed))
	}
	if out := must("ls", "--status", "failed", "-q"); out != other+"\n" {
		t.Fatalf("ls --status: %q", out)
	}
	if out := must("ls", "--wide"); !strings.Contains(out, "app=demo,tier=web") || !strings.Contains(out, "STATUS") {
		t.Fatalf("ls table: %q", out)
	}
	if out := must("get", id); !strings.Contains(out, "status:") || !strings.Contains(out, "echo hello world") {
		t.Fatalf("get: %q", out)
	}
	if out := must("workers"); !strings.Contains(out, "w1") || !strings.Contains(out, "ONLINE") {
		t.Fatalf("workers: %q", out)
	}
	if out := must("cancel", long, "--grace-period", "100ms"); out != "cancelling "+long+"\n" {
		t.Fatalf("cancel: %q", out)
	}
	if out := must("logs", "-f", "--poll", "20ms", long); out != "" {
		t.Fatalf("logs -f of a cancelled sleep: %q", out)
	}
	if code, out, _ := runCLI("result", long, "--wait", "--poll", "20ms"); code != ExitError || !strings.Contains(out, "CANCELLED") {
		t.Fatalf("result after cancel: exit %d, %q", code, out)
	}
	if out := must("delete", id); out != "deleted "+id+"\n" {
		t.Fatalf("delete: %q", out)
	}
	if out := must("delete", "--all", "--status", "failed", "-y"); out != "deleted 1 instance\n" {
		t.Fatalf("delete --all: %q", out)
	}

	errCases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", id}, ExitUsage, "no instance with id or name"},
		{[]string{"cancel", long}, ExitUsage, "terminal state"},
		{[]string{"get"}, ExitUsage, "give an instance id or --name"},
		{[]string{"ls", "--status", "sleeping"}, ExitUsage, "Invalid status"},
		{[]string{"workers", "delete", "w1"}, ExitUsage, "not OFFLINE"},
		{[]string{"ls", "--token", "wrong"}, ExitError, "401"},
		{[]string{"ls", "--head", "http://127.0.0.1:1"}, ExitUnreachable, "tide up"},
		{[]string{"delete", "--all"}, ExitUsage, "not confirmed"},
	}
	for _, c := range errCases {
		code, _, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("tide %s: exit %d, stderr %q; want exit %d mentioning %q", strings.Join(c.args, " "), code, errs, c.code, c.want)
		}
	}
}

func TestHeadAndWorkerFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"head", "--addr", "0.0.0.0", "--port", "0", "--data-dir", t.TempDir()}, "requires a token"},
		{[]string{"head", "--port", "70000"}, "--port"},
		{[]string{"head", "--poll-timeout", "30s", "--suspect-after", "30s", "--data-dir", t.TempDir()}, "suspect_after"},
		{[]string{"head", "--log-level", "loud"}, "--log-level"},
		{[]string{"worker", "--cpu", "lots"}, "--cpu"},
		{[]string{"worker", "--memory", "4Gb"}, "--memory"},
		{[]string{"worker", "--port-range", "100"}, "--port-range"},
		{[]string{"worker", "--gpus", "-1"}, "--gpus"},
		{[]string{"worker", "--label", "x"}, "--label"},
		{[]string{"worker", "--name", "a/b", "--data-dir", t.TempDir()}, "name"},
		{[]string{"worker", "--advertise-addr", "10.9.9.9", "--data-dir", t.TempDir(), "--cpu", "1", "--memory", "1Gi"}, "join token"},
	}
	for _, tt := range tests {
		code, _, errs := runCLI(tt.args...)
		if code != ExitUsage || !strings.Contains(errs, tt.want) {
			t.Errorf("tide %s: exit %d, stderr %q; want exit 2 mentioning %q", strings.Join(tt.args, " "), code, errs, tt.want)
		}
	}
}
