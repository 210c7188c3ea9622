// Package kubetest starts a real, throwaway Kubernetes control plane for
// tests (etcd, kube-apiserver, kube-scheduler, kwok and, when built,
// kube-controller-manager) through scripts/kube-test-cluster, on free
// loopback ports. A test package's live tests share one plane (Shared,
// declared by Main in its TestMain), reset to its pristine state before
// and after each test (Reset); a test that needs a plane of its own starts
// one with Start or StartWith, stopped when the test ends.
//
// The binaries live in a cache directory (scripts/kube-test-cluster bin).
// When they are absent a test skips with the command that builds them,
// unless TIDE_KUBE_REQUIRE=1 (set by scripts/test after building them), in
// which case it fails.
package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Cluster is a running test control plane.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig for the cluster.
	Kubeconfig string
	// Server is the apiserver's URL (https://127.0.0.1:port).
	Server string
	// Token is the admin bearer token.
	Token string
	// Bin is the directory of the binaries.
	Bin string
	// CAFile is the cluster's CA (PEM): it signed the apiserver's serving
	// certificate and signs kubelets' client certificates.
	CAFile string
	state  string
	client *http.Client
	// kcm says kube-controller-manager runs (it was built).
	kcm bool
	// baseline is the pristine state Reset restores (shared planes only).
	baseline map[string]baseObject
	// baseTypes are the resource types that had objects then,
	// baseNamespaces the namespaces ("" too).
	baseTypes, baseNamespaces map[string]bool
}

// script returns the path of scripts/kube-test-cluster in this repository.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "kube-test-cluster")
}

// BinDir returns the directory the script keeps the binaries in.
func BinDir() (string, error) {
	out, err := exec.Command(script(), "bin").Output()
	if err != nil {
		return "", fmt.Errorf("kube-test-cluster bin: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Missing returns the binaries a cluster needs that are not built yet.
func Missing() ([]string, string) {
	dir, err := BinDir()
	if err != nil {
		return []string{err.Error()}, ""
	}
	var missing []string
	for _, b := range []string{"kube-apiserver", "kube-scheduler", "kwok"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		if _, err := exec.LookPath("etcd"); err != nil {
			missing = append(missing, "etcd")
		}
	}
	return missing, dir
}

// Options are the settings of StartWith.
type Options struct {
	// APIServerSANs are more IP addresses the apiserver's certificate
	// names (an address machines in network namespaces reach it at).
	APIServerSANs []string
	// FeatureGates are the control plane's feature gates (apiserver,
	// scheduler, controller manager), e.g. "DynamicResourceAllocation=true";
	// RuntimeConfig the apiserver's --runtime-config, e.g.
	// "resource.k8s.io/v1beta1=true".
	FeatureGates, RuntimeConfig string
}

// Start starts a cluster of t's own and stops it (by the pids the script
// recorded) when t ends, even when t fails. Most tests use the package's
// shared plane instead (Shared: no start of ~3-5 s per test); Start is for
// a test that needs a plane of its own (see Shared).
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Cluster {
	t.Helper()
	if missing, dir := Missing(); len(missing) > 0 {
		skipOrFail(t, missing, dir)
	}
	state := t.TempDir()
	c, err := up(state, o)
	t.Cleanup(func() {
		if t.Failed() && c != nil {
			c.logTails(t)
		}
		if err := exec.Command(script(), "down", state).Run(); err != nil {
			t.Errorf("kube-test-cluster down: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// up starts a cluster with its state in state, watched by the script's
// watchdog for this process's end (KTC_OWNER_PID).
func up(state string, o Options) (*Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script(), "up", state)
	cmd.Env = append(os.Environ(), "KTC_APISERVER_SANS="+strings.Join(o.APIServerSANs, ","),
		"KTC_FEATURE_GATES="+o.FeatureGates, "KTC_RUNTIME_CONFIG="+o.RuntimeConfig, fmt.Sprintf("KTC_OWNER_PID=%d", os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		return nil, fmt.Errorf("kube-test-cluster up: %v\n%s", err, stderr.String())
	}
	c := &Cluster{Kubeconfig: filepath.Join(state, "kubeconfig"), CAFile: filepath.Join(state, "pki", "ca.crt"), state: state}
	c.Bin, _ = BinDir()
	_, err := os.Stat(filepath.Join(state, "kcm.pid"))
	c.kcm = err == nil
	kc, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return c, err
	}
	if m := regexp.MustCompile(`server: "([^"]+)"`).FindSubmatch(kc); m != nil {
		c.Server = string(m[1])
	}
	if m := regexp.MustCompile(`token: "([^"]+)"`).FindSubmatch(kc); m != nil {
		c.Token = string(m[1])
	}
	if c.Server == "" || c.Token == "" {
		return c, fmt.Errorf("kubeconfig without server or token:\n%s", kc)
	}
	// The test apiserver serves a self-signed certificate on loopback.
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- loopback test cluster
	return c, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Do sends one request to the apiserver; body, when not nil, is marshalled
// to JSON (a []byte is sent as is). It returns the status and the body.
func (c *Cluster) Do(method, path string, body any, header ...string) (int, []byte, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, c.Server+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, data, err
}

// Eventually polls cond every 100 ms until it returns true or timeout
// passes, then fails t with what cond last said.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for i := 0; ; i++ {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("not reached after %v: %s", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
