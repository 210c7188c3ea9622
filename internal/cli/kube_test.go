package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/nodeagent"
)

func TestKubeInstallPrintsManifests(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"kube", "install"}, Streams{Out: &out, Err: &errb}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !bytes.Equal(out.Bytes(), deploy.All()) {
		t.Fatal("tide kube install did not print deploy.All()")
	}
	if code := Main(context.Background(), []string{"kube", "install", "extra"}, Streams{Out: &out, Err: &errb}); code != ExitUsage {
		t.Fatalf("extra argument: exit %d, want %d", code, ExitUsage)
	}
}

// TestKubeNodeRefusesBadJoin: `tide kube node` exits 2 naming the field
// when its join document is missing or wrong, before it talks to anyone.
func TestKubeNodeRefusesBadJoin(t *testing.T) {
	tests := []struct {
		name, stdin, want string
		args              []string
	}{
		{name: "no flag", args: []string{"kube", "node"}, want: "bootstrap"},
		{name: "not json", args: []string{"kube", "node", "--bootstrap", "-"}, stdin: "nope", want: "--bootstrap"},
		{name: "no token", args: []string{"kube", "node", "--bootstrap", "-"},
			stdin: `{"version":1,"server":"https://127.0.0.1:1","node":"n","provider_id":"tide://local/n"}`, want: "token"},
		{name: "no file", args: []string{"kube", "node", "--bootstrap", "/nonexistent/join.json"}, want: "--bootstrap"},
		{name: "no kind", args: []string{"kube", "node", "--bootstrap", "-"},
			stdin: `{"version":1,"server":"https://127.0.0.1:1","token":"t","node":"n","provider_id":"tide://local/n"}`, want: "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), tt.args, Streams{In: strings.NewReader(tt.stdin), Out: &out, Err: &errb})
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d naming %s", code, errb.String(), ExitUsage, tt.want)
			}
		})
	}
}

// TestWorkerBootstrapWithJoinIsNodeAgent: `tide worker --bootstrap -`
// given a Kubernetes join document (what tide kube hands any provider's
// machine) registers the Node at the document's apiserver with its token,
// instead of joining a head; its worker flags are unused.
func TestWorkerBootstrapWithJoinIsNodeAgent(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer api.Close()
	join, err := nodeagent.Join{Server: api.URL, Token: "machine-token", Node: "m-1", ProviderID: "tide://plugin/m-1",
		Capacity: map[corev1.ResourceName]string{"cpu": "4"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, []string{"worker", "--bootstrap", "-", "--name", "m-1", "--data-dir", t.TempDir(), "--pool", "p", "--stop-on-exit"},
		Streams{In: bytes.NewReader(join), Out: &out, Err: &errb})
	if code == ExitOK || code == ExitUsage {
		t.Fatalf("exit %d with an apiserver that refuses everything; stderr %s", code, errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || !strings.HasPrefix(seen[0], "POST /api/v1/nodes Bearer machine-token ") || !strings.Contains(seen[0], "tide://plugin/m-1") {
		t.Fatalf("the apiserver saw %q, want the Node m-1 registered with the machine's token", seen)
	}
	if !strings.Contains(errb.String(), "register Node m-1") {
		t.Fatalf("stderr %q does not say the Node could not be registered", errb.String())
	}
}
