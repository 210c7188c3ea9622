package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/internal/provider/plugin/plugintest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestMain lets this test binary stand in for the tide binary: with
// TIDE_CLI_TEST_MAIN=1 it runs the command line on its arguments (so a test
// can start `tide provider serve-sim` as a plugin) instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("TIDE_CLI_TEST_MAIN") == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
	}
	os.Exit(m.Run())
}

func runTide(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	code := Main(ctx, args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func wantAllPassed(t *testing.T, code int, out, errs string) {
	t.Helper()
	if code != ExitOK || !strings.Contains(out, "16 passed, 0 failed") {
		t.Fatalf("exit %d, want 0 and 16 passed\n%s\n%s", code, out, errs)
	}
	for _, name := range []string{"ReplayedCreateIsNoOp", "StaleEpochIsRefused", "GetUnknownIsNotFound"} {
		if !strings.Contains(out, name) {
			t.Fatalf("the table does not list %s:\n%s", name, out)
		}
	}
}

// TestProviderTestSimSubprocess: `tide provider test --plugin "tide provider
// serve-sim"` starts the sim plugin the way tide does and prints a table of
// 16 passing subtests.
func TestProviderTestSimSubprocess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TIDE_CLI_TEST_MAIN", "1")
	code, out, errs := runTide(t, "provider", "test", "--plugin", exe+" provider serve-sim --latency 1s")
	wantAllPassed(t, code, out, errs)
	if !strings.Contains(out, "plugin sim tide") {
		t.Fatalf("the table does not name the plugin from its Info:\n%s", out)
	}
}

// TestProviderTestRemoteToken: --address with --token-file against a
// remote sim plugin requiring the token.
func TestProviderTestRemoteToken(t *testing.T) {
	cloud, err := plugin.NewSim(nil, time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan struct{})
	go func() {
		defer close(done)
		_ = provider.ListenAndServe(ctx, cloud, "127.0.0.1:0", provider.RemoteConfig{Token: "tok-123"},
			func(a net.Addr) { addrc <- a.String() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	addr := <-addrc
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runTide(t, "provider", "test", "--address", addr, "--token-file", tok)
	wantAllPassed(t, code, out, errs)
	if code, _, errs := runTide(t, "provider", "test", "--address", addr); code != ExitError || !strings.Contains(errs, "token") {
		t.Fatalf("without the token: exit %d (%s), want 1 and an error naming the token", code, errs)
	}
}

// pythonPlugin returns the command of the Python example plugin, or skips
// when Debian's python3-grpcio and python3-protobuf are missing (unless
// TIDE_REQUIRE_PYTHON_PLUGIN=1, which scripts/test sets once it installed
// them).
func pythonPlugin(t *testing.T) (python, script string) {
	t.Helper()
	python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import grpc, google.protobuf").Run(); err != nil {
		if os.Getenv("TIDE_REQUIRE_PYTHON_PLUGIN") == "1" {
			t.Fatalf("%s cannot import grpc and protobuf: %v", python, err)
		}
		t.Skip("python3-grpcio / python3-protobuf not installed")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "provider-python", "plugin.py"))
	if err != nil {
		t.Fatal(err)
	}
	return python, script
}

// TestProviderTestPythonPlugin: the Python example plugin (fake machines in
// a JSON file) passes the conformance suite as a subprocess plugin: the
// protocol is language-neutral.
func TestProviderTestPythonPlugin(t *testing.T) {
	python, script := pythonPlugin(t)
	state := filepath.Join(t.TempDir(), "machines.json")
	code, out, errs := runTide(t, "provider", "test", "--plugin", python+" "+script+" --latency 1 "+state)
	wantAllPassed(t, code, out, errs)
	if !strings.Contains(out, "plugin json-file") {
		t.Fatalf("the table does not name the Python plugin:\n%s", out)
	}
	b, err := os.ReadFile(state)
	if err != nil || !bytes.Contains(b, []byte(`"machines"`)) {
		t.Fatalf("the plugin kept no state in %s: %v %s", state, err, b)
	}
}

// TestProviderTestUsage: bad flags exit 2 with a message naming them.
func TestProviderTestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"provider", "test"},
		{"provider", "test", "--plugin", "x", "--address", "y:1"},
		{"provider", "test", "--plugin", "x", "--token-file", "f"},
		{"provider", "test", "--address", "y:1", "-o", "yaml"},
	} {
		code, _, errs := runTide(t, args...)
		if code != ExitUsage || !strings.Contains(errs, "-") {
			t.Errorf("%v: exit %d (%s), want 2 naming the flag", args, code, errs)
		}
	}
	if code, _, errs := runTide(t, "provider", "serve-sim"); code != ExitUsage || !strings.Contains(errs, "--listen") {
		t.Errorf("serve-sim outside tide without --listen: exit %d (%s), want 2", code, errs)
	}
}

// startServer starts a remote plugin process and returns the address it
// printed on its first line of stdout ("... on HOST:PORT" or "... port N").
func startServer(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 256)
		n, _ := stdout.Read(buf)
		line <- strings.TrimSpace(string(buf[:n]))
	}()
	select {
	case l := <-line:
		f := strings.Fields(l)
		if len(f) == 0 {
			t.Fatalf("%s printed nothing", name)
		}
		addr := f[len(f)-1]
		if !strings.Contains(addr, ":") {
			addr = "127.0.0.1:" + addr
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not print its address within 30s", name)
	}
	return ""
}

// TestProviderTestRemoteMTLS: `tide provider serve-sim --listen` with a
// server certificate and a client CA (mutual TLS), checked by `tide provider
// test --address` with a client certificate; without one, the test cannot
// even connect.
func TestProviderTestRemoteMTLS(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	k, err := plugintest.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, []string{"TIDE_CLI_TEST_MAIN=1"}, exe, "provider", "serve-sim", "--listen", "127.0.0.1:0",
		"--latency", "1s", "--tls-cert", k.ServerCert, "--tls-key", k.ServerKey, "--tls-ca", k.CA)
	code, out, errs := runTide(t, "provider", "test", "--address", addr, "--tls-ca", k.CA,
		"--tls-cert", k.ClientCert, "--tls-key", k.ClientKey)
	wantAllPassed(t, code, out, errs)
	if code, _, _ := runTide(t, "provider", "test", "--address", addr, "--tls-ca", k.CA); code != ExitError {
		t.Fatalf("without a client certificate: exit %d, want 1", code)
	}
}

// TestProviderTestPythonRemote: the Python example served remotely
// (--listen) passes the suite through --address.
func TestProviderTestPythonRemote(t *testing.T) {
	python, script := pythonPlugin(t)
	addr := startServer(t, nil, python, script, "--latency", "1", "--listen", "127.0.0.1:0",
		filepath.Join(t.TempDir(), "machines.json"))
	code, out, errs := runTide(t, "provider", "test", "--address", addr)
	wantAllPassed(t, code, out, errs)
}
