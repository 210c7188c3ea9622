package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/cli"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	raw map[string]any
}

func (o object) id() string { return o.Kind + " " + o.Metadata.Namespace + "/" + o.Metadata.Name }

// objects parses a multi-document YAML stream.
func objects(t *testing.T, stream []byte) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, doc := range strings.Split(string(stream), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "" {
			continue
		}
		if err := json.Unmarshal(js, &o.raw); err != nil {
			t.Fatal(err)
		}
		out[o.id()] = o
	}
	return out
}

// TestKustomizationOnRealAPIServer renders deploy/kustomization.yaml with
// kubectl kustomize, checks that it is the set `tide kube install
// --deployment` prints and that the Deployment runs tide kube as the RBAC
// and the flags expect (two replicas, leader election, probes and metrics on
// the ports its args set, the RBAC's service account), then applies it to a
// real kube-apiserver (server-side apply, real objects), which accepts every
// object.
func TestKustomizationOnRealAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	kubectl := filepath.Join(c.Bin, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl is not among the test binaries (scripts/kube-test-cluster build makes it): %v", err)
	}
	rendered, err := exec.Command(kubectl, "kustomize", ".").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	got := objects(t, rendered)
	var install bytes.Buffer
	if code := cli.Main(context.Background(), []string{"kube", "install", "--deployment", "--image", "ghcr.io/tide-project/tide:latest"},
		cli.Streams{In: strings.NewReader(""), Out: &install, Err: &install}); code != 0 {
		t.Fatalf("tide kube install --deployment: exit %d: %s", code, install.String())
	}
	want := objects(t, install.Bytes())
	if len(got) != len(want) {
		t.Errorf("kustomize renders %d objects, tide kube install --deployment prints %d", len(got), len(want))
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || !reflect.DeepEqual(g.raw, w.raw) {
			t.Errorf("%s: kustomize and tide kube install differ (or it is missing)", id)
		}
	}

	var d struct {
		Spec struct {
			Replicas int
			Template struct {
				Spec struct {
					ServiceAccountName string
					Containers         []struct {
						Image string
						Args  []string
						Ports []struct {
							Name          string
							ContainerPort int
						}
						LivenessProbe  struct{ HTTPGet struct{ Path, Port string } }
						ReadinessProbe struct{ HTTPGet struct{ Path, Port string } }
					}
				}
			}
		}
	}
	dep, ok := got["Deployment tide-system/tide"]
	if !ok {
		t.Fatal("no Deployment tide-system/tide")
	}
	js, _ := json.Marshal(dep.raw)
	if err := json.Unmarshal(js, &d); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["ServiceAccount tide-system/"+d.Spec.Template.Spec.ServiceAccountName]; !ok || d.Spec.Replicas != 2 {
		t.Errorf("Deployment: %d replicas as service account %q; want 2 as rbac.yaml's", d.Spec.Replicas, d.Spec.Template.Spec.ServiceAccountName)
	}
	ct := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(ct.Args, " ")
	var help bytes.Buffer
	cli.Main(context.Background(), []string{"kube", "--help"}, cli.Streams{In: strings.NewReader(""), Out: &help, Err: &help})
	for _, a := range ct.Args[1:] {
		flag, _, _ := strings.Cut(a, "=")
		if !strings.Contains(help.String(), flag+" ") {
			t.Errorf("the Deployment passes %s, which tide kube does not take", flag)
		}
	}
	port := map[string]int{}
	for _, p := range ct.Ports {
		port[p.Name] = p.ContainerPort
	}
	for _, c := range []struct{ flag, portName, path, probePort string }{
		{"--probe-addr=:", "probes", "/healthz", ct.LivenessProbe.HTTPGet.Port},
		{"--probe-addr=:", "probes", "/readyz", ct.ReadinessProbe.HTTPGet.Port},
		{"--metrics-addr=:", "metrics", "", "metrics"},
	} {
		if !strings.Contains(args, c.flag+strconv.Itoa(port[c.portName])) || c.probePort != c.portName {
			t.Errorf("port %s (%d) is not where %s... of %q serves", c.portName, port[c.portName], c.flag, args)
		}
	}
	if ct.LivenessProbe.HTTPGet.Path != "/healthz" || ct.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		!strings.Contains(args, "--leader-elect=true") || ct.Args[0] != "kube" {
		t.Errorf("container: %+v", ct)
	}

	path := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(path, rendered, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
	}
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		code, body, _ := c.Do(http.MethodGet, "/apis/apps/v1/namespaces/tide-system/deployments/tide", nil)
		return code == http.StatusOK && strings.Contains(string(body), `"replicas":2`), "Deployment not stored: " + string(body)
	})
	if n := strings.Count(string(out), " serverside-applied\n"); n != len(got) {
		t.Errorf("kubectl applied %d objects, want %d:\n%s", n, len(got), out)
	}
}
