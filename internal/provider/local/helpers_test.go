//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/sdk/provider"
)

// The test binary doubles as a worker: run with LOCAL_TEST_WORKER=<mode>,
// it behaves as that mode says and never runs the tests.
const (
	envMode = "LOCAL_TEST_WORKER"
	envOut  = "LOCAL_TEST_OUT"
	envName = "LOCAL_TEST_NAME"
)

// Worker modes.
const (
	// modeGraceful writes <out>/<name>.terminated on SIGTERM and exits 0.
	modeGraceful = "graceful"
	// modeStubborn ignores SIGTERM.
	modeStubborn = "stubborn"
	// modeSpawn starts a child in its own process group (as the agent
	// starts instances), writes its pid to <out>/<name>.child, and exits on
	// SIGTERM leaving the child behind.
	modeSpawn = "spawn"
	// modeExit exits at once with status 3.
	modeExit = "exit"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode != "" {
		os.Exit(runWorker(mode, os.Getenv(envOut), os.Getenv(envName)))
	}
	os.Exit(m.Run())
}

// runWorker is the body of a test worker process. Each mode writes
// <out>/<name>.ready once its signal handling is in place.
func runWorker(mode, out, name string) int {
	write := func(suffix, content string) {
		if err := os.WriteFile(filepath.Join(out, name+suffix), []byte(content), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	term := make(chan os.Signal, 1)
	switch mode {
	case modeExit:
		return 3
	case modeGraceful, modeSpawn:
		signal.Notify(term, syscall.SIGTERM)
	case modeStubborn:
		signal.Ignore(syscall.SIGTERM)
	case "child":
		// The spawned child: the default SIGTERM action, lives until killed.
	default:
		fmt.Fprintf(os.Stderr, "unknown test worker mode %q\n", mode)
		return 2
	}
	if mode == modeSpawn {
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), envMode+"=child")
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		write(".child", strconv.Itoa(child.Process.Pid))
	}
	if mode != "child" {
		write(".ready", "")
	}
	select {
	case <-term:
		if mode == modeGraceful {
			write(".terminated", "")
		}
		return 0
	case <-time.After(time.Hour): // a worker process runs until stopped; this bounds a leak
		return 1
	}
}

// testOffering is the offering of the test providers.
var testOffering = capacity.Offering{Type: "t1", Kind: capacity.OnDemand,
	Resources: capacity.Resources{MilliCPU: 1000, Memory: 256 << 20}}

// helperCommand runs the test binary as a worker in mode, writing to out.
func helperCommand(mode, out string) func(Worker) (*exec.Cmd, error) {
	return func(w Worker) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envMode+"="+mode, envOut+"="+out, envName+"="+w.MachineID)
		return cmd, nil
	}
}

// readyFile is a Ready hook: the worker wrote <out>/<id>.ready.
func readyFile(out string) func(context.Context, Worker) error {
	return func(ctx context.Context, w Worker) error {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := os.Stat(filepath.Join(out, w.MachineID+".ready")); err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
	}
}

// rig is a provider under test with its worker mode and output directory.
type rig struct {
	t   *testing.T
	p   *Provider
	cfg Config
	out string
	seq uint64
	// epoch and controller of the rig's fences.
	epoch uint64
}

// newRig opens a provider whose workers run in mode, with the ready-file
// hook. On cleanup it shuts the provider down and checks that no process of
// the root is left.
func newRig(t *testing.T, mode string, tune func(*Config)) *rig {
	t.Helper()
	out := t.TempDir()
	cfg := Config{
		Root: filepath.Join(t.TempDir(), "root"), Command: helperCommand(mode, out), Ready: readyFile(out),
		Offerings:    []capacity.Offering{testOffering},
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		DrainTimeout: 10 * time.Second, KillTimeout: 10 * time.Second, ReadyTimeout: 20 * time.Second,
	}
	if tune != nil {
		tune(&cfg)
	}
	r := &rig{t: t, cfg: cfg, out: out, epoch: 1}
	r.p = r.open()
	return r
}

// open opens another Provider on the rig's root (a restart) and registers
// its shutdown and the leak check.
func (r *rig) open() *Provider {
	r.t.Helper()
	p, err := New(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			r.t.Errorf("shutdown: %v", err)
		}
		if pids, err := findMarked(MarkerEnv+"="+p.uid+"/", true); err != nil || len(pids) > 0 {
			r.t.Errorf("processes %v (%v) of the root outlive the provider", pids, err)
		}
	})
	return p
}

func (r *rig) fence() provider.Fence {
	r.seq++
	return provider.Fence{Controller: "test", Epoch: r.epoch, Seq: r.seq}
}

func (r *rig) ctx() context.Context { return r.t.Context() }

func (r *rig) create(id string) {
	r.t.Helper()
	ack, err := r.p.Create(r.ctx(), provider.CreateRequest{Fence: r.fence(), Pool: "p", MachineID: id, Offering: testOffering.Name()})
	if err != nil || ack.State != provider.Idle {
		r.t.Fatalf("create %s: %+v, %v", id, ack, err)
	}
}

func (r *rig) configure(id string) (provider.Ack, error) {
	return r.p.Configure(r.ctx(), provider.ConfigureRequest{Fence: r.fence(), Pool: "p", MachineID: id, Cluster: "c",
		Bootstrap: []byte(`{"version":1,"head":"http://127.0.0.1:1","token":"t"}`)})
}

func (r *rig) drain(id string) (provider.Ack, error) {
	return r.p.Drain(r.ctx(), provider.DrainRequest{Fence: r.fence(), Pool: "p", MachineID: id})
}

func (r *rig) delete(id string) (provider.Ack, error) {
	return r.p.Delete(r.ctx(), provider.DeleteRequest{Fence: r.fence(), Pool: "p", MachineID: id})
}

// up creates and configures machines and waits until they are Configured.
func (r *rig) up(ids ...string) {
	r.t.Helper()
	for _, id := range ids {
		r.create(id)
		if _, err := r.configure(id); err != nil {
			r.t.Fatal(err)
		}
	}
	r.wait()
	for _, id := range ids {
		r.want(id, provider.Configured)
	}
}

// wait waits for the provider's transitions, 30s at most.
func (r *rig) wait() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx(), 30*time.Second)
	defer cancel()
	if err := r.p.Wait(ctx); err != nil {
		r.t.Fatal(err)
	}
}

// want checks machine id's state and returns it.
func (r *rig) want(id string, state provider.State) provider.Machine {
	r.t.Helper()
	m, err := r.p.Get(r.ctx(), id)
	if err != nil {
		r.t.Fatalf("get %s: %v", id, err)
	}
	if m.State != state {
		r.t.Fatalf("machine %s is %s (%s), want %s", id, m.State, m.Reason, state)
	}
	if err := m.Check(); err != nil {
		r.t.Fatal(err)
	}
	return m
}

// pid returns the pid of machine id's worker process.
func (r *rig) pid(id string) int {
	r.t.Helper()
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	m := r.p.machines[id]
	if m == nil || m.proc == nil {
		r.t.Fatalf("machine %s has no worker process", id)
	}
	return m.proc.pid
}

// childPID reads the pid the spawn-mode worker of id wrote.
func (r *rig) childPID(id string) int {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.out, id+".child"))
	if err != nil {
		r.t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		r.t.Fatal(err)
	}
	return pid
}

func (r *rig) terminated(id string) bool {
	_, err := os.Stat(filepath.Join(r.out, id+".terminated"))
	return err == nil
}

// exists reports whether kill(pid, 0) finds the process (a zombie included).
func exists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// dead reports whether pid is gone, or is a zombie whose parent is not this
// process (an orphan waiting for init to reap it: it runs nothing).
func dead(pid int) bool {
	if !exists(pid) {
		return true
	}
	st, _, err := procStat(pid)
	return err != nil || st == 'Z' || st == 'X'
}

// eventually polls cond every 10ms until it holds, failing after 15s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: %s", what)
		}
		<-tick.C
	}
}
