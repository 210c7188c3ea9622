package head

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSecurityTLS runs the security sweep against a head serving HTTPS
// with a --tls auto certificate, as `tide head --tls auto` and `tide up
// --tls auto` do: the credential matrix and the oversized bodies over
// HTTP/2 (Go's client negotiates it), trickled bodies and slow headers
// over HTTP/1.1 on TLS, silent and idle connections. Every answer and
// bound is the plain-HTTP one; the goroutine count comes back each time.
func TestSecurityTLS(t *testing.T) {
	t.Run("credentials", func(t *testing.T) { testUnauthenticatedMutations(t, withTLS) })
	t.Run("oversized bodies", func(t *testing.T) { testOversizedBodies(t, withTLS) })
	t.Run("slow bodies", func(t *testing.T) { testSlowBodies(t, withTLS) })
	t.Run("connections", func(t *testing.T) { testConnectionTimeouts(t, withTLS) })
}

// TestSecurityTLSHandshakeTimeouts: connections that stall before or
// inside the TLS handshake (nothing sent, half a ClientHello), and HTTP/2
// connections that stall after the preface or inside a header block, are
// closed within the head's header or idle timeout; 20 of each at once, and
// the goroutine count comes back.
func TestSecurityTLSHandshakeTimeouts(t *testing.T) {
	const timeout = 400 * time.Millisecond
	e := newSecEnv(t, timeout, withTLS, func(c *Config) { c.HeaderTimeout, c.IdleTimeout = timeout, timeout })
	before := e.state(t)
	base := runtime.NumGoroutine()
	h2 := e.tls.Clone()
	h2.NextProtos = []string{"h2"}
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0} // an empty SETTINGS frame
	// A HEADERS frame on stream 1 holding one byte of header block
	// (":method: GET", indexed) without END_HEADERS: its CONTINUATION
	// never comes.
	headers := []byte{0, 0, 1, 1, 0, 0, 0, 0, 1, 0x82}
	attacks := []struct {
		name string
		open func() (net.Conn, error)
	}{
		{"TCP connection that sends nothing", func() (net.Conn, error) { return net.Dial("tcp", e.addr) }},
		{"half a ClientHello", func() (net.Conn, error) {
			c, err := net.Dial("tcp", e.addr)
			if err == nil {
				_, err = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00})
			}
			return c, err
		}},
		{"HTTP/2 preface, then nothing", func() (net.Conn, error) {
			c, err := tls.Dial("tcp", e.addr, h2)
			if err == nil {
				_, err = c.Write(append([]byte(preface), settings...))
			}
			return c, err
		}},
		{"HTTP/2 header block never ended", func() (net.Conn, error) {
			c, err := tls.Dial("tcp", e.addr, h2)
			if err == nil {
				_, err = c.Write(append(append([]byte(preface), settings...), headers...))
			}
			return c, err
		}},
	}
	for _, a := range attacks {
		var conns []net.Conn
		for range 20 {
			c, err := a.open()
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, c)
		}
		began := time.Now()
		for _, c := range conns {
			closedWithin(t, c, a.name)
		}
		took := time.Since(began)
		t.Logf("%s ×20: all closed after %v", a.name, took.Round(time.Millisecond))
		if took > 10*timeout+5*time.Second {
			t.Errorf("%s: held %v, timeout %v", a.name, took, timeout)
		}
	}
	if after := e.state(t); after != before {
		t.Errorf("the connections changed the store")
	}
	waitGoroutines(t, base, e.client)
}

// TestSecurityHTTP2SlowBodies trickles request bodies over HTTP/2 (one
// connection, several streams at once), with and without credentials:
// each stream is answered (408 with credentials, 401 without) or reset
// within the body timeout, nothing is stored, and the goroutine count
// comes back.
func TestSecurityHTTP2SlowBodies(t *testing.T) {
	const timeout = 400 * time.Millisecond
	e := newSecEnv(t, timeout, withTLS)
	before := e.state(t)
	base := runtime.NumGoroutine()
	cases := []struct{ method, path, tok string }{
		{"POST", "/instances", secAdmin},
		{"POST", "/instances", ""},
		{"POST", "/workers", secJoin},
		{"POST", "/workers/w1/heartbeat", ""},
		{"POST", "/bootstrap", secAdmin},
	}
	type result struct {
		i      int
		status int
		proto  string
		err    error
		took   time.Duration
	}
	out := make(chan result, len(cases))
	stop := make(chan struct{})
	for i, c := range cases {
		go func() {
			pr, pw := io.Pipe()
			go func() {
				defer pw.Close()
				if _, err := io.WriteString(pw, "{"); err != nil {
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
					if _, err := io.WriteString(pw, " "); err != nil {
						return
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, c.method, e.url+c.path, pr)
			if err != nil {
				out <- result{i: i, err: err}
				return
			}
			req.ContentLength = 10000
			if c.tok != "" {
				req.Header.Set("Authorization", "Bearer "+c.tok)
			}
			began := time.Now()
			resp, err := e.client.Do(req)
			r := result{i: i, err: err, took: time.Since(began)}
			if err == nil {
				r.status, r.proto = resp.StatusCode, resp.Proto
				resp.Body.Close()
			}
			pr.CloseWithError(fmt.Errorf("answered"))
			out <- r
		}()
	}
	for range cases {
		r := <-out
		c := cases[r.i]
		t.Logf("%s %s (token %v): %d %s %v after %v", c.method, c.path, c.tok != "", r.status, r.proto, r.err, r.took.Round(time.Millisecond))
		switch {
		case r.err != nil && !strings.Contains(r.err.Error(), "stream error") && !strings.Contains(r.err.Error(), "answered"):
			t.Errorf("%s %s: %v", c.method, c.path, r.err)
		case r.err == nil && r.proto != "HTTP/2.0":
			t.Errorf("%s %s: answered over %s, want HTTP/2", c.method, c.path, r.proto)
		case r.status == 200:
			t.Errorf("%s %s: a trickled body was accepted", c.method, c.path)
		case r.err == nil && c.tok != "" && c.path != "/bootstrap" && r.status != http.StatusRequestTimeout:
			t.Errorf("%s %s: %d, want 408 for a body that outlived the timeout", c.method, c.path, r.status)
		}
		if r.took > 10*timeout+5*time.Second {
			t.Errorf("%s %s: held %v, body timeout %v", c.method, c.path, r.took, timeout)
		}
	}
	close(stop)
	if after := e.state(t); after != before {
		t.Errorf("slow bodies changed the store")
	}
	waitGoroutines(t, base, e.client)
}
