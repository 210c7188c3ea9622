package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// TestPyLetA14_5_RegistrationRetriesUntilTheHeadAccepts is the first half
// of A14.5: PyLet's worker exits when its registration fails (head not up
// yet, a proxy error), so it never joins. Here the head drops the first
// registration's connection and refuses the next two with 503; the worker
// keeps trying with backoff, joins, and runs work (Run returning early
// would fail startWorker). The second half, a head that loses its database,
// is TestPyLetA14_5_ReregistersWhenHeadLosesItsDatabase.
func TestPyLetA14_5_RegistrationRetriesUntilTheHeadAccepts(t *testing.T) {
	th := newTestHead(t)
	real := *th.handler.Load()
	var attempts atomic.Int32
	var flaky http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/workers" {
			switch attempts.Add(1) {
			case 1:
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					c.Close() // the head is not reachable
				}
				return
			case 2, 3:
				http.Error(w, `{"detail":"head starting"}`, http.StatusServiceUnavailable)
				return
			}
		}
		real.ServeHTTP(w, r)
	})
	th.handler.Store(&flaky)
	startWorker(t, workerConfig(t, th, "w1"))
	if n := attempts.Load(); n != 4 {
		t.Fatalf("registration attempts = %d, want 4 (three failures, then success)", n)
	}
	id := th.submit(cmdReq("true"))
	if in := th.waitStatus(id, store.StatusCompleted, 10*time.Second); in.AssignedWorker != "w1" {
		t.Fatalf("ran on %q", in.AssignedWorker)
	}
}

// TestPyLetA14_10_EndpointsUseTheAdvertisedAddress is A14.10. PyLet's worker
// advertises gethostbyname(gethostname()), which on common distributions is
// 127.0.1.1 (on this machine the hostname resolves to loopback too), so its
// endpoints point at the head's own host; it has no --advertise-addr.
// Here, without the flag, the worker advertises the local address of its
// route to the head (never loopback for a remote head); with it, the
// instance's endpoint and the head's log proxy use the given address.
func TestPyLetA14_10_EndpointsUseTheAdvertisedAddress(t *testing.T) {
	t.Run("detected from the route to the head", func(t *testing.T) {
		if hn, err := os.Hostname(); err == nil {
			addrs, _ := net.LookupHost(hn)
			t.Logf("PyLet would advertise gethostbyname(%q) = %v", hn, addrs)
		}
		ifAddrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		tested := 0
		for _, a := range ifAddrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			headURL := "http://" + net.JoinHostPort(ipn.IP.String(), "8000")
			got, err := resolveAdvertise("", headURL)
			if err != nil {
				t.Fatalf("resolveAdvertise(%s): %v", headURL, err)
			}
			if got != ipn.IP.String() {
				t.Errorf("head at %s: advertised %s, want %s", headURL, got, ipn.IP)
			}
			tested++
		}
		if tested == 0 {
			t.Skip("no non-loopback address on this machine")
		}
	})
	t.Run("--advertise-addr", func(t *testing.T) {
		const adv = "127.0.0.2" // another loopback address: routable here, not the head's
		ln, err := net.Listen("tcp", adv+":0")
		if err != nil {
			t.Skipf("cannot bind %s: %v", adv, err)
		}
		ln.Close()
		th := newTestHead(t)
		cfg := workerConfig(t, th, "w1")
		cfg.AdvertiseAddr, cfg.LogAddr = adv, adv+":0"
		startWorker(t, cfg)
		id := th.submit(cmdReq(`echo hello; exec sleep 30`))
		in := th.waitStatus(id, store.StatusRunning, 10*time.Second)
		if in.Port == nil || in.Endpoint != net.JoinHostPort(adv, strconv.Itoa(*in.Port)) {
			t.Fatalf("endpoint %q port %v, want %s:<port>", in.Endpoint, in.Port, adv)
		}
		if w, err := th.h.Store().GetWorker(context.Background(), "w1"); err != nil || w.Host != adv {
			t.Fatalf("registered host %v (%v), want %s", w, err, adv)
		}
		// The head reaches the worker's log server at the advertised address.
		eventually(t, 5*time.Second, "logs through the head", func() bool { return th.logs(id) == "hello\n" })
		zero := time.Duration(0)
		if _, err := th.h.Cancel(context.Background(), id, &zero); err != nil {
			t.Fatal(err)
		}
		th.waitStatus(id, store.StatusCancelled, 5*time.Second)
	})
}

// TestPyLetA14_12_AuthOnHeadAndLogServer is the auth half of A14.12. PyLet
// has no auth: anyone can use the API, register a worker (and get a token
// for its name), and read any instance's log from port 15599. Here, with an
// admin and a join token, the API, registration, a forged heartbeat and the
// worker's log server are refused without the right token, while the real
// worker joins, runs work, and the head's log proxy reads its log.
// (Offsets that survive rotation: TestPyLetA14_12_FollowAcrossRotationGetsEveryByteOnce.)
func TestPyLetA14_12_AuthOnHeadAndLogServer(t *testing.T) {
	h, err := head.New(context.Background(), head.Config{DataDir: t.TempDir(), Token: "admin", JoinToken: "join",
		PollTimeout: 2 * time.Second, SuspectAfter: 12 * time.Second, OfflineAfter: 13 * time.Second,
		SchedulerInterval: 200 * time.Millisecond, Logger: testLogger(t).With("side", "head")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	loops := make(chan struct{})
	go func() { h.RunLoops(ctx); close(loops) }()
	// Cleanups run last-in first-out: the worker (registered below) stops
	// before the head.
	t.Cleanup(func() { cancel(); <-loops; srv.Close(); h.Close() })

	call := func(method, url, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	reg := `{"worker_id":"w1","host":"127.0.0.1","resources":{"cpu_cores":1}}`
	for _, tok := range []string{"", "wrong"} {
		if code, _ := call("POST", srv.URL+"/workers", tok, reg); code != 401 {
			t.Fatalf("registration with token %q: %d, want 401", tok, code)
		}
		if code, _ := call("GET", srv.URL+"/instances", tok, ""); code != 401 {
			t.Fatalf("GET /instances with token %q: %d, want 401", tok, code)
		}
	}

	cfg := Config{HeadURL: srv.URL, Name: "w1", JoinToken: "join", DataDir: t.TempDir(), LogAddr: "127.0.0.1:0",
		PortMin: 21000 + int(portBase.Add(1))*50, HeartbeatTimeout: 5 * time.Second, RetryMin: 20 * time.Millisecond,
		RetryMax: 200 * time.Millisecond, StopOnExit: true, Logger: testLogger(t).With("side", "worker")}
	cfg.PortMax = cfg.PortMin + 49
	cfg.Resources.MilliCPU, cfg.Resources.Memory = 2000, 2<<30
	startWorker(t, cfg)
	cmd, cpu, mem := "echo secret output", 0.1, int64(16)
	ids, err := h.Submit(context.Background(), &httpapi.SubmitRequest{Command: &cmd,
		ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}})
	if err != nil {
		t.Fatal(err)
	}
	id := ids[0]
	eventually(t, 10*time.Second, "instance to complete", func() bool {
		in, err := h.Instance(context.Background(), id)
		return err == nil && in.Status == store.StatusCompleted
	})

	// A forged heartbeat cannot speak for w1.
	hb := `{"worker_token":"guess","boot_id":"b","last_seen_gen":0,"instances":[]}`
	if code, _ := call("POST", srv.URL+"/workers/w1/heartbeat", "", hb); code != 401 {
		t.Fatalf("forged heartbeat: %d, want 401", code)
	}
	// The worker's log server wants the join token.
	w, err := h.Store().GetWorker(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	logURL := fmt.Sprintf("http://%s/logs/%s", net.JoinHostPort(w.Host, strconv.Itoa(w.LogPort)), id)
	for _, tok := range []string{"", "wrong", "admin"} {
		if code, _ := call("GET", logURL, tok, ""); code != 401 {
			t.Fatalf("worker log server with token %q: %d, want 401", tok, code)
		}
	}
	wantLog := func(code int, body string) {
		t.Helper()
		var c httpapi.LogChunk
		if code != 200 || json.Unmarshal([]byte(body), &c) != nil {
			t.Fatalf("log read: %d %s", code, body)
		}
		if got, _ := base64.StdEncoding.DecodeString(c.Content); string(got) != "secret output\n" {
			t.Fatalf("log content %q", got)
		}
	}
	wantLog(call("GET", logURL, "join", ""))
	// Through the head: the admin token for the caller, the join token to the worker.
	if code, _ := call("GET", srv.URL+"/instances/"+id+"/logs", "", ""); code != 401 {
		t.Fatalf("head log proxy without token: %d, want 401", code)
	}
	wantLog(call("GET", srv.URL+"/instances/"+id+"/logs", "admin", ""))
}
