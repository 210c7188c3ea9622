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

	"github.com/tide-project/tide/internal/api"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseJobFileAppliesEveryField(t *testing.T) {
	data := []byte(`
command = ["python", "train.py", "--msg", "it's ${USER}"]
name = "train-$USER"
venv = "/opt/venv"
replicas = 2
restart_policy = "on-failure"
max_restarts = 5
pool = "gpu"
daemon = true
restartable = true

[resources]
cpus = 2.5
memory = "1.5Gi"
gpu_indices = [0, 2]
exclusive = false
target_worker = "node-${MISSING}"

[env]
HF_HOME = "${HOME}/hf"
LITERAL = "$NOPE and $$"

[labels]
team = "nlp"
`)
	job, err := ParseJobFile(data, lookupFrom(map[string]string{"USER": "ada", "HOME": "/home/ada"}))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(job)
	want := `{"Command":"python train.py --msg 'it'\"'\"'s ada'","Name":"train-ada","Venv":"/opt/venv","Replicas":2,` +
		`"RestartPolicy":"on-failure","MaxRestarts":5,"Pool":"gpu","Daemon":true,"Restartable":true,"CPUCores":2.5,"GPUs":null,` +
		`"MemoryMB":1536,"GPUIndices":[0,2],"Exclusive":false,"TargetWorker":"node-${MISSING}",` +
		`"Env":{"HF_HOME":"/home/ada/hf","LITERAL":"$NOPE and $$"},"Labels":{"team":"nlp"}}`
	if string(got) != want {
		t.Fatalf("job = %s\nwant  %s", got, want)
	}
}

func TestParseJobFileErrorsNameTheField(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unknown top-level key", `commnd = "x"`, `unknown key "commnd"`},
		{"unknown resource key", "command='x'\n[resources]\ngpu = 1", `unknown key "resources.gpu"`},
		{"gpus and gpu_indices", "command='x'\n[resources]\ngpus = 1\ngpu_indices = [0]", "mutually exclusive"},
		{"env value not a string", "command='x'\n[env]\nA = 1", "env.A: want a string, got an integer"},
		{"label value not a string", "command='x'\n[labels]\nA = true", "labels.A: want a string"},
		{"command of numbers", `command = [1]`, "command[0]: want a string"},
		{"empty command", `command = "  "`, "command: must not be empty"},
		{"bad memory", "command='x'\n[resources]\nmemory = '4Gb'", "resources.memory"},
		{"negative memory", "command='x'\n[resources]\nmemory = -1", "resources.memory"},
		{"bad cpus", "command='x'\n[resources]\ncpus = 'lots'", "resources.cpus"},
		{"negative gpus", "command='x'\n[resources]\ngpus = -2", "resources.gpus"},
		{"repeated index", "command='x'\n[resources]\ngpu_indices = [1, 1]", "index 1 repeats"},
		{"bad restart policy", "command='x'\nrestart_policy = 'sometimes'", "restart_policy"},
		{"restartable not a bool", "command='x'\nrestartable = 'yes'", "restartable"},
		{"replicas out of range", "command='x'\nreplicas = 0", "replicas: must be between 1 and 1000"},
		{"resources not a table", "command='x'\nresources = 3", "resources: want a table"},
		{"syntax error has a position", "command = 'x\n", "line 1"},
		{"empty file", " \n", "is empty"},
		{"nan cpus", "command='x'\n[resources]\ncpus = nan", "resources.cpus: must be a finite number, got NaN"},
		{"inf memory", "command='x'\n[resources]\nmemory = inf", "resources.memory: must be a finite number, got +Inf"},
		{"memory past any machine", "command='x'\n[resources]\nmemory = '9999999Ti'", "resources.memory: must be at most 1099511627776 MB"},
		{"gpus past any machine", "command='x'\n[resources]\ngpus = 9223372036854775807", "resources.gpus: must be at most 1048576 GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJobFile([]byte(tt.file), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestMemoryUnits(t *testing.T) {
	tests := []struct {
		in   any
		want int64
	}{
		{int64(512), 512}, {"512", 512}, {"2G", 2048}, {"2Gi", 2048}, {"300Mi", 300}, {"300M", 300},
		{"1024Ki", 1}, {"1K", 1}, {"1Ti", 1 << 20}, {"1T", 1 << 20}, {2.5, 3}, {"0.5Gi", 512},
	}
	for _, tt := range tests {
		got, err := parseMemoryMB("memory", tt.in)
		if err != nil || *got != tt.want {
			t.Errorf("parseMemoryMB(%v) = %v, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"python", "-m", "http.server", "8080"}, "python -m http.server 8080"},
		{[]string{"echo", "a b", ""}, "echo 'a b' ''"},
		{[]string{"echo", "it's"}, `echo 'it'"'"'s'`},
		{[]string{"sh", "-c", "echo $HOME; ls"}, `sh -c 'echo $HOME; ls'`},
	}
	for _, tt := range tests {
		if got := shellJoin(tt.in); got != tt.want {
			t.Errorf("shellJoin(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// captureHead answers submits and records their bodies.
func captureHead(t *testing.T) (*httptest.Server, *[]api.SubmitRequest) {
	t.Helper()
	var got []api.SubmitRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.SubmitRequest
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

func FuzzParseJobFile(f *testing.F) {
	f.Add([]byte("command = 'echo hi'\n[resources]\ncpus = 1\nmemory = '1Gi'\n"))
	f.Add([]byte("command = ['a', 'b c']\nname = '$X'\n[env]\nK = '${Y}'\n[labels]\nl = 'v'\n"))
	f.Add([]byte("command = 'x'\n[resources]\ngpu_indices = [0, 1]\nexclusive = false\ntarget_worker = 'w'\n"))
	f.Add([]byte("command = 'x'\nreplicas = 3\nrestart_policy = 'always'\nmax_restarts = 2\npool = 'p'\ndaemon = true\n"))
	f.Add([]byte("[resources]\nmemory = 1e300\ncpus = -0.0\n"))
	f.Add([]byte("command = \"\\u0000\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := ParseJobFile(data, lookupFrom(map[string]string{"X": "x", "Y": "$Y"}))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if job.Command != nil && strings.TrimSpace(*job.Command) == "" {
			t.Fatalf("accepted an empty command from %q", data)
		}
		if job.GPUs != nil && job.GPUIndices != nil {
			t.Fatalf("accepted gpus with gpu_indices from %q", data)
		}
		if job.MemoryMB != nil && *job.MemoryMB < 0 || job.CPUCores != nil && *job.CPUCores < 0 {
			t.Fatalf("accepted negative resources from %q", data)
		}
		if _, err := json.Marshal(job); err != nil {
			t.Fatalf("job does not marshal: %v", err)
		}
	})
}
