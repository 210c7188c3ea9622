package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks returns the README's fenced blocks of one language, in order.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	return out
}

// commands splits a shell block into commands without their comments.
func commands(block string) []string {
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// upProcess is a `tide up` the test started; its output is collected.
type upProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	line chan string // the first line of its standard output
	done chan error
}

func (u *upProcess) output() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.out.String()
}

func startTideUp(t *testing.T, args ...string) *upProcess {
	t.Helper()
	u := &upProcess{cmd: exec.Command(tideBin, append([]string{"up"}, args...)...), line: make(chan string, 1),
		done: make(chan error, 1)}
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.out.Write(p)
	})
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				u.line <- sc.Text()
				first = false
			}
			u.mu.Lock()
			u.out.WriteString(sc.Text() + "\n")
			u.mu.Unlock()
		}
		u.done <- u.cmd.Wait()
	}()
	t.Cleanup(func() {
		// Whatever happened, nothing it started outlives the test.
		syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-u.done:
		case <-time.After(10 * time.Second):
		}
	})
	return u
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReadmeFirstHour runs the README's first command (tide up, on a fresh
// data dir and a free port instead of ~/.tide and 8000) and then every
// command of its "in another terminal" block as written, with TIDE_HEAD
// pointing at that head: the build, the submits, pools, nodes and
// events -f. It checks the line tide up prints, that the submitted work
// runs on workers the pool starts, and that Ctrl-C stops tide up.
func TestReadmeFirstHour(t *testing.T) {
	blocks := readmeBlocks(t, "sh")
	if len(blocks) < 2 {
		t.Fatalf("README has %d sh blocks", len(blocks))
	}
	first := commands(blocks[0])
	if len(first) != 2 || first[0] != "go run ./cmd/tide up" || first[1] != "./scripts/test" {
		t.Fatalf("README's two commands changed: %q", first)
	}
	// The "in another terminal" block: the first after the two commands that
	// builds tide (the Install section's block comes between them).
	var steps []string
	for _, b := range blocks[1:] {
		if c := commands(b); len(c) > 0 && c[0] == "go build -o tide ./cmd/tide" {
			steps = c
			break
		}
	}
	if len(steps) == 0 {
		t.Fatalf("README has no other-terminal block starting with go build -o tide ./cmd/tide")
	}

	dir := t.TempDir()
	port := freePort(t)
	up := startTideUp(t, "--data-dir", filepath.Join(dir, "fresh"), "--port", fmt.Sprint(port))
	select {
	case line := <-up.line:
		want := fmt.Sprintf("tide is up: head at http://127.0.0.1:%d (port %d);", port, port)
		if !strings.HasPrefix(line, want) || !strings.Contains(line, "tide pools") {
			t.Fatalf("tide up printed %q, want it to start %q and name `tide pools`", line, want)
		}
	case err := <-up.done:
		t.Fatalf("tide up exited: %v\n%s", err, up.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("tide up printed nothing\n%s", up.output())
	}

	bin := filepath.Join(dir, "tide")
	env := append(os.Environ(), fmt.Sprintf("TIDE_HEAD=http://127.0.0.1:%d", port), "TIDE_TOKEN=")
	run := func(ctx context.Context, line string) (string, error) {
		t.Helper()
		args := strings.Fields(line)
		var cmd *exec.Cmd
		switch {
		case args[0] == "go": // the build, from the repository's root, into dir
			args[3] = bin
			cmd = exec.CommandContext(ctx, "go", args[1:]...)
			cmd.Dir = filepath.Join("..", "..")
		case args[0] == "./tide":
			cmd = exec.CommandContext(ctx, bin, args[1:]...)
		default:
			t.Fatalf("README step %q is neither the build nor ./tide", line)
		}
		cmd.Env = env
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // Ctrl-C
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	var ids []string
	var follow string
	for _, line := range steps {
		if strings.Contains(line, "events -f") {
			follow = line
			continue // run last, as a user watching would stop it with Ctrl-C
		}
		reps := 1
		if strings.Contains(line, " submit ") {
			reps = 3 // "repeat it a few times"
		}
		for range reps {
			out, err := run(context.Background(), line)
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			if strings.Contains(line, " submit ") {
				ids = append(ids, strings.TrimSpace(out))
			}
			t.Logf("$ %s\n%s", line, out)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("submitted %q", ids)
	}
	// The pool starts workers and the work runs to completion.
	for _, id := range ids {
		out, err := run(context.Background(), "./tide result --wait --poll 200ms "+id)
		if err != nil || !strings.Contains(out, "COMPLETED exit_code=0") {
			t.Fatalf("result %s: %v\n%s\ntide up:\n%s", id, err, out, up.output())
		}
	}
	out, err := run(context.Background(), "./tide pools")
	if err != nil || !strings.Contains(out, "local") || !strings.Contains(out, "LAST DECISION") {
		t.Fatalf("pools: %v\n%s", err, out)
	}
	out, err = run(context.Background(), "./tide nodes")
	if err != nil || !strings.Contains(out, "local") {
		t.Fatalf("nodes: %v\n%s", err, out)
	}
	if follow == "" {
		t.Fatal("README's block has no `tide events -f`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	out, _ = run(ctx, follow)
	cancel()
	for _, want := range []string{"NODE", "local", "provision", "joined"} {
		if !strings.Contains(out, want) {
			t.Fatalf("%s lacks %q:\n%s", follow, want, out)
		}
	}
	t.Logf("$ %s\n%s", follow, out)
	// Reasons share one style (kebab-case codes); a machine's events name
	// their node.
	kebab := regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		if reason, node := f[5], f[6]; !kebab.MatchString(reason) {
			t.Errorf("event reason %q is not a kebab-case code: %s", reason, line)
		} else if (reason == "launched" || reason == "joined") && !strings.HasPrefix(node, "local-") {
			t.Errorf("event of a machine names node %q: %s", node, line)
		}
	}

	// Ctrl-C stops tide up.
	if err := up.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("tide up did not stop on Ctrl-C\n%s", up.output())
	}
}

// TestReadmeLocalPoolConfig runs `tide up --config` on the README's local
// pool configuration: it loads, its offering starts workers, and work runs.
func TestReadmeLocalPoolConfig(t *testing.T) {
	var cfg string
	for _, b := range readmeBlocks(t, "yaml") {
		if strings.Contains(b, "type: local}") {
			cfg = b
		}
	}
	if cfg == "" {
		t.Fatal("README shows no local pool configuration")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "local.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	up := startTideUp(t, "--config", path, "--data-dir", filepath.Join(dir, "data"), "--port", fmt.Sprint(port))
	select {
	case <-up.line:
	case err := <-up.done:
		t.Fatalf("tide up --config exited: %v\n%s", err, up.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("tide up printed nothing\n%s", up.output())
	}
	head := fmt.Sprintf("http://127.0.0.1:%d", port)
	out, err := exec.Command(tideBin, "submit", "--head", head, "--", "echo", "hi").CombinedOutput()
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	out, err = exec.Command(tideBin, "result", "--head", head, "--wait", "--poll", "200ms", id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "COMPLETED exit_code=0") {
		t.Fatalf("result: %v\n%s\ntide up:\n%s", err, out, up.output())
	}
	if err := up.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("tide up did not stop on Ctrl-C\n%s", up.output())
	}
}
