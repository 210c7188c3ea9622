package head

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

// lockedBuffer is a log sink shared by the head's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBasicAuthCarriesTheAdminToken is issue 19's proof. PyLet's Python
// client cannot send a bearer token; given "http://:TOKEN@head:8000" it
// sends "Authorization: Basic base64(':TOKEN')" on every request, as Go's
// client does for a URL with userinfo. A head that requires a token, over
// plain HTTP and over HTTPS, accepts that form (any user name), and a wrong
// or missing password gets 401 and changes nothing. The credentials never
// reach the head's log.
func TestBasicAuthCarriesTheAdminToken(t *testing.T) {
	const token = "pylet-basic-Zq7"
	certFile, keyFile, pool := selfSigned(t)
	for _, tc := range []struct {
		scheme string
		cfg    func(*Config)
		hc     *http.Client
	}{
		{"http", func(*Config) {}, &http.Client{Timeout: 10 * time.Second}},
		{"https", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile },
			&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			logs := &lockedBuffer{}
			cfg := Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Token: token,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			tc.cfg(&cfg)
			addr := runHead(t, cfg)
			defer tc.hc.CloseIdleConnections()
			at := func(userinfo, path string) string { return tc.scheme + "://" + userinfo + addr + path }
			submit := func(userinfo string) int {
				t.Helper()
				resp, err := tc.hc.Post(at(userinfo, "/instances"), "application/json",
					strings.NewReader(`{"command": "sleep 1", "name": "basic-`+tc.scheme+`"}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			list := func(userinfo string) (int, []httpapi.InstanceJSON) {
				t.Helper()
				resp, err := tc.hc.Get(at(userinfo, "/instances"))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out []httpapi.InstanceJSON
				if resp.StatusCode == 200 {
					if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
						t.Fatal(err)
					}
				}
				return resp.StatusCode, out
			}
			for _, bad := range []string{"", ":wrong@", "user@", "pylet:" + token + "x@"} {
				if code := submit(bad); code != http.StatusUnauthorized {
					t.Errorf("submit with %q: %d, want 401", bad, code)
				}
				if code, _ := list(bad); code != http.StatusUnauthorized {
					t.Errorf("list with %q: %d, want 401", bad, code)
				}
			}
			if code, ins := list(":" + token + "@"); code != 200 || len(ins) != 0 {
				t.Fatalf("after refused submits: %d, %d instances; want 200 and none", code, len(ins))
			}
			if code := submit(":" + token + "@"); code != 200 {
				t.Fatalf("submit with PyLet's Basic form: %d", code)
			}
			if code, ins := list("anyone:" + token + "@"); code != 200 || len(ins) != 1 {
				t.Fatalf("list with a user name: %d, %d instances", code, len(ins))
			}
			// tide's own client takes the same address.
			c, err := client.New(at(":"+token+"@", ""), "", tc.hc)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.BaseURL(), token) {
				t.Errorf("client base URL %q keeps the token", c.BaseURL())
			}
			if ins, err := c.Instances(context.Background(), client.ListOptions{}); err != nil || len(ins) != 1 {
				t.Fatalf("tide client with a Basic-auth address: %v, %d", err, len(ins))
			}
			basic := base64.StdEncoding.EncodeToString([]byte(":" + token))
			if l := logs.String(); strings.Contains(l, token) || strings.Contains(l, basic) {
				t.Errorf("the head logged the credentials:\n%s", l)
			}
		})
	}
}

// runHead runs Run on loopback until the test ends; it returns the address.
func runHead(t *testing.T, cfg Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan net.Addr, 1)
	done := make(chan error, 1)
	cfg.OnListen = func(a net.Addr) { addrCh <- a }
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop")
		}
	})
	select {
	case a := <-addrCh:
		return a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen")
	}
	return ""
}
