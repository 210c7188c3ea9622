package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJoinFlagsRefuseBadInput: the join commands' bad input exits 2 and
// names the flag.
func TestJoinFlagsRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"version":1,"head":"ftp://h","token":"t"}`), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bootstrap", "--machine", "m"}, "--pool and --machine"},
		{[]string{"bootstrap", "--pool", "p", "--machine", "m", "--format", "yaml"}, "--format"},
		{[]string{"head", "--data-dir", dir, "--tls", "manual"}, "--tls"},
		{[]string{"head", "--data-dir", dir, "--tls", "auto", "--tls-cert", "c", "--tls-key", "k"}, "--tls auto"},
		{[]string{"head", "--data-dir", dir, "--tls-ca", "ca.pem"}, "--tls-ca"},
		{[]string{"worker", "--data-dir", dir, "--bootstrap", filepath.Join(dir, "missing.json")}, "--bootstrap"},
		{[]string{"worker", "--data-dir", dir, "--bootstrap", bad}, "bootstrap head"},
		{[]string{"up", "--data-dir", dir, "--tls", "manual"}, "--tls"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("tide %s: exit %d, stderr %q; want 2 naming %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestBootstrapScript: the shell script writes the blob to a private file
// and runs the worker on it; quoting keeps odd paths intact.
func TestBootstrapScript(t *testing.T) {
	blob := `{"version":1,"head":"https://h:1","token":"t"}`
	sh := bootstrapScript("shell", blob, "/var/lib/my tide", "tide", "m-1", "p")
	for _, want := range []string{"umask 077", "mkdir -p '/var/lib/my tide'", "cat > '/var/lib/my tide/bootstrap.json' <<'TIDE_BOOTSTRAP'\n" + blob + "\nTIDE_BOOTSTRAP\n",
		"exec tide worker --bootstrap '/var/lib/my tide/bootstrap.json' --data-dir '/var/lib/my tide/worker'"} {
		if !strings.Contains(sh, want) {
			t.Errorf("shell script lacks %q:\n%s", want, sh)
		}
	}
	ci := bootstrapScript("cloud-init", blob, "/var/lib/tide", "/usr/local/bin/tide", "m-1", "p")
	for _, want := range []string{"#cloud-config\n", `permissions: "0600"`, "      " + blob + "\n", "/usr/local/bin/tide worker --bootstrap /var/lib/tide/bootstrap.json"} {
		if !strings.Contains(ci, want) {
			t.Errorf("cloud-init lacks %q:\n%s", want, ci)
		}
	}
}
