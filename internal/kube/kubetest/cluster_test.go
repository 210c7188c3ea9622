package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// widgetCRD is a CRD the package's shared plane installs (part of its
// pristine state), so that a test can make objects of it.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kubetest.tide.dev
spec:
  group: kubetest.tide.dev
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}`

func TestMain(m *testing.M) {
	os.Exit(Main(m, SharedPlane{Setup: func(c *Cluster) error {
		if err := c.Create([]byte(widgetCRD + "\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubetest-setup")); err != nil {
			return err
		}
		return waitServed(c, "/apis/kubetest.tide.dev/v1/widgets", time.Minute)
	}}))
}

func waitServed(c *Cluster, path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		code, body, err := c.Do(http.MethodGet, path, nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served after %v: %d %s %v", path, within, code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// must sends a request and fails t unless the status is want.
func must(t *testing.T, c *Cluster, want int, method, path string, body any) []byte {
	t.Helper()
	code, out, err := c.Do(method, path, body)
	if err != nil || code != want {
		t.Fatalf("%s %s: %d %s %v, want %d", method, path, code, out, err, want)
	}
	return out
}

func kwokNode(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{
		"name": name, "annotations": map[string]string{"kwok.x-k8s.io/node": "fake"}},
		"status": map[string]any{"allocatable": map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
			"capacity": map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}}}
}

func plainPod(name, namespace string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"automountServiceAccountToken": false, "containers": []map[string]any{{"name": "c", "image": "x",
			"resources": map[string]any{"requests": map[string]string{"cpu": "1"}}}}}}
}

// TestClusterRunsKwokNodeAndPod starts the real control plane, creates a
// Node that kwok manages and a pod the real scheduler binds to it, and sees
// the pod Running.
func TestClusterRunsKwokNodeAndPod(t *testing.T) {
	c := Shared(t)
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/nodes", kwokNode("kw-0"))
	Eventually(t, time.Minute, func() (bool, string) {
		_, body, err := c.Do(http.MethodGet, "/api/v1/nodes/kw-0", nil)
		if err != nil {
			return false, err.Error()
		}
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		_ = json.Unmarshal(body, &n)
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("node not Ready: %s", body)
	})
	Eventually(t, time.Minute, func() (bool, string) { // the default ServiceAccount may appear a moment after start
		code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/default/pods", plainPod("p", "default"))
		return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod: %d %s %v", code, body, err)
	})
	Eventually(t, time.Minute, func() (bool, string) {
		_, body, _ := c.Do(http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
		var p struct {
			Spec   struct{ NodeName string }
			Status struct{ Phase string }
		}
		_ = json.Unmarshal(body, &p)
		return p.Spec.NodeName == "kw-0" && p.Status.Phase == "Running", fmt.Sprintf("pod: node %q phase %q", p.Spec.NodeName, p.Status.Phase)
	})
}

// TestSharedReset makes what a test typically leaves on the shared plane
// (a kwok Node with a Running pod, a Deployment whose pods wait, a
// namespace with a pod, ServiceAccount and ConfigMap, a custom object
// with a finalizer nothing will remove, a Lease, a Secret in kube-system,
// a PriorityClass, a webhook configuration, a CRD of its own with an
// object), resets the plane and checks that every one is gone and that a
// second reset has nothing to do; it logs how long each reset took. Then
// it checks that Reset fails, naming it, when a test deleted an object of
// the pristine state.
func TestSharedReset(t *testing.T) {
	c := Shared(t)
	began := time.Now()
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset of a pristine plane: %v", time.Since(began).Round(time.Millisecond))

	// kube-controller-manager makes a namespace's default ServiceAccount
	// when it pleases, after the pristine state was recorded too: in the
	// Setup's namespace, a new one is not a leftover (deleting it would
	// make it come back for ever).
	must(t, c, http.StatusOK, http.MethodDelete, "/api/v1/namespaces/kubetest-setup/serviceaccounts/default", nil)
	Eventually(t, time.Minute, func() (bool, string) {
		code, _, err := c.Do(http.MethodGet, "/api/v1/namespaces/kubetest-setup/serviceaccounts/default", nil)
		return err == nil && code == http.StatusOK, fmt.Sprintf("default ServiceAccount not made again: %d %v", code, err)
	})
	began = time.Now()
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Fatalf("reset with a new default ServiceAccount in the Setup's namespace took %v", d)
	}

	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/nodes", kwokNode("kw-r"))
	Eventually(t, time.Minute, func() (bool, string) {
		code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/default/pods", plainPod("bound", "default"))
		return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod: %d %s %v", code, body, err)
	})
	two := 2
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/apps/v1/namespaces/default/deployments", map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "waits"},
		"spec": map[string]any{"replicas": two, "selector": map[string]any{"matchLabels": map[string]string{"app": "waits"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "waits"}},
				"spec": map[string]any{"automountServiceAccountToken": false, "nodeSelector": map[string]string{"none": "such"},
					"containers": []map[string]any{{"name": "c", "image": "x"}}}}}})
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": "reset-me"}})
	Eventually(t, time.Minute, func() (bool, string) {
		code, body, err := c.Do(http.MethodPost, "/api/v1/namespaces/reset-me/pods", plainPod("inside", "reset-me"))
		return err == nil && code == http.StatusCreated, fmt.Sprintf("create pod: %d %s %v", code, body, err)
	})
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/namespaces/reset-me/serviceaccounts", map[string]any{"metadata": map[string]any{"name": "sa"}})
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/namespaces/reset-me/configmaps", map[string]any{"metadata": map[string]any{"name": "cm"}})
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/kubetest.tide.dev/v1/widgets", map[string]any{"apiVersion": "kubetest.tide.dev/v1",
		"kind": "Widget", "metadata": map[string]any{"name": "held", "finalizers": []string{"kubetest.tide.dev/never"}}})
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/default/leases", map[string]any{
		"metadata": map[string]any{"name": "tide-kube"}, "spec": map[string]any{"holderIdentity": "gone"}})
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/namespaces/kube-system/secrets", map[string]any{
		"metadata": map[string]any{"name": "bootstrap-token-abcdef"}, "type": "bootstrap.kubernetes.io/token"})
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/scheduling.k8s.io/v1/priorityclasses", map[string]any{
		"metadata": map[string]any{"name": "urgent"}, "value": 1000})
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", map[string]any{
		"metadata": map[string]any{"name": "nowhere"}, "webhooks": []map[string]any{{"name": "nowhere.kubetest.tide.dev",
			"clientConfig": map[string]any{"url": "https://127.0.0.1:1/validate"}, "sideEffects": "None", "admissionReviewVersions": []string{"v1"},
			"failurePolicy": "Ignore", "rules": []map[string]any{{"apiGroups": []string{""}, "apiVersions": []string{"v1"},
				"operations": []string{"CREATE"}, "resources": []string{"configmaps"}}}}}})
	gadgets := strings.NewReplacer("widgets", "gadgets", "widget", "gadget", "Widget", "Gadget").Replace(widgetCRD)
	if err := c.Create([]byte(gadgets)); err != nil {
		t.Fatal(err)
	}
	if err := waitServed(c, "/apis/kubetest.tide.dev/v1/gadgets", time.Minute); err != nil {
		t.Fatal(err)
	}
	must(t, c, http.StatusCreated, http.MethodPost, "/apis/kubetest.tide.dev/v1/gadgets", map[string]any{"apiVersion": "kubetest.tide.dev/v1",
		"kind": "Gadget", "metadata": map[string]any{"name": "g"}})
	Eventually(t, time.Minute, func() (bool, string) {
		running, waiting := 0, 0
		for _, p := range []string{"/api/v1/namespaces/default/pods"} {
			_, body, _ := c.Do(http.MethodGet, p, nil)
			var l struct {
				Items []struct {
					Metadata struct{ Name string }
					Status   struct{ Phase string }
				}
			}
			_ = json.Unmarshal(body, &l)
			for _, it := range l.Items {
				if it.Metadata.Name == "bound" && it.Status.Phase == "Running" {
					running++
				}
				if strings.HasPrefix(it.Metadata.Name, "waits-") {
					waiting++
				}
			}
		}
		return running == 1 && waiting == 2, fmt.Sprintf("%d pod Running on kw-r, %d of the Deployment's", running, waiting)
	})

	began = time.Now()
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset after the objects above: %v", time.Since(began).Round(time.Millisecond))
	for _, p := range []string{"/api/v1/nodes/kw-r", "/api/v1/namespaces/default/pods/bound", "/apis/apps/v1/namespaces/default/deployments/waits",
		"/api/v1/namespaces/reset-me", "/apis/kubetest.tide.dev/v1/widgets/held", "/apis/coordination.k8s.io/v1/namespaces/default/leases/tide-kube",
		"/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef", "/apis/scheduling.k8s.io/v1/priorityclasses/urgent",
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/nowhere",
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.kubetest.tide.dev"} {
		must(t, c, http.StatusNotFound, http.MethodGet, p, nil)
	}
	body := must(t, c, http.StatusOK, http.MethodGet, "/api/v1/namespaces/default/pods", nil)
	if strings.Contains(string(body), `"name":"waits-`) {
		t.Fatalf("pods of the Deployment left after the reset: %s", body)
	}
	began = time.Now()
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	t.Logf("second reset: %v", time.Since(began).Round(time.Millisecond))
	// The widgets CRD is pristine: still served.
	must(t, c, http.StatusOK, http.MethodGet, "/apis/kubetest.tide.dev/v1/widgets", nil)

	// A test that deletes an object of the pristine state: Reset cannot
	// make it again, and says so.
	saved := c.baseline
	t.Cleanup(func() { c.baseline = saved })
	must(t, c, http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/configmaps", map[string]any{"metadata": map[string]any{"name": "pristine"}})
	if err := c.snapshot(); err != nil {
		t.Fatal(err)
	}
	must(t, c, http.StatusOK, http.MethodDelete, "/api/v1/namespaces/default/configmaps/pristine", nil)
	if err := c.Reset(); err == nil || !strings.Contains(err.Error(), "configmaps default/pristine") {
		t.Fatalf("Reset after a pristine object was deleted: %v, want an error naming configmaps default/pristine", err)
	} else {
		t.Logf("as it should: %v", err)
	}
}

// TestWatchdogStopsAnOrphanedPlane: a control plane whose owner process
// ends without stopping it (a panic, go test -timeout, kill -9: no cleanup
// runs) is stopped by the script's watchdog; the state directory is then
// swept.
func TestWatchdogStopsAnOrphanedPlane(t *testing.T) {
	if missing, dir := Missing(); len(missing) > 0 {
		skipOrFail(t, missing, dir)
	}
	owner := exec.Command("sleep", "600")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Process.Kill(); _ = owner.Wait() }()
	state := t.TempDir()
	cmd := exec.Command(script(), "up", state)
	cmd.Env = append(os.Environ(), "KTC_OWNER_PID="+strconv.Itoa(owner.Process.Pid))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(script(), "down", state).Run() })
	var pids []int
	for _, n := range []string{"etcd", "apiserver", "scheduler", "kwok", "watchdog"} {
		b, err := os.ReadFile(filepath.Join(state, n+".pid"))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pids = append(pids, p)
	}
	alive := func() []int {
		var out []int
		for _, p := range pids {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !strings.Contains(string(st), ") Z ") {
				out = append(out, p)
			}
		}
		return out
	}
	if a := alive(); len(a) != len(pids) {
		t.Fatalf("only %v of %v run", a, pids)
	}
	_ = owner.Process.Kill()
	_ = owner.Wait()
	began := time.Now()
	Eventually(t, 30*time.Second, func() (bool, string) {
		a := alive()
		return len(a) == 0, fmt.Sprintf("still running: %v", a)
	})
	t.Logf("the watchdog stopped the plane %v after its owner ended", time.Since(began).Round(time.Millisecond))
	out, err := exec.Command(script(), "sweep", state).CombinedOutput()
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("sweep left %s (%v)", state, err)
	}
}

// otherTest is a second test asking for the plane while t holds it: its
// Fatalf is recorded and ends its goroutine.
type otherTest struct {
	testing.TB
	fatal string
}

func (o *otherTest) Name() string { return "TestOther" }
func (o *otherTest) Fatalf(format string, args ...any) {
	o.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestSharedRefusesASecondUser: a test asking for the shared plane while
// another holds it (t.Parallel) fails, naming the holder.
func TestSharedRefusesASecondUser(t *testing.T) {
	Shared(t)
	o := &otherTest{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Shared(o) }()
	<-done
	if !strings.Contains(o.fatal, "TestSharedRefusesASecondUser's while it runs") {
		t.Fatalf("a second user of the plane: %q, want a failure naming the holder", o.fatal)
	}
}
