package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// mustRun runs the CLI and fails the test unless it exits with want.
func mustRun(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out, errs := runCLI(args...)
	if code != want {
		t.Fatalf("tide %s: exit %d, want %d; stdout %q stderr %q", strings.Join(args, " "), code, want, out, errs)
	}
	return out
}

func getJSON(t *testing.T, ref string) httpapi.InstanceJSON {
	t.Helper()
	var in httpapi.InstanceJSON
	if err := json.Unmarshal([]byte(mustRun(t, ExitOK, "get", ref, "-o", "json")), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestSubmitKeepsArgumentBoundaries is issue 17's second bug: with the
// arguments joined by spaces, `tide submit -- sh -c 'exit 3'` stored
// "sh -c exit 3", which exits 0, and `-- sh -c 'echo one two'` printed an
// empty line. Several arguments are now shell-quoted one by one (PyLet's
// client does shlex.join for a list); one argument stays a shell string.
func TestSubmitKeepsArgumentBoundaries(t *testing.T) {
	t.Setenv("TIDE_HEAD", runtimeCluster(t))
	t.Setenv("TIDE_TOKEN", "tok")
	exit3 := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "sh", "-c", "exit 3"))
	echo := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "sh", "-c", "echo one two"))
	quote := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "printf", "%s|", "it's", "a b", "$HOME"))
	shell := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "echo $((1+2)) | tr 3 x"))

	if out := mustRun(t, ExitError, "result", exit3, "--wait", "--poll", "20ms"); !strings.Contains(out, "FAILED exit_code=3") {
		t.Fatalf("sh -c 'exit 3': %q", out)
	}
	if got := getJSON(t, exit3).Command; got != "sh -c 'exit 3'" {
		t.Fatalf("stored command %q", got)
	}
	for id, want := range map[string]string{echo: "one two\n", quote: "it's|a b|$HOME|", shell: "x\n"} {
		mustRun(t, ExitOK, "result", id, "--wait", "--poll", "20ms")
		if out := mustRun(t, ExitOK, "logs", id); out != want {
			t.Errorf("%s: output %q, want %q", getJSON(t, id).Command, out, want)
		}
	}
	if help := mustRun(t, ExitOK, "submit", "--help"); !strings.Contains(help, "shell-quoted") {
		t.Fatalf("submit --help does not say how arguments are kept:\n%s", help)
	}
}

// TestExitCodesFollowOneRule: 0 success, 1 the operation failed (tide result
// of a FAILED or CANCELLED instance too), 2 bad input (tide up's bad config
// as well), 3 no head answers, with a hint to start one.
func TestExitCodesFollowOneRule(t *testing.T) {
	url := runtimeCluster(t)
	t.Setenv("TIDE_HEAD", url)
	t.Setenv("TIDE_TOKEN", "tok")
	done := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--name", "fine", "--", "true"))
	failed := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "exit 4"))
	long := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--name", "long", "--", "exec sleep 60"))
	mustRun(t, ExitOK, "result", done, "--wait", "--poll", "20ms")
	mustRun(t, ExitError, "result", failed, "--wait", "--poll", "20ms")
	mustRun(t, ExitOK, "result", long) // not finished yet, without --wait
	mustRun(t, ExitOK, "cancel", "long", "--grace-period", "50ms")
	out := mustRun(t, ExitError, "result", "long", "--wait", "--poll", "20ms")
	// result and get agree on a cancelled instance's exit code.
	in := getJSON(t, "long")
	if in.ExitCode == nil || !strings.Contains(out, "CANCELLED exit_code="+itoa(*in.ExitCode)) {
		t.Fatalf("result %q, get exit code %v", out, in.ExitCode)
	}
	var r struct {
		ExitCode *int `json:"exit_code"`
	}
	if code, js, _ := runCLI("result", "long", "-o", "json"); code != ExitError || json.Unmarshal([]byte(js), &r) != nil ||
		r.ExitCode == nil || *r.ExitCode != *in.ExitCode {
		t.Fatalf("result -o json of a cancelled instance: exit %d, %s", code, js)
	}

	mustRun(t, ExitUsage, "ls", "--status", "sleeping")
	mustRun(t, ExitUsage, "submit", "--cpu-cores", "-1", "--", "true")
	mustRun(t, ExitUsage, "get", "no-such-instance")
	mustRun(t, ExitError, "ls", "--token", "wrong")

	bad := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(bad, []byte("pools:\n  - name: x\n    provider: {type: local}\n    nodes: [3, 1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "fresh")
	mustRun(t, ExitUsage, "up", "--config", bad, "--data-dir", data, "--port", "0")
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused config created the data dir: %v", err)
	}

	for _, args := range [][]string{{"ls", "--head", "http://127.0.0.1:1"}, {"get", "x", "--head", "http://127.0.0.1:1"},
		{"submit", "--head", "127.0.0.1:1", "--", "true"}, {"pools", "--head", "http://127.0.0.1:1"}} {
		code, _, errs := runCLI(args...)
		if code != ExitUnreachable || !strings.Contains(errs, "cannot reach the head at http://127.0.0.1:1") ||
			!strings.Contains(errs, "tide up") || !strings.Contains(errs, "TIDE_HEAD") {
			t.Errorf("tide %s: exit %d, stderr %q; want %d and a hint", strings.Join(args, " "), code, errs, ExitUnreachable)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestInstancesByIDOrName: get, logs, cancel and result take a name as well
// as an id (ids first, then names); get prints labels and env as k=v.
func TestInstancesByIDOrName(t *testing.T) {
	t.Setenv("TIDE_HEAD", runtimeCluster(t))
	t.Setenv("TIDE_TOKEN", "tok")
	id := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--name", "greet", "--label", "app=demo", "--label", "tier=web",
		"--env", "WHO=world", "--", "echo hello $WHO"))
	mustRun(t, ExitOK, "result", "greet", "--wait", "--poll", "20ms")
	if out := mustRun(t, ExitOK, "logs", "greet"); out != "hello world\n" {
		t.Fatalf("logs by name: %q", out)
	}
	out := mustRun(t, ExitOK, "get", "greet")
	for _, want := range []string{"id:", id, "labels:", "app=demo,tier=web", "env:", "WHO=world"} {
		if !strings.Contains(out, want) {
			t.Errorf("get by name lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "map[") {
		t.Errorf("get prints a Go map:\n%s", out)
	}
	// An instance named like another's id: the id wins.
	twin := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--name", id, "--", "true"))
	if got := getJSON(t, id).InstanceID; got != id {
		t.Fatalf("get %s resolved to %s, want the instance with that id", id, got)
	}
	mustRun(t, ExitOK, "result", twin, "--wait", "--poll", "20ms")
	mustRun(t, ExitOK, "submit", "--name", "nap", "--", "exec sleep 60")
	if out := mustRun(t, ExitOK, "cancel", "nap", "--grace-period", "50ms"); !strings.HasPrefix(out, "cancelling ") {
		t.Fatalf("cancel by name: %q", out)
	}
	// An unnamed instance shows "-" as its name, never a made-up one.
	anon := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--", "true"))
	if in := getJSON(t, anon); in.Name != nil {
		t.Fatalf("unnamed instance reads back name %q", *in.Name)
	}
	mustRun(t, ExitUsage, "get", anon[:8])
}

// TestWaitingWorkShowsWhyInTheCLI: `tide ls` has a REASON column and
// `tide get` a waiting line for work that cannot be placed; --pool naming no
// pool is refused (exit 2).
func TestWaitingWorkShowsWhyInTheCLI(t *testing.T) {
	t.Setenv("TIDE_HEAD", runtimeCluster(t))
	t.Setenv("TIDE_TOKEN", "tok")
	id := strings.TrimSpace(mustRun(t, ExitOK, "submit", "--name", "huge", "--cpu-cores", "4", "--", "true"))
	var why string
	for deadline := time.Now().Add(10 * time.Second); why == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		why = getJSON(t, id).WaitingReason
	}
	if want := "no pool can fit cpu 4: largest worker w1 has 2"; why != want {
		t.Fatalf("waiting_reason %q, want %q", why, want)
	}
	ls := mustRun(t, ExitOK, "ls")
	if !strings.Contains(strings.SplitN(ls, "\n", 2)[0], "REASON") || !strings.Contains(ls, why) {
		t.Fatalf("ls lacks the reason %q:\n%s", why, ls)
	}
	if out := mustRun(t, ExitOK, "get", "huge"); !strings.Contains(out, "waiting:") || !strings.Contains(out, why) {
		t.Fatalf("get lacks the reason %q:\n%s", why, out)
	}
	code, _, errs := runCLI("submit", "--pool", "nosuchpool", "--", "true")
	if code != ExitUsage || !strings.Contains(errs, `pool "nosuchpool" does not exist`) {
		t.Fatalf("submit --pool nosuchpool: exit %d, %q", code, errs)
	}
}
