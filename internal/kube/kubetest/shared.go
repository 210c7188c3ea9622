package kubetest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SharedPlane is the control plane the live tests of one test package
// share: one cluster per test binary, started on the first Shared call and
// stopped when the binary's tests end (Main).
type SharedPlane struct {
	// Options are the cluster's settings: the superset of what the
	// package's tests need (feature gates, runtime config, SANs).
	Options
	// Setup, when set, runs once after the cluster is up (install CRDs,
	// RBAC). What it creates is part of the pristine state every test
	// starts from: Reset keeps it and fails when a test deleted or
	// changed it.
	Setup func(c *Cluster) error
}

// sharedStatePrefix names the state directories of shared planes (in
// os.TempDir()); a directory whose owner process is gone is swept by the
// next Shared start.
const sharedStatePrefix = "tide-kubetest-shared-"

var shared struct {
	mu       sync.Mutex
	declared bool
	plane    SharedPlane
	c        *Cluster
	err      error  // why the plane could not start (every later Shared fails with it)
	holder   string // the test using the plane now
}

// Main runs a test package's tests with plane as their shared control
// plane, stops the plane when they are done (when one of them started it)
// and returns m.Run's exit code. Call it from the package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, kubetest.SharedPlane{...})) }
//
// A test that panics or a go test -timeout ends the binary without this
// stop: the script's watchdog (KTC_OWNER_PID) then stops the plane within
// about a second of the process's end, and the next Shared start sweeps
// what a watchdog could not.
func Main(m *testing.M, plane SharedPlane) int {
	shared.mu.Lock()
	shared.declared, shared.plane = true, plane
	shared.mu.Unlock()
	code := m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: stopping the shared control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// StopShared stops the shared control plane, if one runs, and removes its
// state. Main calls it.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	c := shared.c
	shared.c = nil
	if c == nil {
		return nil
	}
	out, err := exec.Command(script(), "down", c.state).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-test-cluster down: %v: %s", err, out)
	}
	return os.RemoveAll(c.state)
}

// Shared returns the package's shared control plane (SharedPlane, declared
// by Main), starting it on first use, reset to its pristine state (Reset):
// the test starts on a cluster with nothing another test made, and what it
// makes is removed when it ends (a t.Cleanup registered now, so it runs
// after every cleanup the test registers later: stop the test's operators,
// processes and machines in those). It fails t when the cluster cannot be
// made pristine, naming what is left.
//
// Use Shared for every live test that can run on the package's common
// options; use Start or StartWith for a test that needs its own plane: one
// that stops or kills a component, changes the control plane's
// configuration, or needs options that conflict with the shared ones (an
// API that must not be served, a feature gate off). Tests on the shared
// plane must not run in parallel (no t.Parallel): each owns the whole
// cluster while it runs.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if missing, dir := Missing(); len(missing) > 0 {
		skipOrFail(t, missing, dir)
	}
	shared.mu.Lock()
	if !shared.declared {
		shared.mu.Unlock()
		t.Fatal("kubetest.Shared: the package declares no shared control plane: call kubetest.Main from its TestMain")
	}
	if shared.c == nil && shared.err == nil {
		began := time.Now()
		shared.c, shared.err = startShared(shared.plane)
		if shared.err == nil {
			t.Logf("started the shared control plane in %v", time.Since(began).Round(time.Millisecond))
		}
	}
	c, err, holder := shared.c, shared.err, shared.holder
	if err == nil && holder == "" {
		shared.holder = t.Name()
	}
	shared.mu.Unlock()
	if err != nil {
		t.Fatalf("the shared control plane: %v", err)
	}
	if holder != "" {
		t.Fatalf("the shared control plane is %s's while it runs: tests on it must not run in parallel (t.Parallel) nor nest", holder)
	}
	t.Cleanup(func() {
		shared.mu.Lock()
		shared.holder = ""
		shared.mu.Unlock()
	})
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails(t)
		}
	})
	began := time.Now()
	if err := c.Reset(); err != nil {
		t.Fatalf("the shared control plane is not pristine at the start of %s: %v", t.Name(), err)
	}
	if d := time.Since(began); d > time.Second {
		t.Logf("reset the shared control plane in %v", d.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		began := time.Now()
		if err := c.Reset(); err != nil {
			t.Errorf("the shared control plane could not be reset after %s: %v", t.Name(), err)
			return
		}
		t.Logf("reset the shared control plane in %v", time.Since(began).Round(time.Millisecond))
	})
	return c
}

// startShared sweeps the state of shared planes whose test process is
// gone, starts one, runs the plane's Setup and records the baseline Reset
// restores.
func startShared(p SharedPlane) (*Cluster, error) {
	if stale, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedStatePrefix+"*")); len(stale) > 0 {
		out, err := exec.Command(script(), append([]string{"sweep"}, stale...)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("kube-test-cluster sweep: %v: %s", err, out)
		}
	}
	state, err := os.MkdirTemp("", sharedStatePrefix)
	if err != nil {
		return nil, err
	}
	c, err := up(state, p.Options)
	if err != nil {
		_ = exec.Command(script(), "down", state).Run() // what did start
		_ = os.RemoveAll(state)
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		c.logTailsTo(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
		_ = exec.Command(script(), "down", state).Run()
		_ = os.RemoveAll(state)
		return nil, err
	}
	if p.Setup != nil {
		if err := p.Setup(c); err != nil {
			return fail(fmt.Errorf("setup: %w", err))
		}
	}
	if err := c.settle(2 * time.Minute); err != nil {
		return fail(err)
	}
	if err := c.snapshot(); err != nil {
		return fail(fmt.Errorf("recording the pristine state: %w", err))
	}
	return c, nil
}

// settle waits until the controller manager (when it runs) has made the
// default ServiceAccount of every namespace (the standard ones and the
// Setup's): the pristine state is the one a test would see a while after
// the start.
func (c *Cluster) settle(within time.Duration) error {
	if !c.kcm {
		return nil
	}
	code, body, err := c.Do("GET", "/api/v1/namespaces", nil)
	if err != nil || code != 200 {
		return fmt.Errorf("list namespaces: %d %s %v", code, tail(body, 300), err)
	}
	var list struct {
		Items []struct{ Metadata struct{ Name string } }
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for _, ns := range list.Items {
		for {
			code, _, err := c.Do("GET", "/api/v1/namespaces/"+ns.Metadata.Name+"/serviceaccounts/default", nil)
			if err == nil && code == 200 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no default ServiceAccount in %s after %v (%d %v)", ns.Metadata.Name, within, code, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// logTails logs the tail of each component's log on t.
func (c *Cluster) logTails(t testing.TB) { c.logTailsTo(t.Logf) }

func (c *Cluster) logTailsTo(logf func(string, ...any)) {
	for _, n := range []string{"apiserver", "scheduler", "kcm", "kwok"} {
		if b, err := os.ReadFile(filepath.Join(c.state, "logs", n+".log")); err == nil && len(b) > 0 {
			logf("%s log (tail):\n%s", n, tail(b, 2000))
		}
	}
}

// skipOrFail skips t for missing binaries, or fails it when
// TIDE_KUBE_REQUIRE=1.
func skipOrFail(t testing.TB, missing []string, dir string) {
	t.Helper()
	msg := fmt.Sprintf("no Kubernetes test binaries (%s missing in %s); build them with scripts/kube-test-cluster build",
		strings.Join(missing, ", "), dir)
	if os.Getenv("TIDE_KUBE_REQUIRE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
