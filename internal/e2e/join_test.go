package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
)

// joinCluster starts `tide head --tls auto` with an admin and a join token
// and a short credential TTL, and returns a client that trusts its CA.
func joinCluster(t *testing.T, ttl time.Duration) (*cluster, string, *http.Client) {
	t.Helper()
	cl := newCluster(t)
	url := fmt.Sprintf("https://127.0.0.1:%d", cl.headPort)
	cl.head = cl.start("head", "head", "--port", strconv.Itoa(cl.headPort), "--data-dir", cl.headDir, "--token", token,
		"--join-token", "e2e-join-token", "--tls", "auto", "--credential-ttl", ttl.String(), "--log-level", "info")
	caFile := filepath.Join(cl.headDir, "tls", "ca.pem")
	var hc *http.Client
	cl.waitFor(15*time.Second, "head to answer over TLS", func() (bool, string) {
		select {
		case <-cl.head.done:
			t.Fatalf("head exited: %v", cl.head.cmd.ProcessState)
		default:
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return false, err.Error()
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		c, err := client.New(url, token, hc)
		if err != nil {
			return false, err.Error()
		}
		if err := c.Health(context.Background()); err != nil {
			return false, err.Error()
		}
		cl.c = c
		return true, ""
	})
	return cl, url, hc
}

// bootstrapScript runs `tide bootstrap` and returns the script it printed.
func bootstrapScript(t *testing.T, cl *cluster, url, pool, machine, format string) string {
	t.Helper()
	cmd := exec.Command(tideBin, "bootstrap", "--head", url, "--token", token, "--ca-cert", filepath.Join(cl.headDir, "tls", "ca.pem"),
		"--pool", pool, "--machine", machine, "--format", format, "--data-dir", filepath.Join(cl.dir, machine), "--tide", tideBin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tide bootstrap: %v\n%s", err, out)
	}
	return string(out)
}

// blobOf extracts the blob from a shell bootstrap script.
func blobOf(t *testing.T, script string) provider.Bootstrap {
	t.Helper()
	_, rest, ok := strings.Cut(script, "<<'TIDE_BOOTSTRAP'\n")
	blob, _, ok2 := strings.Cut(rest, "\nTIDE_BOOTSTRAP\n")
	if !ok || !ok2 {
		t.Fatalf("no blob in the script:\n%s", script)
	}
	b, err := provider.ParseBootstrap([]byte(blob))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeBlob(t *testing.T, dir string, b provider.Bootstrap) string {
	t.Helper()
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "blob-"+b.Machine+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBootstrapJoin: a machine runs the script `tide bootstrap` printed and
// its worker joins the head over TLS as that machine of that pool; the
// script (and so the blob) carries the head's CA and a credential, and
// neither the credential nor the join token is in the worker's command
// line or environment.
func TestBootstrapJoin(t *testing.T) {
	cl, url, _ := joinCluster(t, time.Minute)
	script := bootstrapScript(t, cl, url, "edge", "edge-1", "shell")
	b := blobOf(t, script)
	if b.Head != url || b.Pool != "edge" || b.Machine != "edge-1" || !strings.Contains(b.CA, "BEGIN CERTIFICATE") || b.LogToken == "" {
		t.Fatalf("blob: %+v", b)
	}
	ci := bootstrapScript(t, cl, url, "edge", "edge-2", "cloud-init")
	if !strings.HasPrefix(ci, "#cloud-config\n") || !strings.Contains(ci, `"machine":"edge-2"`) {
		t.Fatalf("cloud-init:\n%s", ci)
	}
	scriptPath := filepath.Join(cl.dir, "boot.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	d := cl.startCmd("edge-1", "/bin/sh", scriptPath)
	cl.waitFor(20*time.Second, "edge-1 online", func() (bool, string) {
		w, err := cl.c.Worker(context.Background(), "edge-1")
		if err != nil {
			return false, err.Error()
		}
		return w.Status == "ONLINE" && w.Pool == "edge", w.Status + " " + w.Pool
	})
	for _, f := range []string{"cmdline", "environ"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", d.cmd.Process.Pid, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), b.Token) || strings.Contains(string(data), "e2e-join-token") {
			t.Errorf("the worker's %s holds a credential", f)
		}
	}
	// An instance runs there and its log comes back through the head
	// (the head presents the machine's log token).
	req := submitReq("echo joined-over-tls; env", nil)
	pool := "edge"
	req.Pool = &pool
	res, err := cl.c.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	cl.waitFor(20*time.Second, "the instance's log", func() (bool, string) {
		c, err := cl.c.Logs(context.Background(), res.InstanceID, 0, 1<<10)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(c.Content), "TIDE_INSTANCE_ID="), string(c.Content)
	})
	// The instance's environment holds no credential.
	if c, err := cl.c.Logs(context.Background(), res.InstanceID, 0, 1<<20); err != nil {
		t.Fatal(err)
	} else if env := string(c.Content); strings.Contains(env, b.Token) || strings.Contains(env, b.LogToken) ||
		strings.Contains(env, "e2e-join-token") || strings.Contains(env, token) {
		t.Errorf("the instance's environment holds a credential:\n%s", env)
	}
	// The head's log holds no credential.
	if logs, _ := os.ReadFile(cl.head.log); strings.Contains(string(logs), b.Token) || strings.Contains(string(logs), b.LogToken) {
		t.Error("the head logged a credential")
	}
	if db, _ := os.ReadFile(filepath.Join(cl.headDir, "tide.db")); strings.Contains(string(db), b.Token) {
		t.Error("the head's database holds a credential in clear")
	}
}

// TestJoinRefused: a worker holding another machine's credential, an
// expired one or none is refused (401) and registers nothing.
func TestJoinRefused(t *testing.T) {
	cl, url, hc := joinCluster(t, 3*time.Second)
	other := blobOf(t, bootstrapScript(t, cl, url, "edge", "edge-2", "shell"))
	expired := blobOf(t, bootstrapScript(t, cl, url, "edge", "edge-3", "shell"))
	expiredAt := time.Now().Add(3 * time.Second)

	// Another machine's credential, presented as edge-1 (and as edge-2 of
	// another pool).
	stolen := other
	stolen.Machine = "edge-1"
	wrongPool := other
	wrongPool.Pool = "gpu"
	cases := map[string]string{
		"stolen":     writeBlob(t, cl.dir, stolen),
		"wrong-pool": writeBlob(t, cl.dir, wrongPool),
	}
	time.Sleep(time.Until(expiredAt) + 500*time.Millisecond)
	cases["expired"] = writeBlob(t, cl.dir, expired)
	var ds []*daemon
	for name, path := range cases {
		ds = append(ds, cl.start(name, "worker", "--bootstrap", path, "--data-dir", filepath.Join(cl.dir, "w-"+name),
			"--log-addr", "127.0.0.1:0", "--retry-max", "200ms"))
	}
	none := cl.start("none", "worker", "--head", url, "--ca-cert", filepath.Join(cl.headDir, "tls", "ca.pem"), "--name", "edge-4",
		"--data-dir", filepath.Join(cl.dir, "w-none"), "--log-addr", "127.0.0.1:0", "--retry-max", "200ms")
	ds = append(ds, none)
	// Each is told 401, over and over, and nothing registers.
	cl.waitFor(20*time.Second, "every worker refused with 401", func() (bool, string) {
		for _, d := range ds {
			if logs, _ := os.ReadFile(d.log); !strings.Contains(string(logs), "head answered 401") {
				return false, d.name + " not refused yet:\n" + string(logs)
			}
		}
		return true, ""
	})
	ws, err := cl.c.Workers(context.Background())
	if err != nil || len(ws) != 0 {
		t.Fatalf("workers after refused joins: %+v %v", ws, err)
	}
	// The same refusals at the HTTP level: 401 and nothing registered.
	for name, b := range map[string]provider.Bootstrap{"stolen": stolen, "wrong-pool": wrongPool, "expired": expired, "none": {Machine: "edge-4", Pool: "edge"}} {
		body, _ := json.Marshal(map[string]any{"worker_id": b.Machine, "host": "127.0.0.1", "pool": b.Pool})
		req, _ := http.NewRequest("POST", url+"/workers", strings.NewReader(string(body)))
		if b.Token != "" {
			req.Header.Set("Authorization", "Bearer "+b.Token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: POST /workers answered %d, want 401", name, resp.StatusCode)
		}
	}
	if ws, _ := cl.c.Workers(context.Background()); len(ws) != 0 {
		t.Fatalf("workers after refused registrations: %+v", ws)
	}
	// The genuine holder of a fresh blob joins (edge-2's expired meanwhile).
	fresh := blobOf(t, bootstrapScript(t, cl, url, "edge", "edge-2", "shell"))
	cl.start("edge-2", "worker", "--bootstrap", writeBlob(t, cl.dir, fresh), "--data-dir", filepath.Join(cl.dir, "w-good"),
		"--log-addr", "127.0.0.1:0", "--retry-max", "200ms")
	cl.waitFor(20*time.Second, "edge-2 online", func() (bool, string) {
		w, err := cl.c.Worker(context.Background(), "edge-2")
		if err != nil {
			return false, err.Error()
		}
		return w.Status == "ONLINE", w.Status
	})
}

// startCmd is start for another program than tide (a boot script).
func (cl *cluster) startCmd(name, bin string, args ...string) *daemon {
	cl.t.Helper()
	d := &daemon{name: name, args: args, log: filepath.Join(cl.dir, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		cl.t.Fatal(err)
	}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TIDE_") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	if err := d.cmd.Start(); err != nil {
		cl.t.Fatal(err)
	}
	go func() { d.cmd.Wait(); f.Close(); close(d.done) }()
	cl.mu.Lock()
	cl.all = append(cl.all, d)
	cl.mu.Unlock()
	return d
}

func submitReq(command string, labels map[string]string) *httpapi.SubmitRequest {
	return &httpapi.SubmitRequest{Command: &command, Labels: labels}
}
