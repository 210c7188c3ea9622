package up

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
)

// tideBin is the tide binary the pools' workers run, built once.
var tideBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tide-up-bin")
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
	os.RemoveAll(dir)
	os.Exit(code)
}

// running is a `tide up` run inside the test process.
type running struct {
	t      *testing.T
	dir    string
	cl     *client.Client
	cancel context.CancelFunc
	done   chan error
}

func startUp(t *testing.T, poolYAML string) *running {
	t.Helper()
	return startUpIn(t, t.TempDir(), poolYAML)
}

// startUpIn runs tide up with its config and data dir under dir; a second
// run on the same dir is a restart.
func startUpIn(t *testing.T, dir, poolYAML string) *running {
	t.Helper()
	cfgPath := filepath.Join(dir, "tide.yaml")
	if err := os.WriteFile(cfgPath, []byte(poolYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	r := &running{t: t, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, Config{
			ConfigPath: cfgPath, DataDir: filepath.Join(dir, "data"), Port: freePort(t), Binary: tideBin,
			OnListen: func(a net.Addr) { addr <- a },
			Head: head.Config{SchedulerInterval: 200 * time.Millisecond, LivenessInterval: time.Second,
				PollTimeout: 5 * time.Second, SuspectAfter: 20 * time.Second, OfflineAfter: 30 * time.Second},
			ShutdownTimeout: 10 * time.Second,
		})
	}()
	select {
	case a := <-addr:
		cl, err := client.New("http://"+a.String(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.cl = cl
	case err := <-r.done:
		t.Fatalf("tide up stopped at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("tide up did not listen within 30s")
	}
	t.Cleanup(func() { r.stop() })
	return r
}

// stop is Ctrl-C: it waits for tide up to drain and return.
func (r *running) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			r.t.Errorf("tide up returned %v", err)
		}
	case <-time.After(60 * time.Second):
		r.t.Error("tide up did not stop within 60s of Ctrl-C")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// eventually polls cond every 100ms until it holds or the deadline passes.
func (r *running) eventually(what string, within time.Duration, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("%s: not within %v; last: %s\nevents:\n%s", what, within, last, r.events())
}

func (r *running) pool(name string) httpapi.PoolJSON {
	r.t.Helper()
	ps, err := r.cl.Pools(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	r.t.Fatalf("no pool %q in %+v", name, ps)
	return httpapi.PoolJSON{}
}

func (r *running) events() string {
	evs, err := r.cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s: %s\n", e.Time.Format("15:04:05.000"), e.Type, e.Reason, e.Message)
	}
	return b.String()
}

func (r *running) submit(n int, command string, cpus float64, extra func(*httpapi.SubmitRequest)) []string {
	r.t.Helper()
	var ids []string
	for range n {
		req := &httpapi.SubmitRequest{Command: &command, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpus}}
		if extra != nil {
			extra(req)
		}
		res, err := r.cl.Submit(context.Background(), req)
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, res.InstanceID)
	}
	return ids
}

func (r *running) statuses(ids []string) map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		in, err := r.cl.Instance(context.Background(), id)
		if err != nil {
			r.t.Fatal(err)
		}
		out[in.Status]++
	}
	return out
}

// workerProcesses counts the live processes started from this run's data dir.
func workerProcesses(dir string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(stat), ") Z ") {
			continue // a zombie is not running
		}
		n++
	}
	return n
}

const burstPool = `pools:
  - name: burst
    provider: {type: local}
    nodes: [0, 4]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
    scaling: {policy: %s, idle_timeout: 4s, cooldown: 2s, batch_window: 500ms, reconcile_interval: 1s,
              slots_per_node: 1, scale_in_datapoints: 2, metric_period: 1s}
`

// TestBurst is the burst: 40 one-CPU instances of a second each on a
// pool min 0 / max 4. The pool grows from 0 to 4, every instance completes,
// the pool returns to 0 after the idle timeout, the events explain each
// step, and Ctrl-C leaves no process behind.
func TestBurst(t *testing.T) {
	r := startUp(t, fmt.Sprintf(burstPool, "tide"))
	if p := r.pool("burst"); p.Ready != 0 || p.Desired != 0 {
		t.Fatalf("pool not empty at start: %+v", p)
	}
	ids := r.submit(40, "sleep 1", 1, nil)
	maxReady := 0
	r.eventually("all 40 instances complete", 90*time.Second, func() (bool, string) {
		p := r.pool("burst")
		maxReady = max(maxReady, p.Ready)
		st := r.statuses(ids)
		return st["COMPLETED"] == 40, fmt.Sprintf("%v, pool ready %d desired %d", st, p.Ready, p.Desired)
	})
	if maxReady != 4 {
		t.Errorf("the pool peaked at %d ready nodes, want 4", maxReady)
	}
	r.eventually("the pool returns to 0 and its machines are deleted", 60*time.Second, func() (bool, string) {
		p := r.pool("burst")
		deleted := strings.Count(r.events(), " deleted: ")
		return p.Ready == 0 && p.Pending == 0 && p.Desired == 0 && deleted == 4, fmt.Sprintf("%d deleted, %+v", deleted, p)
	})
	evs := r.events()
	for _, want := range []string{"launched", "joined", "drain", "deleted", "desired 0 -> 4", "-> 0"} {
		if !strings.Contains(evs, want) {
			t.Errorf("no event mentions %q:\n%s", want, evs)
		}
	}
	r.stop()
	if n := workerProcesses(r.dir); n != 0 {
		t.Errorf("%d processes of this run still alive after Ctrl-C", n)
	}
}

// TestCtrlCDrainsEverything stops tide up while workers run instances: every
// worker and every instance process is gone afterwards.
func TestCtrlCDrainsEverything(t *testing.T) {
	r := startUp(t, fmt.Sprintf(burstPool, "skyward"))
	ids := r.submit(3, "sleep 600", 1, nil)
	r.eventually("instances run", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 3, fmt.Sprint(st)
	})
	if n := workerProcesses(r.dir); n < 3 {
		t.Fatalf("only %d processes before Ctrl-C", n)
	}
	r.stop()
	if n := workerProcesses(r.dir); n != 0 {
		t.Errorf("%d processes of this run still alive after Ctrl-C", n)
	}
}

// workerPID returns the pid of the tide worker serving machine id under
// dir: machine ids repeat across tests (and across checkouts tested at once
// on one host), data dirs do not.
func workerPID(t *testing.T, dir, machineID string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue // not a process of this run
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 2 && args[1] == "worker" && slices.Contains(args, machineID) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			return pid
		}
	}
	t.Fatalf("no worker process for machine %s", machineID)
	return 0
}

// TestNodeLoss kills one worker with kill -9 while it runs an instance: the
// pool replaces the machine within a reconcile tick of noticing, and the
// instance reruns (attempt 2) to completion.
func TestNodeLoss(t *testing.T) {
	r := startUp(t, fmt.Sprintf(burstPool, "tide"))
	policy, restarts := "on-failure", 3
	ids := r.submit(4, "sleep 6", 1, func(req *httpapi.SubmitRequest) {
		req.RestartPolicy, req.MaxRestarts = &policy, &restarts
	})
	r.eventually("four instances run", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 4, fmt.Sprint(st)
	})
	victim, err := r.cl.Instance(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if victim.AssignedTo == nil {
		t.Fatal("the running instance has no worker")
	}
	pid := workerPID(t, r.dir, *victim.AssignedTo)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	r.eventually("the lost machine is replaced", 30*time.Second, func() (bool, string) {
		evs := r.events()
		return strings.Contains(evs, "node-lost") && strings.Count(evs, " launched:") >= 5, "waiting for node-lost and a 5th launch"
	})
	if d := time.Since(lostAt); d > 10*time.Second {
		t.Errorf("replacement took %v", d)
	}
	r.eventually("every instance completes", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["COMPLETED"] == 4, fmt.Sprint(st)
	})
	again, err := r.cl.Instance(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if again.Attempt < 2 {
		t.Errorf("the lost instance finished at attempt %d, want a rerun (attempt ≥ 2)", again.Attempt)
	}
}
