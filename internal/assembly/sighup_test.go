package assembly

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

// tideBin is the tide binary, built once for the tests that run it.
var tideBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tide-assembly-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tideBin = filepath.Join(dir, "tide")
	if out, err := exec.Command("go", "build", "-o", tideBin, "github.com/tide-project/tide/cmd/tide").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tide: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	awstest.StopMoto()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestSIGHUPReloadsARealHead runs `tide head --config` as a process and
// sends it real SIGHUPs: a changed file swaps a pool for another, an invalid
// one is refused (the head keeps running its pools and records why), and
// SIGTERM then stops it cleanly.
func TestSIGHUPReloadsARealHead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	write := func(pools ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("pools:\n"+strings.Join(pools, "")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(simPool("first", "1", ""))
	port := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "head.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(tideBin, "head", "--config", path, "--data-dir", filepath.Join(dir, "data"),
		"--port", fmt.Sprint(port), "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	logText := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	pools := func() []string {
		ps, err := cl.Pools(context.Background())
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, p := range ps {
			if p.Managed {
				out = append(out, fmt.Sprintf("%s:%d", p.Name, p.Ready))
			}
		}
		return out
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if cond() {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("tide head exited (%v) while waiting for %s\n%s", err, what, logText())
			case <-time.After(100 * time.Millisecond):
			}
		}
		t.Fatalf("%s: not within 30s; pools %v\n%s", what, pools(), logText())
	}
	eventually("pool first runs its node", func() bool { return slices.Equal(pools(), []string{"first:1"}) })

	write(simPool("second", "2", ""))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually("SIGHUP swaps first for second", func() bool { return slices.Equal(pools(), []string{"second:2"}) })

	write(simPool("second", "2", ""), "  - name: third\n    provider: {type: sim}\n    nodes: 1\n    offerings: []\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var rejected string
	eventually("the invalid file is refused with an event", func() bool {
		evs, err := cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Reason == ReasonConfigRejected {
				rejected = e.Message
				return true
			}
		}
		return false
	})
	for _, want := range []string{path, `pool "third"`, "offerings"} {
		if !strings.Contains(rejected, want) {
			t.Errorf("the rejection %q does not name %q", rejected, want)
		}
	}
	if !strings.Contains(logText(), "config refused") {
		t.Errorf("the refusal is not logged:\n%s", logText())
	}
	if got := pools(); !slices.Equal(got, []string{"second:2"}) {
		t.Errorf("after the refused reload the pools are %v, want [second:2]", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("tide head exited with %v after SIGTERM\n%s", err, logText())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tide head did not stop within 30s of SIGTERM\n%s", logText())
	}
}
