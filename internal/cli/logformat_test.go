package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestJSONLogsOfHeadAndWorker: with --log-format json every line the head
// and a worker write is one JSON object with time, level, msg and
// component, including the lines that say where they are.
func TestJSONLogsOfHeadAndWorker(t *testing.T) {
	h := startDaemon(t, "head", "--port", "0", "--data-dir", t.TempDir(), "--token", "tok", "--log-format", "json")
	url := headURL(t, h)
	w := startDaemon(t, "worker", "--head", url, "--token", "tok", "--name", "w1", "--data-dir", t.TempDir(),
		"--cpu", "1", "--memory", "1Gi", "--log-format", "json", "--log-level", "debug")
	waitUntil(t, 20*time.Second, "the worker's joined record", func() bool {
		return strings.Contains(w.stderr.String(), `"msg":"tide worker w1 joined `+url)
	})
	w.shutdown(t)
	h.shutdown(t)
	for name, d := range map[string]*daemon{"head": h, "worker": w} {
		lines := strings.Split(strings.TrimSpace(d.stderr.String()), "\n")
		if len(lines) < 2 {
			t.Errorf("%s wrote %d lines, want its announcement and more:\n%s", name, len(lines), d.stderr.String())
		}
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%s: not a JSON line: %q", name, line)
				continue
			}
			for _, k := range []string{"time", "level", "msg", "component"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("%s: line lacks %q: %s", name, k, line)
				}
			}
		}
	}
	if !strings.Contains(h.stderr.String(), `"component":"head"`) || !strings.Contains(w.stderr.String(), `"component":"worker"`) {
		t.Errorf("components not named:\nhead:\n%s\nworker:\n%s", h.stderr.String(), w.stderr.String())
	}
}

// TestEveryLongRunningCommandTakesLogFormat: each refuses an unknown
// format before it starts anything (exit 2, naming the flag).
func TestEveryLongRunningCommandTakesLogFormat(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"head", "--data-dir", dir + "/h"},
		{"worker", "--head", "http://127.0.0.1:1", "--data-dir", dir + "/w"},
		{"up", "--data-dir", dir + "/u"},
		{"kube", "--kubeconfig", dir + "/none"},
		{"kube", "node", "--bootstrap", dir + "/none"},
		{"fleet", "coordinator", "--etcd", "http://127.0.0.1:1"},
		{"fleet", "shard", "--etcd", "http://127.0.0.1:1", "--shard", "1"},
	} {
		code, _, errs := runCLI(append(args, "--log-format", "yaml")...)
		if code != ExitUsage || !strings.Contains(errs, "--log-format: want text or json") {
			t.Errorf("tide %s --log-format yaml: exit %d, stderr %q", strings.Join(args, " "), code, errs)
		}
	}
}

// TestTokenFiles: the head reads its admin and join tokens from files
// (systemd credentials), a worker its join token; the tokens work, and an
// empty file or a token given twice is refused.
func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	admin := writeFile(t, dir, "admin-token", "adm-secret\n")
	join := writeFile(t, dir, "join-token", "join-secret\n")
	h := startDaemon(t, "head", "--port", "0", "--data-dir", t.TempDir(), "--token-file", admin, "--join-token-file", join)
	url := headURL(t, h)
	if code, _, _ := runCLI("pools", "--head", url, "--token", "wrong"); code != ExitError {
		t.Errorf("a wrong token: exit %d, want 1", code)
	}
	mustCLI(t, "pools", "--head", url, "--token", "adm-secret")
	w := startDaemon(t, "worker", "--head", url, "--join-token-file", join, "--name", "w1", "--data-dir", t.TempDir(), "--cpu", "1", "--memory", "1Gi")
	waitUntil(t, 20*time.Second, "the worker joined", func() bool { return strings.Contains(w.stderr.String(), "tide worker w1 joined") })

	empty := writeFile(t, dir, "empty", "\n")
	for _, args := range [][]string{
		{"head", "--data-dir", dir + "/h1", "--token-file", empty},
		{"head", "--data-dir", dir + "/h2", "--token", "x", "--token-file", admin},
		{"worker", "--data-dir", dir + "/w", "--join-token-file", dir + "/missing"},
	} {
		if code, _, errs := runCLI(args...); code != ExitUsage || !strings.Contains(errs, "token-file") {
			t.Errorf("tide %s: exit %d, stderr %q; want 2 naming the flag", strings.Join(args, " "), code, errs)
		}
	}
}
