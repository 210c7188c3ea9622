package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/httpapi"
)

// captureHead answers submits and records their bodies.
func captureHead(t *testing.T) (*httptest.Server, *[]httpapi.SubmitRequest) {
	t.Helper()
	var got []httpapi.SubmitRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req httpapi.SubmitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode: %v", err)
		}
		got = append(got, req)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"instance_id":"id-1"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// TestSubmitPrecedence: flags on the command line win over the job file,
// which wins over the defaults; every field of the file reaches the head
// (PyLet applies only five of them).
func TestSubmitPrecedence(t *testing.T) {
	srv, got := captureHead(t)
	job := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(job, []byte(`
command = "python serve.py"
name = "from-file"
[resources]
cpus = 4
gpus = 2
memory = "8Gi"
exclusive = false
target_worker = "w-file"
[env]
A = "file"
B = "file"
[labels]
team = "file"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("submit", "--head", srv.URL, "-c", job, "--cpu-cores", "0.5", "--env", "B=flag",
		"--label", "extra=1", "--target-worker", "w-flag")
	if code != 0 || out != "id-1\n" {
		t.Fatalf("exit %d, out %q, err %q", code, out, errs)
	}
	r := (*got)[0]
	b, _ := json.Marshal(r)
	want := `{"command":"python serve.py","resource_requirements":{"cpu_cores":0.5,"gpu_units":2,"memory_mb":8192},` +
		`"name":"from-file","target_worker":"w-flag","exclusive":false,"labels":{"extra":"1","team":"file"},` +
		`"env":{"A":"file","B":"flag"}}`
	if string(b) != want {
		t.Fatalf("request = %s\nwant      %s", b, want)
	}
	// Arguments replace the file's command; flags after the command are the command's.
	if code, _, errs := runCLI("submit", "--head", srv.URL, "-c", job, "--no-exclusive", "--", "echo", "--cpu-cores", "9"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	r = (*got)[1]
	if *r.Command != "echo --cpu-cores 9" || *r.ResourceRequirements.CPUCores != 4 || *r.Exclusive {
		t.Fatalf("second request: %+v", r)
	}
	// Without a file nothing but the command is sent: the head applies
	// PyLet's defaults.
	if code, _, errs := runCLI("submit", "--head", srv.URL, "sleep", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, _ = json.Marshal((*got)[2])
	if string(b) != `{"command":"sleep 1","resource_requirements":{}}` {
		t.Fatalf("default request = %s", b)
	}
}

func TestSubmitInputErrorsExitTwo(t *testing.T) {
	srv, got := captureHead(t)
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("command = 'x'\n[resources]\ngpus = 'two'\n"), 0o600)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"submit"}, "no command"},
		{"bad job file", []string{"submit", "-c", bad}, "resources.gpus"},
		{"missing job file", []string{"submit", "-c", "/nonexistent.toml"}, "-c:"},
		{"bad label", []string{"submit", "--label", "novalue", "true"}, "--label"},
		{"bad gpu indices", []string{"submit", "--gpu-indices", "0,x", "true"}, "--gpu-indices"},
		{"contradiction", []string{"submit", "--exclusive", "--no-exclusive", "true"}, "contradict"},
		{"bad output", []string{"submit", "-o", "yaml", "true"}, "-o"},
		{"negative cpu", []string{"submit", "--cpu-cores", "-1", "true"}, "--cpu-cores"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Flags after the command belong to it: --head goes first.
			code, _, errs := runCLI(append([]string{tt.args[0], "--head", srv.URL}, tt.args[1:]...)...)
			if code != ExitUsage || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 mentioning %q", code, errs, tt.want)
			}
		})
	}
	if len(*got) != 0 {
		t.Fatalf("%d requests reached the head", len(*got))
	}
}

// TestSubmitGangAndPriority: --replicas 4 --gang sends a gang of the
// replicas; --priority and --gang-max-wait reach the head.
func TestSubmitGangAndPriority(t *testing.T) {
	srv, got := captureHead(t)
	if code, _, errs := runCLI("submit", "--head", srv.URL, "--replicas", "4", "--gang", "--priority", "-2",
		"--gang-max-wait", "5m", "--name", "train", "sleep", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, _ := json.Marshal((*got)[0])
	want := `{"command":"sleep 1","resource_requirements":{},"name":"train","replicas":4,"priority":-2,"gang":{"max_wait":"5m"}}`
	if string(b) != want {
		t.Fatalf("request = %s\nwant      %s", b, want)
	}
	if code, _, errs := runCLI("submit", "--head", srv.URL, "sleep", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if b, _ = json.Marshal((*got)[1]); strings.Contains(string(b), "gang") || strings.Contains(string(b), "priority") {
		t.Fatalf("plain submit sends %s", b)
	}
}
