package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tide-project/tide/deploy"
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
