//go:build linux

package local

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestConformance runs the provider contract's suite on real processes
// (`sleep 3600` workers). The actuators are gated: transitions accepted
// between two Settles stay observable in their transitional state, and
// Settle lets them all finish, as a fake clock does for the simulator.
func TestConformance(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary:", err)
	}
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		g := newGate()
		p, err := newProvider(Config{
			Root: t.TempDir(),
			Command: func(Worker) (*exec.Cmd, error) {
				return exec.Command(sleep, "3600"), nil
			},
			Offerings: []capacity.Offering{testOffering, {Type: "t2", Kind: capacity.OnDemand, Resources: capacity.CPU(2000)}},
			Logger:    slog.New(slog.NewTextHandler(t.Output(), nil)),
		}, g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if pids, err := findMarked(MarkerEnv+"="+p.uid+"/", true); err != nil || len(pids) > 0 {
				t.Errorf("processes %v (%v) outlive the provider", pids, err)
			}
		})
		return providertest.Harness{
			Provider: p,
			Offering: testOffering.Name(),
			Settle: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				g.set(true)
				defer g.set(false)
				if err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

// TestDrainIsGraceful: Drain sends SIGTERM, the worker exits on its own,
// and the machine is Idle, unbound, with its process reaped.
func TestDrainIsGraceful(t *testing.T) {
	r := newRig(t, modeGraceful, nil)
	r.up("m1")
	pid := r.pid("m1")
	if ack, err := r.drain("m1"); err != nil || ack.State != provider.Draining {
		t.Fatalf("drain: %+v, %v", ack, err)
	}
	r.wait()
	m := r.want("m1", provider.Idle)
	if m.Cluster != "" || m.Bootstrap != nil {
		t.Fatalf("drained machine still bound: %+v", m)
	}
	if !r.terminated("m1") {
		t.Fatal("the worker did not get SIGTERM (no .terminated file)")
	}
	if exists(pid) {
		t.Fatalf("worker %d still exists after the drain", pid)
	}
	// Idle is the hub: the machine runs a new worker when configured again.
	if _, err := r.configure("m1"); err != nil {
		t.Fatal(err)
	}
	r.wait()
	r.want("m1", provider.Configured)
	if again := r.pid("m1"); again == pid {
		t.Fatalf("reconfigured machine reports the old pid %d", pid)
	}
}

// TestStartDelay: with Config.StartDelay a configured machine boots
// slowly: its worker process starts only once the delay has passed on the
// provider's clock (Configuring until then, no process), and a Drain or a
// Delete during the delay ends the boot with no process ever started.
func TestStartDelay(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := newRig(t, modeGraceful, func(c *Config) { c.StartDelay = 10 * time.Minute; c.Clock = clk })
	booting := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			r.create(id)
			if ack, err := r.configure(id); err != nil || ack.State != provider.Configuring {
				t.Fatalf("configure %s: %+v, %v", id, ack, err)
			}
		}
		eventually(t, "every machine waits for its boot", func() bool { return clk.Waiters() >= len(ids) })
	}
	booting("m1", "m2", "m3")
	clk.Advance(10*time.Minute - time.Second)
	for _, id := range []string{"m1", "m2", "m3"} {
		r.want(id, provider.Configuring)
		r.p.mu.Lock()
		started := r.p.machines[id].proc != nil
		r.p.mu.Unlock()
		if started {
			t.Fatalf("%s started its worker before its start delay passed", id)
		}
	}
	// Cancelled while booting: no process, ever.
	if ack, err := r.drain("m2"); err != nil || ack.State != provider.Draining {
		t.Fatalf("drain: %+v, %v", ack, err)
	}
	if ack, err := r.delete("m3"); err != nil || ack.State != provider.Deleting {
		t.Fatalf("delete: %+v, %v", ack, err)
	}
	eventually(t, "the drained and deleted machines settle", func() bool {
		m, err := r.p.Get(r.ctx(), "m2")
		_, gone := r.p.Get(r.ctx(), "m3")
		return err == nil && m.State == provider.Idle && provider.IsNotFound(gone)
	})
	clk.Advance(time.Second)
	r.wait()
	r.want("m1", provider.Configured)
	if pid := r.pid("m1"); !exists(pid) {
		t.Fatalf("m1's worker %d does not run", pid)
	}
	for _, id := range []string{"m2", "m3"} {
		if _, err := os.Stat(filepath.Join(r.out, id+".ready")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s, cancelled while booting, started a worker (%v)", id, err)
		}
	}
}

// TestDrainEscalatesToSIGKILL: a worker that ignores SIGTERM is killed once
// DrainTimeout has passed, not before.
func TestDrainEscalatesToSIGKILL(t *testing.T) {
	const grace = 300 * time.Millisecond
	r := newRig(t, modeStubborn, func(c *Config) { c.DrainTimeout = grace })
	r.up("m1")
	pid := r.pid("m1")
	start := time.Now()
	if _, err := r.drain("m1"); err != nil {
		t.Fatal(err)
	}
	r.wait()
	if took := time.Since(start); took < grace {
		t.Fatalf("drain took %s, less than the %s grace period", took, grace)
	}
	r.want("m1", provider.Idle)
	if exists(pid) {
		t.Fatalf("stubborn worker %d survived the drain", pid)
	}
}

// TestDeleteLeavesNoProcess: Delete kills the worker and what it started
// (even in another process group), removes the machine's files and keeps a
// tombstone, so the id is never reused.
func TestDeleteLeavesNoProcess(t *testing.T) {
	r := newRig(t, modeSpawn, nil)
	r.up("m1")
	pid, child := r.pid("m1"), r.childPID("m1")
	if !exists(child) {
		t.Fatalf("the worker's child %d does not run", child)
	}
	if ack, err := r.delete("m1"); err != nil || ack.State != provider.Deleting {
		t.Fatalf("delete: %+v, %v", ack, err)
	}
	r.wait()
	if _, err := r.p.Get(r.ctx(), "m1"); !provider.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
	if exists(pid) {
		t.Fatalf("kill(%d, 0) finds the deleted machine's worker", pid)
	}
	eventually(t, "the worker's child is gone", func() bool { return dead(child) })
	if _, err := os.Stat(r.p.DataDir("m1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir after delete: %v", err)
	}
	_, err := r.p.Create(r.ctx(), provider.CreateRequest{Fence: r.fence(), Pool: "p", MachineID: "m1", Offering: testOffering.Name()})
	if !provider.IsConflict(err) {
		t.Fatalf("create of a deleted id: %v, want Conflict", err)
	}
	if _, err := r.delete("m1"); !provider.IsNotFound(err) {
		t.Fatalf("delete of a deleted machine: %v, want NotFound", err)
	}
}

// TestDeadWorkerFails: a worker killed with SIGKILL, or one that exits by
// itself, shows as Failed with the reason, so the controller replaces it.
func TestDeadWorkerFails(t *testing.T) {
	r := newRig(t, modeGraceful, nil)
	r.up("m1")
	pid := r.pid("m1")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var m provider.Machine
	eventually(t, "the killed worker's machine is Failed", func() bool {
		m, _ = r.p.Get(r.ctx(), "m1")
		return m.State == provider.Failed
	})
	if !strings.Contains(m.Reason, "signal: killed") {
		t.Fatalf("reason %q does not say the worker was killed", m.Reason)
	}
	if ms, err := r.p.List(r.ctx(), provider.Filter{Pool: "p", States: []provider.State{provider.Failed}}); err != nil || len(ms) != 1 {
		t.Fatalf("list of failed machines: %v, %v", ms, err)
	}
	if _, err := r.drain("m1"); !provider.IsConflict(err) {
		t.Fatalf("drain of a failed machine: %v, want Conflict", err)
	}
	if _, err := r.delete("m1"); err != nil {
		t.Fatal(err)
	}
	r.wait()
	if _, err := r.p.Get(r.ctx(), "m1"); !provider.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}

	exits := newRig(t, modeExit, func(c *Config) { c.Ready = nil })
	exits.create("m2")
	if _, err := exits.configure("m2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the exiting worker's machine is Failed", func() bool {
		m, _ = exits.p.Get(exits.ctx(), "m2")
		return m.State == provider.Failed
	})
	if !strings.Contains(m.Reason, "exit status 3") {
		t.Fatalf("reason %q does not give the exit status", m.Reason)
	}
}

// TestConfigureFailures: a command that cannot be built is a bad request
// and changes nothing; a worker that cannot start or never gets ready fails
// the machine with the reason.
func TestConfigureFailures(t *testing.T) {
	t.Run("command error", func(t *testing.T) {
		r := newRig(t, modeGraceful, func(c *Config) {
			c.Command = WorkerCommand("/nonexistent/tide")
		})
		r.create("m1")
		_, err := r.p.Configure(r.ctx(), provider.ConfigureRequest{Fence: r.fence(), Pool: "p", MachineID: "m1",
			Cluster: "c", Bootstrap: []byte("not a bootstrap blob")})
		var inv *provider.InvalidError
		if !errors.As(err, &inv) || inv.Field != "bootstrap" {
			t.Fatalf("configure with an unusable bootstrap: %v, want Invalid on bootstrap", err)
		}
		r.want("m1", provider.Idle)
	})
	t.Run("missing binary", func(t *testing.T) {
		r := newRig(t, modeGraceful, func(c *Config) {
			c.Command = WorkerCommand("/nonexistent/tide")
		})
		r.create("m1")
		if _, err := r.configure("m1"); err != nil {
			t.Fatal(err)
		}
		r.wait()
		if m := r.want("m1", provider.Failed); !strings.Contains(m.Reason, "start worker") || !strings.Contains(m.Reason, "/nonexistent/tide") {
			t.Fatalf("reason %q", m.Reason)
		}
	})
	t.Run("ready error", func(t *testing.T) {
		r := newRig(t, modeGraceful, func(c *Config) {
			c.Ready = func(context.Context, Worker) error { return errors.New("head refused the join token") }
		})
		r.create("m1")
		if _, err := r.configure("m1"); err != nil {
			t.Fatal(err)
		}
		r.wait()
		if m := r.want("m1", provider.Failed); !strings.Contains(m.Reason, "head refused the join token") {
			t.Fatalf("reason %q", m.Reason)
		}
	})
	t.Run("ready timeout", func(t *testing.T) {
		r := newRig(t, modeGraceful, func(c *Config) {
			c.ReadyTimeout = 100 * time.Millisecond
			c.Ready = func(ctx context.Context, _ Worker) error { <-ctx.Done(); return ctx.Err() }
		})
		r.create("m1")
		if _, err := r.configure("m1"); err != nil {
			t.Fatal(err)
		}
		r.wait()
		if m := r.want("m1", provider.Failed); !strings.Contains(m.Reason, "not ready within 100ms") {
			t.Fatalf("reason %q", m.Reason)
		}
	})
}

// TestReadyGatesConfigured: the machine stays Configuring until Ready
// returns, and a Drain meanwhile cancels Ready and stops the worker.
func TestReadyGatesConfigured(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	r := newRig(t, modeGraceful, nil)
	ready := r.cfg.Ready
	r.cfg.Ready = nil
	r.p.cfg.Ready = func(ctx context.Context, w Worker) error {
		entered <- struct{}{}
		if err := ready(ctx, w); err != nil {
			return err
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.create("m1")
	r.create("m2")
	for _, id := range []string{"m1", "m2"} {
		if _, err := r.configure(id); err != nil {
			t.Fatal(err)
		}
	}
	<-entered
	<-entered
	r.want("m1", provider.Configuring)
	r.want("m2", provider.Configuring)
	if _, err := r.drain("m2"); err != nil {
		t.Fatal(err)
	}
	close(release)
	r.wait()
	r.want("m1", provider.Configured)
	r.want("m2", provider.Idle)
}

// TestAdoptAfterRestart: a new Provider on the root keeps the workers that
// still run (same pid and start time), fails those whose process is gone,
// keeps refusing the epochs and ids of before, and drives adopted workers
// like its own.
func TestAdoptAfterRestart(t *testing.T) {
	r := newRig(t, modeGraceful, nil)
	r.epoch = 2
	r.up("a", "b", "c")
	r.create("d")
	if _, err := r.delete("d"); err != nil {
		t.Fatal(err)
	}
	r.wait()
	pids := map[string]int{"a": r.pid("a"), "b": r.pid("b"), "c": r.pid("c")}

	if _, err := New(r.cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second provider on a root in use: %v", err)
	}
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.p.Get(r.ctx(), "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v, want ErrClosed", err)
	}
	for id, pid := range pids {
		if !exists(pid) {
			t.Fatalf("close stopped the worker of %s", id)
		}
	}
	// c's worker dies while no provider runs.
	if err := syscall.Kill(pids["c"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c's worker is dead", func() bool { return dead(pids["c"]) })

	r.p = r.open()
	ms, err := r.p.List(r.ctx(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]provider.State{}
	for _, m := range ms {
		got[m.ID] = m.State
	}
	want := map[string]provider.State{"a": provider.Configured, "b": provider.Configured, "c": provider.Failed}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("after the restart: %v, want %v", got, want)
	}
	if r.pid("a") != pids["a"] || r.pid("b") != pids["b"] {
		t.Fatal("adopted machines report other pids")
	}
	if m := r.want("c", provider.Failed); !strings.Contains(m.Reason, "gone") {
		t.Fatalf("reason %q", m.Reason)
	}

	// The fences and tombstones of before hold.
	stale := provider.Fence{Controller: "test", Epoch: 1, Seq: 99}
	if _, err := r.p.Delete(r.ctx(), provider.DeleteRequest{Fence: stale, Pool: "p", MachineID: "a"}); !provider.IsStaleFence(err) {
		t.Fatalf("delete from a deposed epoch after the restart: %v, want StaleFence", err)
	}
	if _, err := r.p.Create(r.ctx(), provider.CreateRequest{Fence: r.fence(), Pool: "p", MachineID: "d", Offering: testOffering.Name()}); !provider.IsConflict(err) {
		t.Fatalf("create of an id deleted before the restart: %v, want Conflict", err)
	}

	// An adopted worker killed with SIGKILL shows as Failed.
	if err := syscall.Kill(pids["a"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's machine is Failed", func() bool {
		m, err := r.p.Get(r.ctx(), "a")
		return err == nil && m.State == provider.Failed
	})
	// An adopted worker drains gracefully.
	if _, err := r.drain("b"); err != nil {
		t.Fatal(err)
	}
	r.wait()
	r.want("b", provider.Idle)
	if !r.terminated("b") {
		t.Fatal("the adopted worker was not stopped with SIGTERM")
	}
	eventually(t, "b's worker is dead", func() bool { return dead(pids["b"]) })
	for _, id := range []string{"a", "c"} {
		if _, err := r.delete(id); err != nil {
			t.Fatal(err)
		}
	}
	r.wait()
	if ms, err := r.p.List(r.ctx(), provider.Filter{}); err != nil || len(ms) != 1 || ms[0].ID != "b" {
		t.Fatalf("after the deletes: %v, %v", ms, err)
	}
}

// TestRestartFinishesTransitions: Configure, Drain and Delete accepted by a
// provider that closed before carrying them out are finished by the next
// one; a configure that was interrupted after its worker started but before
// the pid was written kills that stray worker and starts a fresh one.
func TestRestartFinishesTransitions(t *testing.T) {
	r := newRig(t, modeGraceful, nil)
	r.up("drained", "deleted")
	drained, deleted := r.pid("drained"), r.pid("deleted")
	r.create("configured")
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	// The same root with every actuator held: the calls are recorded and
	// acknowledged, and nothing is carried out before the close.
	g := newGate()
	p, err := newProvider(r.cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	if _, err := r.configure("configured"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.drain("drained"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.delete("deleted"); err != nil {
		t.Fatal(err)
	}
	// A stray worker of "configured", as if started just before a crash.
	stray := exec.Command(os.Args[0], "-test.run=^$")
	stray.Env = append(os.Environ(), envMode+"=child", p.marker("configured"))
	stray.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strayDone := make(chan error, 1)
	go func() { strayDone <- stray.Wait() }()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !exists(drained) || !exists(deleted) {
		t.Fatal("a held transition was carried out")
	}

	r.p = r.open()
	r.wait()
	r.want("configured", provider.Configured)
	r.want("drained", provider.Idle)
	if _, err := r.p.Get(r.ctx(), "deleted"); !provider.IsNotFound(err) {
		t.Fatalf("get of the deleted machine: %v, want NotFound", err)
	}
	if !r.terminated("drained") {
		t.Fatal("the resumed drain did not send SIGTERM")
	}
	eventually(t, "the old workers are dead", func() bool { return dead(drained) && dead(deleted) })
	select {
	case <-strayDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the stray worker of the interrupted configure still runs")
	}
	if r.pid("configured") == stray.Process.Pid {
		t.Fatal("the stray worker was adopted instead of replaced")
	}
}

// TestShutdownLeavesNoOrphans: Shutdown stops every worker (gracefully
// where it can, killing what ignores SIGTERM once ctx ends) and everything
// they started; the machines are Idle for the next provider, and every
// call after it fails.
func TestShutdownLeavesNoOrphans(t *testing.T) {
	out := t.TempDir()
	modes := map[string]string{"g1": modeGraceful, "g2": modeGraceful, "s1": modeSpawn, "s2": modeSpawn, "x1": modeStubborn}
	r := newRig(t, modeGraceful, func(c *Config) {
		c.DrainTimeout = time.Minute // ctx ends the grace period first
		c.Command = func(w Worker) (*exec.Cmd, error) { return helperCommand(modes[w.MachineID], out)(w) }
		c.Ready = readyFile(out)
	})
	r.out = out
	r.up("g1", "g2", "s1", "x1", "s2")
	pids := []int{r.pid("g1"), r.pid("g2"), r.pid("s1"), r.pid("x1")}
	child := r.childPID("s1")
	r.create("idle")
	if _, err := r.drain("g2"); err != nil { // a drain in progress
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(r.ctx(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := r.p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("shutdown took %s", took)
	}
	for _, pid := range pids {
		if exists(pid) {
			t.Errorf("worker %d outlives the shutdown", pid)
		}
	}
	eventually(t, "the spawned child is gone", func() bool { return dead(child) })
	if !r.terminated("g1") {
		t.Error("the graceful worker got no SIGTERM")
	}
	if pids, err := findMarked(MarkerEnv+"="+r.p.uid+"/", true); err != nil || len(pids) > 0 {
		t.Fatalf("processes %v (%v) of the root outlive the shutdown", pids, err)
	}
	if _, err := r.create2("late"); !errors.Is(err, ErrClosed) {
		t.Fatalf("create after shutdown: %v, want ErrClosed", err)
	}
	if err := r.p.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}

	r.p = r.open()
	ms, err := r.p.List(r.ctx(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
		if m.State != provider.Idle || m.Cluster != "" {
			t.Errorf("after shutdown %s is %s in %q, want idle and unbound", m.ID, m.State, m.Cluster)
		}
	}
	if want := []string{"g1", "g2", "idle", "s1", "s2", "x1"}; !slices.Equal(ids, want) {
		t.Fatalf("machines after shutdown: %v, want %v", ids, want)
	}
}

func (r *rig) create2(id string) (provider.Ack, error) {
	return r.p.Create(r.ctx(), provider.CreateRequest{Fence: r.fence(), Pool: "p", MachineID: id, Offering: testOffering.Name()})
}

// TestCorruptRecordIsRefused: New names the file it cannot read rather
// than forgetting a machine (and its process).
func TestCorruptRecordIsRefused(t *testing.T) {
	r := newRig(t, modeGraceful, nil)
	r.create("m1")
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(r.p.Root(), machinesName, "m1", recordName)
	if err := os.WriteFile(path, []byte(`{"version":1,"id":"m1","state":"sideways"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(r.cfg)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `unknown state "sideways"`) {
		t.Fatalf("New on a corrupt record: %v", err)
	}
}

func TestDefaultOffering(t *testing.T) {
	o, err := DefaultOffering()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Resources.MilliCPU != int64(runtime.NumCPU())*1000 || o.Resources.Memory < 64<<20 || o.Name() != "local/on-demand" {
		t.Fatalf("default offering %+v (%s)", o, o.Resources)
	}
	p, err := New(Config{Root: t.TempDir(), Command: helperCommand(modeGraceful, t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	offs, err := p.Offerings(t.Context())
	if err != nil || len(offs) != 1 || !offs[0].Resources.Equal(o.Resources) {
		t.Fatalf("offerings of a provider with none configured: %v, %v", offs, err)
	}
}

func TestConfigValidate(t *testing.T) {
	cmd := helperCommand(modeGraceful, "")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no root", Config{Command: cmd}, "root: must be set"},
		{"no command", Config{Root: "r"}, "command: must be set"},
		{"bad offering", Config{Root: "r", Command: cmd, Offerings: []capacity.Offering{{Type: "x"}}}, "offerings[0]: resources:"},
		{"twice", Config{Root: "r", Command: cmd, Offerings: []capacity.Offering{testOffering, testOffering}}, `offerings[1]: offering "t1/on-demand" listed twice`},
		{"negative", Config{Root: "r", Command: cmd, DrainTimeout: -time.Second}, "drain_timeout: must not be negative"},
		{"negative start delay", Config{Root: "r", Command: cmd, StartDelay: -time.Second}, "start_delay: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestWorkerCommand(t *testing.T) {
	t.Setenv("TIDE_TOKEN", "admin-secret")
	blob, err := tideprovider.Bootstrap{Head: "http://127.0.0.1:8000", Token: "join-secret"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w := Worker{MachineID: "gpu-0-1", Pool: "gpu", DataDir: "/d", Bootstrap: blob,
		Offering: capacity.Offering{Type: "g", Resources: capacity.Resources{MilliCPU: 1500, Memory: 2 << 30, GPUs: 2}}}
	cmd, err := WorkerCommand("/bin/tide", "--label", "x=y")(w)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/tide", "worker", "--bootstrap", "-", "--name", "gpu-0-1", "--data-dir", "/d",
		"--pool", "gpu", "--gpus", "2", "--stop-on-exit", "--log-addr", "127.0.0.1:0", "--cpu", "1500m", "--memory", "2Gi",
		"--label", "x=y"}
	if !slices.Equal(cmd.Args, want) {
		t.Fatalf("args\n got %q\nwant %q", cmd.Args, want)
	}
	if slices.ContainsFunc(cmd.Env, func(kv string) bool { return strings.Contains(kv, "secret") }) {
		t.Fatal("a token leaks to the worker's environment")
	}
	if in, err := io.ReadAll(cmd.Stdin); err != nil || string(in) != string(blob) {
		t.Fatalf("the worker's stdin is %q (%v), want the blob", in, err)
	}
	if slices.ContainsFunc(cmd.Args, func(a string) bool { return strings.Contains(a, "secret") }) {
		t.Fatal("a token is on the command line")
	}
	w.Offering.Resources = capacity.Resources{GPUs: 1}
	if cmd, err := WorkerCommand("/bin/tide")(w); err != nil || slices.Contains(cmd.Args, "--cpu") || slices.Contains(cmd.Args, "--memory") {
		t.Fatalf("zero cpu and memory are passed on: %v, %v", cmd, err)
	}
	w.Bootstrap = []byte(`{"version":1,"head":"ftp://x","token":"t"}`)
	if _, err := WorkerCommand("/bin/tide")(w); err == nil || !strings.Contains(err.Error(), "bootstrap head") {
		t.Fatalf("bad bootstrap: %v", err)
	}
}
