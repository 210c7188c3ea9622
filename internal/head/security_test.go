package head

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/store"
)

// secEnv is a head served by Head.Serve (the real http.Server settings) on
// a loopback listener, with one registered worker holding one assigned
// instance, and every kind of credential an attacker might replay.
type secEnv struct {
	h        *Head
	url      string
	client   *http.Client
	inst     string // assigned to w1
	workerTk string // w1's worker token
	otherTk  string // w2's worker token
	machine  string // a machine credential minted for pool "p", machine "m1"
	// dial opens a raw connection for HTTP/1.1 slowloris: TCP, or TLS
	// (offering only http/1.1) when the head serves TLS.
	dial func() (net.Conn, error)
	addr string      // host:port
	tls  *tls.Config // the client's TLS config when the head serves TLS
}

// withTLS makes the head serve HTTPS with a --tls auto certificate (as
// `tide head --tls auto` and `tide up --tls auto` do).
func withTLS(c *Config) { c.TLSAuto, c.Addr = true, "127.0.0.1:0" }

const (
	secAdmin = "admin-token-0123456789"
	secJoin  = "join-token-0123456789"
)

func newSecEnv(t *testing.T, bodyTimeout time.Duration, mods ...func(*Config)) *secEnv {
	t.Helper()
	cfg := Config{DataDir: t.TempDir(), Clock: clock.NewFake(start), ReserveAfter: -1,
		Token: secAdmin, JoinToken: secJoin, BodyTimeout: bodyTimeout, Registry: prometheus.NewRegistry()}
	for _, m := range mods {
		m(&cfg)
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	tr := &http.Transport{}
	addr := ln.Addr().String()
	e := &secEnv{h: h, url: "http://" + addr, addr: addr, client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		dial: func() (net.Conn, error) { return net.Dial("tcp", addr) }}
	if h.cfg.TLSCertFile != "" {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(h.cfg.CACertPEM) {
			t.Fatal("tls auto: no CA certificate")
		}
		e.tls = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
		tr.TLSClientConfig, tr.ForceAttemptHTTP2 = e.tls.Clone(), true // the client speaks HTTP/2, as Go's does
		e.url = "https://" + addr
		h1 := e.tls.Clone()
		h1.NextProtos = []string{"http/1.1"}
		e.dial = func() (net.Conn, error) { return tls.Dial("tcp", addr, h1) }
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		tr.CloseIdleConnections()
		h.Close()
	})
	e.workerTk = e.register(t, "w1")
	e.otherTk = e.register(t, "w2")
	var sub struct {
		InstanceID string `json:"instance_id"`
	}
	if code := e.send(t, "POST", "/instances", secAdmin, `{"command":"sleep 100","name":"victim","gpu":1}`, &sub); code != 200 {
		t.Fatalf("submit: %d", code)
	}
	e.inst = sub.InstanceID
	if _, err := h.ScheduleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	blob, err := h.MintBootstrap(context.Background(), "p", "m1", e.url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := provider.ParseBootstrap(blob)
	if err != nil {
		t.Fatal(err)
	}
	e.machine = b.Token
	return e
}

func (e *secEnv) register(t *testing.T, id string) string {
	t.Helper()
	var out httpapi.RegisterResponse
	body := fmt.Sprintf(`{"worker_id":%q,"host":"10.0.0.1","resources":{"cpu_cores":8,"gpu_units":1,"memory_mb":1024},"boot_id":"b"}`, id)
	if code := e.send(t, "POST", "/workers", secJoin, body, &out); code != 200 {
		t.Fatalf("register %s: %d", id, code)
	}
	return out.WorkerToken
}

func (e *secEnv) send(t *testing.T, method, path, token, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

// state is everything a refused request must leave alone: instances
// (status, attempt, worker), workers (status, cordon, token), events and
// the machine credentials.
func (e *secEnv) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ins, err := e.h.st.ListInstances(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := e.h.st.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := e.h.st.ListEvents(ctx, store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var creds []store.Credential
	for _, m := range []string{"m1", "m9", "w1", "w3"} {
		c, err := e.h.st.Credentials(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		creds = append(creds, c...)
	}
	raw, err := json.Marshal([]any{ins, ws, evs, creds})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// waitGoroutines waits (bounded) until the goroutine count is back to
// base (plus slack for the runtime's own), and fails with a dump if not.
func waitGoroutines(t *testing.T, base int, client *http.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if tr, ok := client.Transport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d after the attacks, %d before:\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond) // polling a count, not timing correctness
	}
}

// TestSecurityUnauthenticatedMutations tries every mutating route (and the
// admin reads) without a token, with a wrong one, with the join token,
// with a worker token and with a machine credential; registration and the
// heartbeat with the wrong credentials. Each must answer 401 or 403, the
// store must be unchanged, and no goroutine may be left behind.
func TestSecurityUnauthenticatedMutations(t *testing.T) { testUnauthenticatedMutations(t) }

func testUnauthenticatedMutations(t *testing.T, mods ...func(*Config)) {
	e := newSecEnv(t, 0, mods...)
	before := e.state(t)
	base := runtime.NumGoroutine()
	hb := func(tok string) string {
		return fmt.Sprintf(`{"worker_token":%q,"boot_id":"b","last_seen_gen":0,"instances":[{"instance_id":%q,"attempt":1,"status":"COMPLETED","exit_code":0}]}`, tok, e.inst)
	}
	adminRoutes := []struct{ method, path, body string }{
		{"POST", "/instances", `{"command":"echo pwned"}`},
		{"DELETE", "/instances?status=ASSIGNED", ""},
		{"DELETE", "/instances?status=COMPLETED", ""},
		{"POST", "/instances/" + e.inst + "/cancel", ""},
		{"DELETE", "/instances/" + e.inst, ""},
		{"DELETE", "/instances/by-name/victim", ""},
		{"DELETE", "/workers?status=OFFLINE", ""},
		{"DELETE", "/workers/w1", ""},
		{"POST", "/workers/w1/cordon", ""},
		{"POST", "/workers/w2/uncordon", ""},
		{"POST", "/bootstrap", `{"pool":"p","machine":"m9"}`},
		{"GET", "/instances", ""},
		{"GET", "/instances/" + e.inst + "/logs", ""},
		{"GET", "/instances/" + e.inst, ""},
		{"GET", "/instances/" + e.inst + "/result", ""},
		{"GET", "/instances/" + e.inst + "/endpoint", ""},
		{"GET", "/instances/by-name/victim", ""},
		{"GET", "/instances/by-name/victim/endpoint", ""},
		{"GET", "/workers/w1", ""},
		{"GET", "/metrics", ""},
		{"GET", "/workers", ""},
		{"GET", "/events", ""},
		{"GET", "/watch?since=0", ""},
		{"GET", "/history", ""},
		{"GET", "/pools", ""},
		{"GET", "/nodes", ""},
		{"GET", "/pressure", ""},
	}
	creds := map[string]string{"none": "", "wrong": "not-the-token", "join": secJoin,
		"worker": e.workerTk, "machine": e.machine, "admin-prefix": secAdmin[:len(secAdmin)-1]}
	tried := 0
	for name, tok := range creds {
		for _, r := range adminRoutes {
			code := e.send(t, r.method, r.path, tok, r.body, nil)
			tried++
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("%s %s with %s credential: %d, want 401/403", r.method, r.path, name, code)
			}
		}
	}
	// Registration: without the join token, or with a machine credential
	// for another worker name or pool, or with a worker token.
	regs := []struct{ name, tok, body string }{
		{"none", "", `{"worker_id":"w3","host":"h","resources":{"cpu_cores":1},"boot_id":"b"}`},
		{"wrong", "nope", `{"worker_id":"w3","host":"h","resources":{"cpu_cores":1},"boot_id":"b"}`},
		{"worker", e.workerTk, `{"worker_id":"w3","host":"h","resources":{"cpu_cores":1},"boot_id":"b"}`},
		{"machine-other-name", e.machine, `{"worker_id":"w3","host":"h","resources":{"cpu_cores":1},"boot_id":"b","labels":{"tide.pool":"p"}}`},
		{"machine-other-pool", e.machine, `{"worker_id":"m1","host":"h","resources":{"cpu_cores":1},"boot_id":"b","labels":{"tide.pool":"q"}}`},
		{"hijack-w1", "", `{"worker_id":"w1","host":"h","resources":{"cpu_cores":1},"boot_id":"b"}`},
	}
	for _, r := range regs {
		tried++
		if code := e.send(t, "POST", "/workers", r.tok, r.body, nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("register with %s: %d, want 401/403", r.name, code)
		}
	}
	// Heartbeats reporting w1's instance COMPLETED with the wrong worker
	// token, another worker's token, the admin and join tokens.
	for name, tok := range map[string]string{"wrong": "nope", "w2's": e.otherTk, "admin": secAdmin, "join": secJoin, "machine": e.machine} {
		tried++
		if code := e.send(t, "POST", "/workers/w1/heartbeat", secAdmin, hb(tok), nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("heartbeat with %s token: %d, want 401/403", name, code)
		}
	}
	if after := e.state(t); after != before {
		t.Errorf("%d refused requests changed the store:\nbefore %s\nafter  %s", tried, before, after)
	}
	waitGoroutines(t, base, e.client)
	t.Logf("%d unauthenticated requests refused, store unchanged", tried)
}

// TestSecurityOversizedBodies sends bodies one byte over the limit to every
// route that reads one, with valid credentials: 413, nothing stored.
func TestSecurityOversizedBodies(t *testing.T) { testOversizedBodies(t) }

func testOversizedBodies(t *testing.T, mods ...func(*Config)) {
	e := newSecEnv(t, 0, mods...)
	before := e.state(t)
	base := runtime.NumGoroutine()
	big := func(prefix string) string {
		return prefix + strings.Repeat("a", 4<<20) + `"}`
	}
	cases := []struct{ method, path, tok, body string }{
		{"POST", "/instances", secAdmin, big(`{"command":"`)},
		{"POST", "/workers", secJoin, big(`{"worker_id":"w3","host":"`)},
		{"POST", "/workers/w1/heartbeat", "", big(fmt.Sprintf(`{"worker_token":%q,"boot_id":"`, e.workerTk))},
		{"POST", "/instances/" + e.inst + "/cancel", secAdmin, big(`{"x":"`)},
		{"POST", "/workers/w1/cordon", secAdmin, big(`{"x":"`)},
		{"POST", "/bootstrap", secAdmin, big(`{"pool":"p","machine":"m9","head_url":"`)},
	}
	for _, c := range cases {
		code := e.send(t, c.method, c.path, c.tok, c.body, nil)
		// /bootstrap reads at most 64 KiB itself and fails to decode the
		// truncated JSON (422) before the 4 MiB limit is reached.
		if code != http.StatusRequestEntityTooLarge && !(c.path == "/bootstrap" && code == http.StatusUnprocessableEntity) &&
			!(code == 200 && (strings.HasSuffix(c.path, "/cancel") || strings.HasSuffix(c.path, "/cordon"))) {
			t.Errorf("%s %s with a %d-byte body: %d, want 413", c.method, c.path, len(c.body), code)
		}
	}
	// cancel and cordon ignore their body; they must not have been refused
	// for it, but their effect is expected, so compare before them.
	_ = before
	waitGoroutines(t, base, e.client)
}

// slowBody opens a raw connection, sends the headers of a request whose
// body it then trickles one byte every interval, and returns how long the
// server took to close the connection or answer, and the status line.
func slowBody(t *testing.T, dial func() (net.Conn, error), method, path, token string, length int, interval time.Duration) (time.Duration, string) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, length)
	if token != "" {
		hdr += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, hdr+"\r\n{"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for i := 1; i < length; i++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) && !notTimeout(err) {
		t.Fatalf("%s %s: the server held a trickled body for 30s: %v", method, path, err)
	}
	return time.Since(began), strings.TrimSpace(status)
}

// notTimeout reports whether err is anything but the client's own read
// timeout (a reset or a close by the server).
func notTimeout(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// TestSecuritySlowBodies trickles bodies byte by byte (slowloris) past the
// head's body timeout, authenticated and not: each connection is answered
// or closed within the timeout (plus slack), nothing is stored, and the
// goroutine count comes back to its baseline.
func TestSecuritySlowBodies(t *testing.T) { testSlowBodies(t) }

func testSlowBodies(t *testing.T, mods ...func(*Config)) {
	const timeout = 400 * time.Millisecond
	e := newSecEnv(t, timeout, mods...)
	before := e.state(t)
	base := runtime.NumGoroutine()
	cases := []struct{ method, path, tok string }{
		{"POST", "/instances", secAdmin},
		{"POST", "/instances", ""},
		{"POST", "/workers", secJoin},
		{"POST", "/workers/w1/heartbeat", ""},
		{"POST", "/bootstrap", secAdmin},
		{"DELETE", "/workers/w1", ""},
		{"GET", "/ui/", ""}, // the dashboard's files, mounted beside the API
	}
	for _, c := range cases {
		took, status := slowBody(t, e.dial, c.method, c.path, c.tok, 10000, 50*time.Millisecond)
		t.Logf("%s %s (token %v): %q after %v", c.method, c.path, c.tok != "", status, took.Round(time.Millisecond))
		if strings.Contains(status, " 200 ") && c.path != "/ui/" { // /ui/ serves public static files
			t.Errorf("%s %s: a trickled body was accepted: %q", c.method, c.path, status)
		}
		if c.tok != "" && c.path != "/bootstrap" && !strings.Contains(status, " 408 ") {
			t.Errorf("%s %s: %q, want 408 for a body that outlived the timeout", c.method, c.path, status)
		}
		if took > 10*timeout+5*time.Second {
			t.Errorf("%s %s: held %v, body timeout %v", c.method, c.path, took, timeout)
		}
	}
	if after := e.state(t); after != before {
		t.Errorf("slow bodies changed the store")
	}
	waitGoroutines(t, base, e.client)
}

// TestSecurityLongPollSurvivesBodyTimeout: the body deadline is lifted once
// the body is read, so a heartbeat long-poll outlives it.
func TestSecurityLongPollSurvivesBodyTimeout(t *testing.T) {
	e := newSecEnv(t, 200*time.Millisecond)
	body := fmt.Sprintf(`{"worker_token":%q,"boot_id":"b","last_seen_gen":0,"instances":[]}`, e.workerTk)
	var out httpapi.HeartbeatResponse
	if code := e.send(t, "POST", "/workers/w1/heartbeat", "", body, &out); code != 200 {
		t.Fatalf("heartbeat: %d", code)
	}
	// The answer's generation makes the next heartbeat hold; the fake
	// clock never fires the poll timeout, so a second request with the
	// same generation would wait for ever: cancel it from the client after
	// 3 body timeouts and check the server had not cut it.
	body = fmt.Sprintf(`{"worker_token":%q,"boot_id":"b","last_seen_gen":%d,"instances":[]}`, e.workerTk, out.Gen)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", e.url+"/workers/w1/heartbeat", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the long-poll ended early: %d", resp.StatusCode)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the long-poll failed: %v", err)
	}
}
