package up

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/store"
)

// idlePool keeps an idle node for a minute, so that a node is alive when
// the test stops tide up.
const idlePool = `pools:
  - name: idle
    provider: {type: local}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
    scaling: {policy: tide, idle_timeout: 60s, cooldown: 1s, reconcile_interval: 1s}
`

// TestRestartLaunchesNothingWithNothingQueued is issue 17's first restart
// bug: a worker alive (idle) at Ctrl-C was relaunched by the next tide up
// with nothing queued, and the policy said "desired 0 is below the 1 nodes
// running work" although none ran.
func TestRestartLaunchesNothingWithNothingQueued(t *testing.T) {
	dir := t.TempDir()
	r := startUpIn(t, dir, idlePool)
	ids := r.submit(1, "true", 1, nil)
	r.eventually("the instance completes on a node that stays", 60*time.Second, func() (bool, string) {
		st, p := r.statuses(ids), r.pool("idle")
		return st["COMPLETED"] == 1 && p.Ready == 1, fmt.Sprintf("%v, pool %+v", st, p)
	})
	r.stop()
	if n := workerProcesses(dir); n != 0 {
		t.Fatalf("%d processes alive after Ctrl-C", n)
	}

	r2 := startUpIn(t, dir, idlePool)
	// Several reconcile ticks (1s) and policy evaluations (1s cooldown).
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		p := r2.pool("idle")
		if p.Desired != 0 || p.Pending != 0 || p.Ready != 0 {
			t.Fatalf("the restarted pool launches with nothing queued: %+v\nevents:\n%s", p, r2.events())
		}
		if n := workerProcesses(dir); n != 0 {
			t.Fatalf("%d worker processes started with nothing queued\nevents:\n%s", n, r2.events())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if evs := r2.events(); strings.Contains(evs, "nodes running work") {
		t.Errorf("a node is said to run work after the restart:\n%s", evs)
	}
}

// TestCtrlCCancelsRunningWork is issue 17's drain bug: Ctrl-C killed a
// running instance, which showed FAILED / KILLED_BY_WORKER only after the
// next start. Now the instance is CANCELLED, with its end time, before tide
// up returns, and an event says why.
func TestCtrlCCancelsRunningWork(t *testing.T) {
	dir := t.TempDir()
	r := startUpIn(t, dir, idlePool)
	ids := r.submit(1, "sleep 600", 1, nil)
	r.eventually("the instance runs", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 1, fmt.Sprint(st)
	})
	stopped := time.Now()
	r.stop()
	took := time.Since(stopped)

	st, err := store.Open(context.Background(), filepath.Join(dir, "data", "tide.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in, err := st.GetInstance(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != store.StatusCancelled {
		t.Fatalf("after Ctrl-C the running instance is %s (%s), want CANCELLED", in.Status, in.FailureReason)
	}
	if in.EndedAt.IsZero() || in.EndedAt.After(stopped.Add(took)) {
		t.Errorf("ended at %v, want before tide up returned (%v)", in.EndedAt, stopped.Add(took))
	}
	evs, err := st.ListEvents(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || (strings.Contains(e.Message, ids[0]) && strings.Contains(e.Message, "stopping"))
	}
	if !found {
		t.Errorf("no event says %s was cancelled because tide is stopping: %+v", ids[0], evs)
	}
}

// TestSecondUpChangesNothing is issue 17's third bug: a second tide up on a
// data dir in use raised the head's epoch in the shared database before it
// failed.
func TestSecondUpChangesNothing(t *testing.T) {
	dir := t.TempDir()
	startUpIn(t, dir, idlePool)
	db := filepath.Join(dir, "data", "tide.db")
	epoch := func() int64 {
		st, err := store.Open(context.Background(), db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		e, err := st.Epoch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	before := epoch()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, Config{ConfigPath: filepath.Join(dir, "tide.yaml"), DataDir: filepath.Join(dir, "data"),
		Port: freePort(t), Binary: tideBin, OnListen: func(net.Addr) { t.Error("the second tide up listens") }})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second tide up on a data dir in use: got %v, want an error saying it is in use", err)
	}
	if after := epoch(); after != before {
		t.Errorf("the refused start moved the head epoch from %d to %d", before, after)
	}
}

// TestBadConfigCreatesNoDataDir: a config that fails validation leaves no
// empty data dir behind.
func TestBadConfigCreatesNoDataDir(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(cfgPath, []byte("pools:\n  - name: x\n    provider: {type: local}\n    nodes: [0, 1]\n    offerings: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	err := Run(context.Background(), Config{ConfigPath: cfgPath, DataDir: data, Port: freePort(t), Binary: tideBin,
		Head: head.Config{}})
	if err == nil {
		t.Fatal("a bad config was accepted")
	}
	if _, serr := os.Stat(data); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the refused start left %s behind (stat: %v); error was %v", data, serr, err)
	}
}

// startIdlePoolProcess runs `tide up` as a process on idlePool under dir.
func startIdlePoolProcess(t *testing.T, dir string) (*upProcess, *running) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "tide.yaml"), []byte(idlePool), 0o600); err != nil {
		t.Fatal(err)
	}
	return startUpProcess(t, dir, freePort(t))
}

// waiter returns a channel that receives the process's exit.
func (p *upProcess) waiter() <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	return done
}

// exitWithin waits up to d for the process to exit.
func exitWithin(done <-chan error, d time.Duration) (error, bool) {
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// TestCtrlCOnTheProcess: SIGINT to a real `tide up` process records the
// running instance CANCELLED before the process exits 0, with nothing of
// the pool left running.
func TestCtrlCOnTheProcess(t *testing.T) {
	dir := t.TempDir()
	p, r := startIdlePoolProcess(t, dir)
	ids := r.submit(1, "sleep 600", 1, nil)
	r.eventually("the instance runs", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 1, fmt.Sprint(st)
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	// sleep stops at SIGTERM: the drain takes well under the 30s grace
	// period and the 30s shutdown timeout.
	err, ok := exitWithin(p.waiter(), 20*time.Second)
	t.Logf("tide up exited %v after Ctrl-C", time.Since(sent).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(dir, "up.log")); testing.Verbose() {
		t.Logf("tide up's log:\n%s", b)
	}
	if !ok {
		t.Fatal("tide up did not exit within 20s of Ctrl-C")
	}
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "up.log"))
		t.Fatalf("tide up exited with %v after Ctrl-C\n%s", err, b)
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "data", "tide.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in, err := st.GetInstance(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != store.StatusCancelled {
		t.Errorf("after Ctrl-C the instance is %s %s, want CANCELLED", in.Status, in.FailureReason)
	}
	if n := markedProcesses(t, filepath.Join(dir, "data"), "idle"); n != 0 {
		t.Errorf("%d processes of the pool left running", n)
	}
}

// TestSecondCtrlCExitsAtOnce: while the first Ctrl-C waits for an instance
// that ignores SIGTERM (its grace period is 30s), a second Ctrl-C ends tide
// up at once.
func TestSecondCtrlCExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	p, r := startIdlePoolProcess(t, dir)
	t.Cleanup(func() { killMarked(t, filepath.Join(dir, "data"), "idle") })
	ids := r.submit(1, `trap "" TERM; sleep 600`, 1, nil)
	r.eventually("the instance runs", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 1, fmt.Sprint(st)
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := p.waiter()
	if _, exited := exitWithin(done, 2*time.Second); exited {
		t.Fatal("tide up exited on the first Ctrl-C without waiting for the instance's grace period")
	}
	second := time.Now()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if _, exited := exitWithin(done, 5*time.Second); !exited {
		t.Fatal("tide up still runs 5s after a second Ctrl-C")
	}
	t.Logf("exited %v after the second Ctrl-C", time.Since(second).Round(time.Millisecond))
}

// killMarked kills every process of the pool's local machines under
// dataDir (what a second Ctrl-C leaves for the next start to adopt).
func killMarked(t *testing.T, dataDir, pool string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "machines", pool, "provider.json"))
	if err != nil {
		return
	}
	var uid string
	if i := strings.Index(string(b), `"uid"`); i >= 0 {
		if f := strings.Split(string(b[i+len(`"uid"`):]), `"`); len(f) > 1 {
			uid = f[1]
		}
	}
	if uid == "" {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "TIDE_LOCAL_MACHINE="+uid+"/") {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
