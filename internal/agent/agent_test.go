package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// testHead is a real head on loopback whose handler can be swapped for
// another head's (a head that lost its database).
type testHead struct {
	t       *testing.T
	h       *head.Head
	srv     *httptest.Server
	handler atomic.Pointer[http.Handler]
	stop    context.CancelFunc
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newTestHead(t *testing.T) *testHead {
	t.Helper()
	th := &testHead{t: t}
	th.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*th.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(th.srv.Close)
	th.replace()
	return th
}

// replace starts a fresh head with an empty database behind the same URL.
func (th *testHead) replace() {
	t := th.t
	if th.stop != nil {
		th.stop()
	}
	h, err := head.New(context.Background(), head.Config{DataDir: t.TempDir(), PollTimeout: 2 * time.Second,
		SuspectAfter: 12 * time.Second, OfflineAfter: 13 * time.Second, SchedulerInterval: 200 * time.Millisecond,
		Logger: testLogger(t).With("side", "head")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.RunLoops(ctx); close(done) }()
	th.stop = func() { cancel(); <-done; h.Close() }
	t.Cleanup(func() {
		if th.h == h {
			th.stop()
		}
	})
	handler := h.Handler()
	th.handler.Store(&handler)
	th.h = h
}

func (th *testHead) submit(req httpapi.SubmitRequest) string {
	th.t.Helper()
	ids, err := th.h.Submit(context.Background(), &req)
	if err != nil {
		th.t.Fatalf("submit: %v", err)
	}
	return ids[0]
}

func cmdReq(cmd string) httpapi.SubmitRequest {
	cpu, mem := 0.1, int64(16)
	return httpapi.SubmitRequest{Command: &cmd, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}}
}

func (th *testHead) instance(id string) *store.Instance {
	th.t.Helper()
	in, err := th.h.Instance(context.Background(), id)
	if err != nil {
		th.t.Fatalf("get %s: %v", id, err)
	}
	return in
}

// eventually polls cond until it holds or the timeout ends.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func (th *testHead) waitStatus(id string, want store.Status, timeout time.Duration) *store.Instance {
	th.t.Helper()
	var in *store.Instance
	eventually(th.t, timeout, fmt.Sprintf("instance %s to be %s", id, want), func() bool {
		in = th.instance(id)
		return in.Status == want
	})
	return in
}

// logs reads an instance's whole retained log through the head's proxy.
func (th *testHead) logs(id string) string {
	th.t.Helper()
	c, err := th.h.Logs(context.Background(), id, 0, 1<<20)
	if err != nil {
		th.t.Fatalf("logs %s: %v", id, err)
	}
	b, err := base64.StdEncoding.DecodeString(c.Content)
	if err != nil {
		th.t.Fatal(err)
	}
	return string(b)
}

// testWorker is an agent running in this process.
type testWorker struct {
	cfg  Config
	stop context.CancelFunc
	done chan error
	info chan Info
}

var portBase atomic.Int32

func workerConfig(t *testing.T, th *testHead, name string) Config {
	// Each worker gets its own port range, so tests do not race for ports.
	base := 21000 + int(portBase.Add(1))*50
	return Config{HeadURL: th.srv.URL, Name: name, DataDir: t.TempDir(), LogAddr: "127.0.0.1:0",
		Resources: capacity.Resources{MilliCPU: 4000, Memory: 4 << 30}, PortMin: base, PortMax: base + 49,
		HeartbeatTimeout: 5 * time.Second, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		AdoptPollInterval: 50 * time.Millisecond, StopOnExit: true, Logger: testLogger(t).With("side", "worker")}
}

func startWorker(t *testing.T, cfg Config) *testWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &testWorker{cfg: cfg, stop: cancel, done: make(chan error, 1), info: make(chan Info, 1)}
	cfg.OnReady = func(i Info) { w.info <- i }
	go func() { w.done <- Run(ctx, cfg) }()
	select {
	case <-w.info:
	case err := <-w.done:
		t.Fatalf("worker exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not become ready")
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { w.shutdown(t) }) })
	return w
}

func (w *testWorker) shutdown(t *testing.T) {
	t.Helper()
	w.stop()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("worker: %v", err)
		}
		w.done <- nil
	case <-time.After(40 * time.Second):
		t.Fatal("worker did not stop")
	}
}

func TestRunsInstanceWithEnvPortAndLogs(t *testing.T) {
	th := newTestHead(t)
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1")
	t.Setenv("TIDE_TOKEN", "admin-secret")
	cfg := workerConfig(t, th, "w1")
	cfg.Resources.GPUs = 2
	startWorker(t, cfg)

	// No GPUs: CUDA_VISIBLE_DEVICES is cleared, not inherited (A4); the
	// worker's secrets are not passed on; stderr is captured.
	plain := th.submit(cmdReq(`echo "port=$PORT cuda=[$CUDA_VISIBLE_DEVICES] token=[$TIDE_TOKEN] user=$GREETING"; echo oops >&2; exit 3`))
	req := cmdReq(`echo "cuda=[$CUDA_VISIBLE_DEVICES] attempt=$TIDE_ATTEMPT"`)
	target := "w1"
	req.TargetWorker, req.GPUIndices = &target, []int{1}
	gpu := th.submit(req)
	in := th.waitStatus(plain, store.StatusFailed, 10*time.Second)
	if in.ExitCode == nil || *in.ExitCode != 3 {
		t.Fatalf("exit code = %v, want 3", in.ExitCode)
	}
	out := th.logs(plain)
	var port int
	if _, err := fmt.Sscanf(out, "port=%d ", &port); err != nil || port < cfg.PortMin || port > cfg.PortMax {
		t.Fatalf("log = %q: PORT not from %d-%d", out, cfg.PortMin, cfg.PortMax)
	}
	if !strings.Contains(out, "cuda=[] token=[]") || !strings.Contains(out, "oops\n") {
		t.Fatalf("log = %q, want cleared CUDA and token, and stderr", out)
	}
	th.waitStatus(gpu, store.StatusCompleted, 10*time.Second)
	if out := th.logs(gpu); out != "cuda=[1] attempt=1\n" {
		t.Fatalf("gpu log = %q", out)
	}
}

func TestEndpointAndUserEnv(t *testing.T) {
	th := newTestHead(t)
	startWorker(t, workerConfig(t, th, "w1"))
	req := cmdReq(`echo "greeting=$GREETING port=$PORT"; exec sleep 30`)
	req.Env = map[string]string{"GREETING": "hi", "PORT": "1"}
	id := th.submit(req)
	in := th.waitStatus(id, store.StatusRunning, 10*time.Second)
	if in.Port == nil || in.Endpoint != fmt.Sprintf("127.0.0.1:%d", *in.Port) {
		t.Fatalf("endpoint %q port %v", in.Endpoint, in.Port)
	}
	eventually(t, 5*time.Second, "output", func() bool { return strings.Contains(th.logs(id), "greeting=hi") })
	if out := th.logs(id); !strings.Contains(out, fmt.Sprintf("port=%d", *in.Port)) {
		t.Fatalf("the user's PORT must be overridden by the worker's: %q", out)
	}
}

func TestCancelRunningGracefullyAndByKill(t *testing.T) {
	th := newTestHead(t)
	startWorker(t, workerConfig(t, th, "w1"))
	polite := th.submit(cmdReq(`echo started; exec sleep 60`))
	// Ignores SIGTERM (the ignore is inherited by sleep): needs SIGKILL.
	stubborn := th.submit(cmdReq(`trap '' TERM; echo started; sleep 60; echo never`))
	for _, id := range []string{polite, stubborn} {
		th.waitStatus(id, store.StatusRunning, 10*time.Second)
		eventually(t, 5*time.Second, "output", func() bool { return strings.Contains(th.logs(id), "started") })
	}
	grace := 300 * time.Millisecond
	t0 := time.Now()
	for _, id := range []string{polite, stubborn} {
		if _, err := th.h.Cancel(context.Background(), id, &grace); err != nil {
			t.Fatal(err)
		}
	}
	in := th.waitStatus(polite, store.StatusCancelled, 5*time.Second)
	if in.ExitCode == nil || *in.ExitCode != 143 {
		t.Fatalf("polite exit = %v, want 143 (SIGTERM)", in.ExitCode)
	}
	th.waitStatus(stubborn, store.StatusCancelled, 5*time.Second)
	if d := time.Since(t0); d < grace {
		t.Fatalf("stubborn process cancelled after %s, before its grace period", d)
	}
	if strings.Contains(th.logs(stubborn), "never") {
		t.Fatal("stubborn process ran on after SIGKILL")
	}
}

// TestAdoptsRunningProcessAcrossRestart: a worker restarted on its data dir
// adopts the process it left running (same pid, keeps reading its output),
// and reports how it ends; nothing is started twice.
func TestAdoptsRunningProcessAcrossRestart(t *testing.T) {
	th := newTestHead(t)
	cfg := workerConfig(t, th, "w1")
	cfg.StopOnExit = false
	w := startWorker(t, cfg)
	gate := filepath.Join(t.TempDir(), "go")
	runs := filepath.Join(t.TempDir(), "runs")
	id := th.submit(cmdReq(fmt.Sprintf(`echo run >> %s; echo before; while [ ! -e %s ]; do sleep 0.02; done; echo after; exit 7`,
		runs, gate)))
	th.waitStatus(id, store.StatusRunning, 10*time.Second)
	eventually(t, 5*time.Second, "first output", func() bool { return th.logs(id) == "before\n" })
	rec := readRecord(t, cfg.DataDir, id, 1)
	w.shutdown(t)
	if !processAlive(rec.PID, rec.StartTicks) {
		t.Fatal("process did not survive the worker's exit")
	}
	cfg.StopOnExit = true
	startWorker(t, cfg)
	if rec2 := readRecord(t, cfg.DataDir, id, 1); rec2.PID != rec.PID {
		t.Fatalf("pid changed from %d to %d: the process was not adopted", rec.PID, rec2.PID)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	in := th.waitStatus(id, store.StatusFailed, 10*time.Second)
	if in.ExitCode == nil || *in.ExitCode != 7 || in.Attempt != 1 {
		t.Fatalf("exit %v attempt %d, want 7 at attempt 1", in.ExitCode, in.Attempt)
	}
	if out := th.logs(id); out != "before\nafter\n" {
		t.Fatalf("log across the restart = %q", out)
	}
	if b, _ := os.ReadFile(runs); string(b) != "run\n" {
		t.Fatalf("the command ran %d times", strings.Count(string(b), "run"))
	}
}

// TestReportsExitThatHappenedWhileDown: a process that ends while its
// worker is down is reported with its real exit code after the restart.
func TestReportsExitThatHappenedWhileDown(t *testing.T) {
	th := newTestHead(t)
	cfg := workerConfig(t, th, "w1")
	cfg.StopOnExit = false
	w := startWorker(t, cfg)
	gate := filepath.Join(t.TempDir(), "go")
	id := th.submit(cmdReq(fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.02; done; exit 5`, gate)))
	th.waitStatus(id, store.StatusRunning, 10*time.Second)
	rec := readRecord(t, cfg.DataDir, id, 1)
	w.shutdown(t)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "process exit", func() bool { return !processAlive(rec.PID, rec.StartTicks) })
	startWorker(t, cfg)
	in := th.waitStatus(id, store.StatusFailed, 10*time.Second)
	if in.ExitCode == nil || *in.ExitCode != 5 {
		t.Fatalf("exit = %v, want 5", in.ExitCode)
	}
	eventually(t, 5*time.Second, "run record removed", func() bool {
		_, err := os.Stat(filepath.Join(cfg.DataDir, "run", id+".1"))
		return errors.Is(err, os.ErrNotExist)
	})
}

// TestPyLetA14_5_ReregistersWhenHeadLosesItsDatabase is the second half of
// A14.5: PyLet's worker is stranded by a head database wipe (its heartbeats
// get 404 and it retries them every 5 s forever, never registering again),
// so nothing more runs on it. Here it registers again under its name and
// the new head's work runs on it.
func TestPyLetA14_5_ReregistersWhenHeadLosesItsDatabase(t *testing.T) {
	th := newTestHead(t)
	startWorker(t, workerConfig(t, th, "w1"))
	first := th.submit(cmdReq("true"))
	th.waitStatus(first, store.StatusCompleted, 10*time.Second)
	th.replace()
	id := th.submit(cmdReq("echo again"))
	th.waitStatus(id, store.StatusCompleted, 15*time.Second)
	if in := th.instance(id); in.AssignedWorker != "w1" {
		t.Fatalf("assigned to %q", in.AssignedWorker)
	}
}

func readRecord(t *testing.T, dataDir, id string, attempt int) runRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "run", fmt.Sprintf("%s.%d", id, attempt), "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r runRecord
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPyLetA14_11_PortPoolBindTests is A14.11: PyLet hands out the lowest
// port of its range not in its own in-process set, without a bind test, so
// an instance gets a port another process already listens on. Here a port
// bound by someone else is skipped, an exhausted range yields nothing (the
// range itself is configurable, --port-range), and released ports return.
func TestPyLetA14_11_PortPoolBindTests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	pp := newPortPool(taken, taken+1, t.TempDir())
	// The first port is bound by another process: PyLet would hand it out
	// (A14.11); tide skips it.
	if p := pp.allocate(); p != taken+1 {
		if p == taken {
			t.Fatalf("allocated port %d that is already bound", p)
		}
		t.Skipf("port %d is taken too", taken+1)
	}
	if p := pp.allocate(); p != 0 {
		t.Fatalf("allocated %d from an exhausted range", p)
	}
	pp.release(taken + 1)
	if p := pp.allocate(); p != taken+1 {
		t.Fatalf("released port not reused: %d", p)
	}
}

func TestIdentityPersistsAndDataDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	a, err := loadIdentity(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.UID == "" || a.Name != a.UID {
		t.Fatalf("fresh identity %+v", a)
	}
	b, err := loadIdentity(dir, "")
	if err != nil || b != a {
		t.Fatalf("restart changed identity: %+v → %+v (%v)", a, b, err)
	}
	c, err := loadIdentity(dir, "gpu-1")
	if err != nil || c.UID != a.UID || c.Name != "gpu-1" {
		t.Fatalf("rename: %+v (%v)", c, err)
	}
	d, err := loadIdentity(dir, "")
	if err != nil || d.Name != "gpu-1" {
		t.Fatalf("name not kept without --name: %+v (%v)", d, err)
	}
	l1, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), "another worker") {
		t.Fatalf("second lock: %v", err)
	}
	l1.Close()
	l2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Close()
}

func TestConfigValidation(t *testing.T) {
	base := Config{HeadURL: "127.0.0.1:8000", DataDir: "/tmp/x", Resources: capacity.Resources{MilliCPU: 1000, Memory: 1 << 30}}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"PyLet host:port is accepted", func(c *Config) {}, ""},
		{"no head", func(c *Config) { c.HeadURL = "" }, "head URL"},
		{"bad scheme", func(c *Config) { c.HeadURL = "ftp://x" }, "scheme"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "data_dir"},
		{"bad name", func(c *Config) { c.Name = "a/b" }, "name"},
		{"bad port range", func(c *Config) { c.PortMin, c.PortMax = 20, 10 }, "port range"},
		{"negative grace", func(c *Config) { c.DefaultGracePeriod = -1 }, "default_grace_period"},
		{"negative resources", func(c *Config) { c.Resources.GPUs = -1 }, "resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			_, err := c.withDefaults()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to name %q", err, tt.wantErr)
			}
		})
	}
	t.Run("detects CPU and memory", func(t *testing.T) {
		c, err := Config{HeadURL: "http://h:1", DataDir: "/tmp/x"}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.Resources.MilliCPU < 1000 || c.Resources.Memory < 1<<20 {
			t.Fatalf("detected %s", c.Resources)
		}
	})
}

func TestLogExposureNeedsToken(t *testing.T) {
	tests := []struct {
		cfg        Config
		advertised string
		want       string
		wantErr    bool
	}{
		{Config{}, "127.0.0.1", "127.0.0.1:15599", false},
		{Config{}, "10.0.0.5", "", true},
		{Config{JoinToken: "t"}, "10.0.0.5", ":15599", false},
		{Config{Insecure: true}, "10.0.0.5", ":15599", false},
		{Config{LogAddr: "127.0.0.1:0"}, "10.0.0.5", "127.0.0.1:0", false},
	}
	for _, tt := range tests {
		got, err := logListenAddr(tt.cfg, tt.advertised)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("logListenAddr(%+v, %s) = %q, %v; want %q (error %v)", tt.cfg, tt.advertised, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestAdvertiseAddr(t *testing.T) {
	tests := []struct{ advertise, head, want string }{
		{"", "http://127.0.0.1:8000", "127.0.0.1"},
		{"", "http://localhost:8000", "127.0.0.1"},
		{"203.0.113.7", "http://127.0.0.1:8000", "203.0.113.7"},
		{"[2001:db8::1]", "http://127.0.0.1:8000", "2001:db8::1"},
		{"node-1.example:9999", "http://127.0.0.1:8000", "node-1.example"},
	}
	for _, tt := range tests {
		got, err := resolveAdvertise(tt.advertise, tt.head)
		if err != nil || got != tt.want {
			t.Errorf("resolveAdvertise(%q, %q) = %q, %v; want %q", tt.advertise, tt.head, got, err, tt.want)
		}
	}
}

// TestLostProcessIsReportedNotFound: a worker that comes back without the
// process the head expects running reports NOT_FOUND rather than starting
// it again (which could run it twice); the head fails it.
func TestLostProcessIsReportedNotFound(t *testing.T) {
	th := newTestHead(t)
	cfg := workerConfig(t, th, "w1")
	cfg.StopOnExit = false
	w := startWorker(t, cfg)
	runs := filepath.Join(t.TempDir(), "runs")
	id := th.submit(cmdReq(fmt.Sprintf(`echo run >> %s; exec sleep 60`, runs)))
	th.waitStatus(id, store.StatusRunning, 10*time.Second)
	rec := readRecord(t, cfg.DataDir, id, 1)
	w.shutdown(t)
	if err := syscall.Kill(-rec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "run")); err != nil {
		t.Fatal(err)
	}
	cfg.StopOnExit = true
	startWorker(t, cfg)
	in := th.waitStatus(id, store.StatusFailed, 10*time.Second)
	if in.FailureReason != store.ReasonLostAfterRejoin {
		t.Fatalf("failure reason %q", in.FailureReason)
	}
	if b, _ := os.ReadFile(runs); string(b) != "run\n" {
		t.Fatalf("the command ran %d times", strings.Count(string(b), "run"))
	}
}

// TestRecoverFindsProcessStartedBeforeCrash: the worker records "starting"
// before it starts a process; if it crashed before recording the pid, the
// restart finds the process by the marker in its environment.
func TestRecoverFindsProcessStartedBeforeCrash(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir, AdoptPollInterval: time.Second}, log: slog.New(slog.DiscardHandler),
		id: identity{UID: "uid-1", Name: "w"}, boot: machineBootID(), logs: newLogSet(filepath.Join(dir, "logs"), 1<<20, 2),
		ports: newPortPool(1, 1, ""), procs: map[key]*proc{}, quit: make(chan struct{})}
	defer a.abandon()
	k := key{"inst", 3}
	if err := os.MkdirAll(a.runDir(k), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(a.runDir(k), "out.fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.writeRecord(k, &runRecord{InstanceID: k.ID, Attempt: k.Attempt, Phase: recordStarting, Boot: a.boot}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), runMarkerVar+"="+a.runMarker(k))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// A record of a start that never happened is dropped.
	never := key{"never", 1}
	os.MkdirAll(a.runDir(never), 0o700)
	if err := a.writeRecord(never, &runRecord{InstanceID: never.ID, Attempt: 1, Phase: recordStarting, Boot: a.boot}); err != nil {
		t.Fatal(err)
	}
	if err := a.recover(); err != nil {
		t.Fatal(err)
	}
	p := a.procs[k]
	if p == nil || !p.adopted || p.rec.PID != cmd.Process.Pid || p.phase != phaseRunning {
		t.Fatalf("recovered %+v, want adopted pid %d", p, cmd.Process.Pid)
	}
	if _, ok := a.procs[never]; ok {
		t.Fatal("a start that never happened was kept")
	}
	if _, err := os.Stat(a.runDir(never)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run dir of a start that never happened: %v", err)
	}
}

// TestPollHeldPastHeartbeatTimeoutIsNotAFailure: when the head holds a poll
// longer than the worker's heartbeat timeout, the worker polls again at
// once instead of backing off, so changes still reach it promptly.
func TestPollHeldPastHeartbeatTimeoutIsNotAFailure(t *testing.T) {
	th := newTestHead(t) // holds polls for 2s
	cfg := workerConfig(t, th, "w1")
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.RetryMin, cfg.RetryMax = 5*time.Second, 5*time.Second
	startWorker(t, cfg)
	idle := time.NewTimer(time.Second) // several polls time out meanwhile
	<-idle.C
	t0 := time.Now()
	id := th.submit(cmdReq("true"))
	th.waitStatus(id, store.StatusCompleted, 10*time.Second)
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("instance took %s: the worker backed off after a held poll timed out", d)
	}
}

// TestNameTakenOverStopsTheOldWorker: a second worker registering under the
// same name takes it over; the first one stops its processes and exits
// rather than running the other's desired set too.
func TestNameTakenOverStopsTheOldWorker(t *testing.T) {
	th := newTestHead(t)
	cfgA := workerConfig(t, th, "dup")
	cfgA.StopOnExit = false // the takeover must stop them anyway
	a := startWorker(t, cfgA)
	id := th.submit(cmdReq("exec sleep 60"))
	th.waitStatus(id, store.StatusRunning, 10*time.Second)
	rec := readRecord(t, cfgA.DataDir, id, 1)
	cfgB := workerConfig(t, th, "dup")
	startWorker(t, cfgB)
	select {
	case err := <-a.done:
		a.done <- nil
		if err == nil || !strings.Contains(err.Error(), "another worker") {
			t.Fatalf("first worker ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first worker kept running under a name taken over")
	}
	if processAlive(rec.PID, rec.StartTicks) {
		t.Fatal("the first worker left its process running")
	}
	in := th.waitStatus(id, store.StatusFailed, 10*time.Second)
	if in.FailureReason != store.ReasonLostAfterRejoin {
		t.Fatalf("failure reason %q", in.FailureReason)
	}
}
