package cli

import (
	"bytes"
	"context"
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
