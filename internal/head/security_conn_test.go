package head

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// closedWithin reads from c until the server closes it (or answers) and
// returns how long that took; it fails when the server held the connection
// for 30 s.
func closedWithin(t *testing.T, c net.Conn, what string) time.Duration {
	t.Helper()
	began := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, io.EOF) && !notTimeout(err) {
		t.Fatalf("%s: the server held the connection for 30s: %v", what, err)
	}
	return time.Since(began)
}

// TestSecurityConnectionTimeouts covers the slowloris variants that never
// reach a handler: headers trickled a line at a time, a connection that
// sends nothing, and keep-alive connections left idle after a request (50
// of them at once). Each is closed within the head's header or idle
// timeout (400 ms here; 10 s and 2 min by default), and the goroutine count
// comes back to its baseline. Before the idle timeout was set, an idle
// keep-alive connection held a goroutine for as long as the client liked.
func TestSecurityConnectionTimeouts(t *testing.T) { testConnectionTimeouts(t) }

func testConnectionTimeouts(t *testing.T, mods ...func(*Config)) {
	const timeout = 400 * time.Millisecond
	e := newSecEnv(t, 0, append(mods, func(c *Config) { c.HeaderTimeout, c.IdleTimeout = timeout, timeout })...)
	before := e.state(t)
	base := runtime.NumGoroutine()
	dial := func() net.Conn {
		c, err := e.dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	check := func(what string, took time.Duration) {
		t.Logf("%s: closed after %v", what, took.Round(time.Millisecond))
		if took > 10*timeout+5*time.Second {
			t.Errorf("%s: held %v, timeout %v", what, took, timeout)
		}
	}

	// Headers trickled one line every 50 ms, with the admin token.
	c := dial()
	stop := make(chan struct{})
	go func() {
		if _, err := io.WriteString(c, "POST /instances HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+secAdmin+"\r\n"); err != nil {
			return
		}
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for range 10000 {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if _, err := io.WriteString(c, "X-Slow: a\r\n"); err != nil {
				return
			}
		}
	}()
	check("slow headers", closedWithin(t, c, "slow headers"))
	close(stop)

	// A connection that sends nothing (over TLS: nothing after the
	// handshake; the raw TCP cases are in TestSecurityTLSHandshakeTimeouts).
	check("silent connection", closedWithin(t, dial(), "silent connection"))

	// Keep-alive connections left idle after one request each.
	var idle []net.Conn
	for range 50 {
		c := dial()
		if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		status, err := r.ReadString('\n')
		if err != nil || !strings.Contains(status, " 200 ") {
			t.Fatalf("health: %q %v", status, err)
		}
		idle = append(idle, c)
	}
	began := time.Now()
	for i, c := range idle {
		closedWithin(t, c, "idle keep-alive connection")
		if i == len(idle)-1 {
			check("50 idle keep-alive connections", time.Since(began))
		}
	}
	if after := e.state(t); after != before {
		t.Errorf("the connections changed the store")
	}
	waitGoroutines(t, base, e.client)
}
