package jobfile

import (
	"encoding/json"
	"strings"
	"testing"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseAppliesEveryField(t *testing.T) {
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
max_wait = "30m"

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
	job, err := Parse(data, lookupFrom(map[string]string{"USER": "ada", "HOME": "/home/ada"}))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(job)
	want := `{"Command":"python train.py --msg 'it'\"'\"'s ada'","Name":"train-ada","Venv":"/opt/venv","Replicas":2,` +
		`"RestartPolicy":"on-failure","MaxRestarts":5,"Pool":"gpu","Daemon":true,"Restartable":true,"MaxWait":"30m","CPUCores":2.5,"GPUs":null,` +
		`"MemoryMB":1536,"GPUIndices":[0,2],"Exclusive":false,"TargetWorker":"node-${MISSING}",` +
		`"Env":{"HF_HOME":"/home/ada/hf","LITERAL":"$NOPE and $$"},"Labels":{"team":"nlp"}}`
	if string(got) != want {
		t.Fatalf("job = %s\nwant  %s", got, want)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
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
		{"bad max_wait", "command='x'\nmax_wait = 'soon'", "max_wait: want a duration"},
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
			_, err := Parse([]byte(tt.file), nil)
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
		if got := ShellJoin(tt.in); got != tt.want {
			t.Errorf("ShellJoin(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("command = 'echo hi'\n[resources]\ncpus = 1\nmemory = '1Gi'\n"))
	f.Add([]byte("command = ['a', 'b c']\nname = '$X'\n[env]\nK = '${Y}'\n[labels]\nl = 'v'\n"))
	f.Add([]byte("command = 'x'\n[resources]\ngpu_indices = [0, 1]\nexclusive = false\ntarget_worker = 'w'\n"))
	f.Add([]byte("command = 'x'\nreplicas = 3\nrestart_policy = 'always'\nmax_restarts = 2\npool = 'p'\ndaemon = true\n"))
	f.Add([]byte("[resources]\nmemory = 1e300\ncpus = -0.0\n"))
	f.Add([]byte("command = \"\\u0000\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := Parse(data, lookupFrom(map[string]string{"X": "x", "Y": "$Y"}))
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
