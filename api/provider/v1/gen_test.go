package providerv1

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocLine is the header line naming protoc's version: it differs between
// machines without the code being stale, so the comparison ignores it.
var protocLine = regexp.MustCompile(`(?m)^// \tprotoc +v.*$`)

// TestGeneratedCodeIsFresh regenerates the Go code (and the example's Python
// messages) from provider.proto into a
// temporary directory with scripts/gen-proto and fails when it differs from
// the committed files. It is skipped where protoc is not installed.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc not installed (apt-get install -y protobuf-compiler)")
	}
	if testing.Short() {
		t.Skip("regenerating needs the protoc plugins; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "gen-proto"), out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-proto: %v\n%s", err, b)
	}
	py := filepath.Join("examples", "provider-python", "gen", "api", "provider", "v1", "provider_pb2.py")
	for _, name := range []string{"provider.pb.go", "provider_grpc.pb.go", py} {
		rel := name
		if name != py {
			rel = filepath.Join("api", "provider", "v1", name)
		}
		fresh, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(normalize(fresh), normalize(committed)) {
			t.Errorf("%s is stale: run scripts/gen-proto and commit the result", name)
		}
	}
}

func normalize(b []byte) []byte { return protocLine.ReplaceAll(b, nil) }

// TestNormalizeKeepsTheCode proves the comparison can fail: only the protoc
// version line is ignored.
func TestNormalizeKeepsTheCode(t *testing.T) {
	a := []byte("// \tprotoc        v3.21.12\ntype A struct{}\n")
	b := []byte("// \tprotoc        v4.25.1\ntype A struct{}\n")
	c := []byte("// \tprotoc        v3.21.12\ntype B struct{}\n")
	if !bytes.Equal(normalize(a), normalize(b)) {
		t.Error("the protoc version line is not ignored")
	}
	if bytes.Equal(normalize(a), normalize(c)) {
		t.Error("a change in the code is ignored")
	}
}
