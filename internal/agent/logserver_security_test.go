package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestLogServerRefusesAndCutsSlowClients: the worker's log server (as
// newLogServer builds it) answers 401 without the token, with a wrong one
// and with the admin-looking "Basic" form, and cuts a client that trickles
// its headers or a body byte by byte once logServerTimeout passes; the
// goroutine count returns to its baseline.
func TestLogServerRefusesAndCutsSlowClients(t *testing.T) {
	old := logServerTimeout
	logServerTimeout = 300 * time.Millisecond
	t.Cleanup(func() { logServerTimeout = old })
	logs := newLogSet(t.TempDir(), 1<<20, 2)
	srv := newLogServer(logHandler(logs, []string{"s3cret"}, slog.New(slog.DiscardHandler)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	base := runtime.NumGoroutine()
	tr := &http.Transport{}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cre", "Basic OnMzY3JldA=="} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/logs/abc", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}
	tr.CloseIdleConnections()
	trickle := func(name, head string) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		began := time.Now()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for i := 0; i < 1000; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		status, err := bufio.NewReader(c).ReadString('\n')
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the log server held a trickling client for 20s", name)
		}
		if strings.Contains(status, " 200 ") {
			t.Errorf("%s: %q", name, status)
		}
		t.Logf("%s: %q after %v", name, strings.TrimSpace(status), time.Since(began).Round(time.Millisecond))
	}
	trickle("slow headers", "GET /logs/abc HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	trickle("slow body", fmt.Sprintf("GET /logs/abc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nContent-Length: %d\r\n\r\n", 1000))
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > base+2 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d, baseline %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(20 * time.Millisecond) // polling a count
	}
}
