package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

var tideBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tide-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tideBin = filepath.Join(dir, "tide")
	out, err := exec.Command("go", "build", "-o", tideBin, "github.com/tide-project/tide/cmd/tide").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build tide: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const token = "e2e-admin-token"

// daemon is a tide process (head or worker) started by the test.
type daemon struct {
	name string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

type cluster struct {
	t        *testing.T
	dir      string
	headPort int
	headDir  string
	head     *daemon
	workers  map[string]*daemon
	wdirs    map[string]string
	c        *client.Client
	// headArgs are extra flags for startHead.
	headArgs []string
	mu       sync.Mutex
	all      []*daemon
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

func newCluster(t *testing.T) *cluster {
	cl := &cluster{t: t, dir: t.TempDir(), headPort: freePort(t), workers: map[string]*daemon{}, wdirs: map[string]string{}}
	cl.headDir = filepath.Join(cl.dir, "head")
	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", cl.headPort), token, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.c = c
	t.Cleanup(cl.cleanup)
	return cl
}

// start runs the tide binary with args; its output goes to a log file that
// is printed if the test fails.
func (cl *cluster) start(name string, args ...string) *daemon {
	cl.t.Helper()
	d := &daemon{name: name, args: args, log: filepath.Join(cl.dir, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		cl.t.Fatal(err)
	}
	d.cmd = exec.Command(tideBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TIDE_") {
			env = append(env, kv)
		}
	}
	d.cmd.Env = env
	if err := d.cmd.Start(); err != nil {
		cl.t.Fatal(err)
	}
	go func() { d.cmd.Wait(); f.Close(); close(d.done) }()
	cl.mu.Lock()
	cl.all = append(cl.all, d)
	cl.mu.Unlock()
	return d
}

func (cl *cluster) startHead() {
	cl.t.Helper()
	args := []string{"head", "--port", strconv.Itoa(cl.headPort), "--data-dir", cl.headDir, "--token", token,
		"--poll-timeout", "1s", "--suspect-after", "11s", "--offline-after", "12s", "--liveness-interval", "250ms",
		"--scheduler-interval", "500ms", "--grace-period", "2s", "--log-level", "warn"}
	cl.head = cl.start("head", append(args, cl.headArgs...)...)
	cl.waitFor(15*time.Second, "head to answer", func() (bool, string) {
		select {
		case <-cl.head.done:
			cl.t.Fatalf("head exited: %v", cl.head.cmd.ProcessState)
		default:
		}
		err := cl.c.Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
}

func (cl *cluster) startWorker(name string, ports int) {
	cl.t.Helper()
	dir, ok := cl.wdirs[name]
	if !ok {
		dir = filepath.Join(cl.dir, name)
		cl.wdirs[name] = dir
	}
	cl.workers[name] = cl.start(name, "worker", "--head", fmt.Sprintf("http://127.0.0.1:%d", cl.headPort),
		"--token", token, "--name", name, "--data-dir", dir, "--cpu", "4", "--memory", "8Gi",
		"--log-addr", "127.0.0.1:0", "--port-range", fmt.Sprintf("%d-%d", ports, ports+99), "--retry-max", "200ms",
		"--log-max-bytes", "4Ki", "--log-max-files", "16", "--grace-period", "2s", "--log-level", "info")
	d := cl.workers[name]
	cl.waitFor(15*time.Second, "worker "+name+" online", func() (bool, string) {
		select {
		case <-d.done:
			cl.t.Fatalf("worker %s exited: %v", name, d.cmd.ProcessState)
		default:
		}
		w, err := cl.c.Worker(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		return w.Status == "ONLINE", w.Status
	})
}

// kill9 kills a daemon with SIGKILL and waits for it to be gone.
func (cl *cluster) kill9(d *daemon) {
	cl.t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		cl.t.Fatal(err)
	}
	<-d.done
}

func (cl *cluster) signal(d *daemon, sig syscall.Signal) {
	cl.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		cl.t.Fatal(err)
	}
}

// cleanup stops every daemon and kills any instance process they left.
// stopDaemons stops every process the test started (SIGTERM, then SIGKILL
// after 5 s) and waits for them; idempotent.
func (cl *cluster) stopDaemons() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, d := range cl.all {
		d.cmd.Process.Signal(syscall.SIGCONT)
		d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range cl.all {
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
}

func (cl *cluster) cleanup() {
	cl.stopDaemons()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, dir := range cl.wdirs {
		recs, _ := filepath.Glob(filepath.Join(dir, "run", "*", "record.json"))
		for _, r := range recs {
			var rec struct {
				PID int `json:"pid"`
			}
			if b, err := os.ReadFile(r); err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
				syscall.Kill(-rec.PID, syscall.SIGKILL)
			}
		}
	}
	if cl.t.Failed() {
		for _, d := range cl.all {
			b, _ := os.ReadFile(d.log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			cl.t.Logf("--- %s (%s) log tail:\n%s", d.name, strings.Join(d.args[:1], " "), b)
		}
	}
}

// waitFor polls cond until it holds; on timeout it fails with cond's last
// explanation.
func (cl *cluster) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	cl.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		<-tick.C
	}
}

type spec struct {
	cmd     string
	cpu     float64
	target  string
	restart string
	labels  map[string]string
}

func (cl *cluster) submit(s spec) string {
	cl.t.Helper()
	cpu, mem := s.cpu, int64(16)
	if cpu == 0 {
		cpu = 0.1
	}
	req := &httpapi.SubmitRequest{Command: &s.cmd, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem},
		Labels: s.labels}
	if s.target != "" {
		req.TargetWorker = &s.target
	}
	if s.restart != "" {
		req.RestartPolicy = &s.restart
	}
	res, err := cl.c.Submit(context.Background(), req)
	if err != nil {
		cl.t.Fatalf("submit %q: %v", s.cmd, err)
	}
	return res.InstanceID
}

func (cl *cluster) get(id string) *httpapi.InstanceJSON {
	cl.t.Helper()
	in, err := cl.c.Instance(context.Background(), id)
	if err != nil {
		cl.t.Fatalf("get %s: %v", id, err)
	}
	return in
}

func (cl *cluster) waitStatus(id, status string, timeout time.Duration) *httpapi.InstanceJSON {
	cl.t.Helper()
	var in *httpapi.InstanceJSON
	cl.waitFor(timeout, fmt.Sprintf("%s to be %s", id, status), func() (bool, string) {
		in = cl.get(id)
		return in.Status == status, fmt.Sprintf("%s (display %s, attempt %d, worker %v)", in.Status, in.DisplayStatus,
			in.Attempt, deref(in.AssignedTo))
	})
	return in
}

// countByStatus counts the instances with the label phase=<phase>.
func (cl *cluster) countByStatus(phase string) map[string]int {
	cl.t.Helper()
	ins, err := cl.c.Instances(context.Background(), client.ListOptions{Labels: map[string]string{"phase": phase}})
	if err != nil {
		cl.t.Fatal(err)
	}
	out := map[string]int{}
	for _, in := range ins {
		out[in.Status]++
	}
	return out
}

func (cl *cluster) cancel(id string, grace time.Duration) {
	cl.t.Helper()
	if _, err := cl.c.Cancel(context.Background(), id, &grace); err != nil {
		cl.t.Fatalf("cancel %s: %v", id, err)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// runLines reads a file of "<instance id> <attempt>" lines written by the
// instances and counts runs per instance and attempt.
func runLines(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			t.Fatalf("%s: malformed line %q", path, sc.Text())
		}
		out[fields[0]] = append(out[fields[0]], fields[1])
	}
	return out
}

// pidsOf returns the pids recorded in a worker's run records.
func pidsOf(t *testing.T, workerDir string) map[string]int {
	t.Helper()
	recs, _ := filepath.Glob(filepath.Join(workerDir, "run", "*", "record.json"))
	out := map[string]int{}
	for _, r := range recs {
		var rec struct {
			ID      string `json:"instance_id"`
			Attempt int64  `json:"attempt"`
			PID     int    `json:"pid"`
			Phase   string `json:"phase"`
		}
		b, err := os.ReadFile(r)
		if err != nil || json.Unmarshal(b, &rec) != nil {
			continue
		}
		if rec.Phase == "running" {
			out[fmt.Sprintf("%s@%d", rec.ID, rec.Attempt)] = rec.PID
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestCluster is the end-to-end proof of issue 4: a head and three workers,
// real processes on 127.0.0.1.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	start := time.Now()
	cl := newCluster(t)
	cl.startHead()
	cl.startWorker("w1", 24000)
	cl.startWorker("w2", 24100)
	cl.startWorker("w3", 24200)

	if !t.Run("200 instances run to completion, each once", func(t *testing.T) { twoHundred(t, cl) }) {
		return
	}
	if !t.Run("worker killed: rescheduled with attempt+1, stale reports ignored, cancel in every state",
		func(t *testing.T) { workerCrash(t, cl) }) {
		return
	}
	if !t.Run("head killed -9 mid-run: nothing lost, nothing run twice", func(t *testing.T) { headCrash(t, cl) }) {
		return
	}
	t.Run("log follow across rotation gets every byte once", func(t *testing.T) { followRotation(t, cl) })
	t.Logf("end-to-end run took %s", time.Since(start).Round(time.Millisecond))
}

func twoHundred(t *testing.T, cl *cluster) {
	cl.t = t
	runs := filepath.Join(cl.dir, "runs-a.log")
	ids := make([]string, 200)
	t0 := time.Now()
	for i := range ids {
		ids[i] = cl.submit(spec{cmd: fmt.Sprintf(`echo "$TIDE_INSTANCE_ID $TIDE_ATTEMPT $TIDE_WORKER" >> %s`, runs),
			labels: map[string]string{"phase": "a"}})
	}
	cl.waitFor(60*time.Second, "200 instances COMPLETED", func() (bool, string) {
		c := cl.countByStatus("a")
		return c["COMPLETED"] == 200, fmt.Sprint(c)
	})
	t.Logf("200 instances submitted and completed in %s", time.Since(t0).Round(time.Millisecond))
	lines := runLines(t, runs)
	workers := map[string]bool{}
	for _, id := range ids {
		if got := lines[id]; len(got) != 1 || got[0] != "1" {
			t.Errorf("instance %s ran %v times/attempts, want once at attempt 1", id, got)
		}
		in := cl.get(id)
		if in.ExitCode == nil || *in.ExitCode != 0 || in.Attempt != 1 || in.StartedAt == nil && in.EndedAt == nil {
			t.Errorf("instance %s: exit %v attempt %d", id, deref(in.ExitCode), in.Attempt)
		}
		workers[fmt.Sprint(deref(in.AssignedTo))] = true
	}
	if len(lines) != 200 {
		t.Errorf("%d distinct instances ran, want 200", len(lines))
	}
	t.Logf("ran on workers %v", workers)
}

func workerCrash(t *testing.T, cl *cluster) {
	cl.t = t
	ctx := context.Background()
	runs := filepath.Join(cl.dir, "runs-b.log")
	// Pinned to w2 with restart "never": UNKNOWN once w2 is lost.
	never := cl.submit(spec{cmd: `exec sleep 600`, cpu: 0.5, target: "w2", labels: map[string]string{"phase": "b"}})
	var movable []string
	for range 4 {
		movable = append(movable, cl.submit(spec{cmd: fmt.Sprintf(`echo "$TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %s; exec sleep 600`, runs),
			cpu: 1.5, restart: "on-failure", labels: map[string]string{"phase": "b"}}))
	}
	cl.waitFor(20*time.Second, "phase b instances RUNNING", func() (bool, string) {
		c := cl.countByStatus("b")
		return c["RUNNING"] == 5, fmt.Sprint(c)
	})
	var victims []string
	for _, id := range movable {
		if in := cl.get(id); deref(in.AssignedTo) == "w2" {
			victims = append(victims, id)
		}
	}
	if len(victims) == 0 {
		t.Fatal("no restartable instance landed on w2; the scenario needs one")
	}
	stale := pidsOf(t, cl.wdirs["w2"])
	if len(stale) != len(victims)+1 {
		t.Fatalf("w2 records %d running processes, want %d", len(stale), len(victims)+1)
	}
	cl.kill9(cl.workers["w2"])
	lost := time.Now()

	// While the head waits to declare w2 offline: cancellation in the
	// other states on the live workers.
	cancelPending(t, cl)
	cancelRunning(t, cl)
	cancelAssignedNeverStarted(t, cl)

	for _, id := range victims {
		// Offline-after (12 s), then the fencing lease's hold (13.25 s:
		// poll 1 s + liveness 0.25 s + 2 × margin 5 s + grace 2 s).
		cl.waitFor(45*time.Second, "victim "+id+" RUNNING at attempt 2 on another worker", func() (bool, string) {
			in := cl.get(id)
			return in.Status == "RUNNING" && in.Attempt == 2 && deref(in.AssignedTo) != "w2",
				fmt.Sprintf("%s attempt %d on %v", in.Status, in.Attempt, deref(in.AssignedTo))
		})
	}
	t.Logf("w2's instances rescheduled %s after it was killed", time.Since(lost).Round(time.Millisecond))
	in := cl.waitStatus(never, "UNKNOWN", 10*time.Second)
	if in.Attempt != 1 {
		t.Fatalf("pinned instance attempt %d", in.Attempt)
	}
	// Cancel of an UNKNOWN instance on an offline worker completes at once
	// (PyLet leaves it CANCELLING forever, A14.2).
	cl.cancel(never, time.Second)
	if in := cl.get(never); in.Status != "CANCELLED" {
		t.Fatalf("cancel of UNKNOWN: %s", in.Status)
	}
	// The victims' attempt-1 processes are still running, orphaned.
	for key, pid := range stale {
		if !alive(pid) {
			t.Fatalf("stale process %s (pid %d) died with its worker; the scenario needs it alive", key, pid)
		}
	}
	before := map[string]httpapi.InstanceJSON{}
	for _, id := range append(victims, never) {
		before[id] = *cl.get(id)
	}
	// w2 comes back on its data dir: it adopts its attempt-1 processes and
	// reports them (RUNNING, then CANCELLED when it stops them): the head
	// ignores every one of those stale reports.
	cl.startWorker("w2", 24100)
	cl.waitFor(15*time.Second, "stale attempt-1 processes stopped", func() (bool, string) {
		for key, pid := range stale {
			if alive(pid) {
				return false, key + " still running"
			}
		}
		return true, ""
	})
	cl.waitFor(10*time.Second, "w2 to forget its stale processes", func() (bool, string) {
		left := pidsOf(t, cl.wdirs["w2"])
		recs, _ := filepath.Glob(filepath.Join(cl.wdirs["w2"], "run", "*"))
		return len(left) == 0 && len(recs) == 0, fmt.Sprintf("%d records", len(recs))
	})
	for id, b := range before {
		a := cl.get(id)
		if a.Status != b.Status || a.Attempt != b.Attempt || fmt.Sprint(deref(a.AssignedTo)) != fmt.Sprint(deref(b.AssignedTo)) ||
			fmt.Sprint(deref(a.ExitCode)) != fmt.Sprint(deref(b.ExitCode)) {
			t.Errorf("stale reports changed %s: %s@%d on %v → %s@%d on %v", id, b.Status, b.Attempt, deref(b.AssignedTo),
				a.Status, a.Attempt, deref(a.AssignedTo))
		}
	}
	lines := runLines(t, runs)
	for _, id := range victims {
		if fmt.Sprint(lines[id]) != "[1 2]" {
			t.Errorf("victim %s ran attempts %v, want [1 2]", id, lines[id])
		}
	}
	for _, id := range movable {
		cl.cancel(id, 500*time.Millisecond)
	}
	for _, id := range movable {
		cl.waitStatus(id, "CANCELLED", 10*time.Second)
	}
	if w, err := cl.c.Worker(ctx, "w2"); err != nil || w.Status != "ONLINE" {
		t.Fatalf("w2 after restart: %+v %v", w, err)
	}
}

func cancelPending(t *testing.T, cl *cluster) {
	id := cl.submit(spec{cmd: "true", cpu: 64, labels: map[string]string{"phase": "d"}})
	if in := cl.get(id); in.Status != "PENDING" {
		t.Fatalf("oversized instance is %s", in.Status)
	}
	cl.cancel(id, time.Second)
	if in := cl.get(id); in.Status != "CANCELLED" || in.AssignedTo != nil {
		t.Fatalf("cancel PENDING: %s on %v", in.Status, deref(in.AssignedTo))
	}
}

func cancelRunning(t *testing.T, cl *cluster) {
	id := cl.submit(spec{cmd: "echo up; exec sleep 600", target: "w3", labels: map[string]string{"phase": "d"}})
	cl.waitStatus(id, "RUNNING", 10*time.Second)
	cl.cancel(id, 300*time.Millisecond)
	in := cl.waitStatus(id, "CANCELLED", 10*time.Second)
	if in.ExitCode != nil && *in.ExitCode != 143 {
		t.Fatalf("cancelled sleep exited %d, want 143 (SIGTERM)", *in.ExitCode)
	}
}

// cancelAssignedNeverStarted: an instance is assigned to a worker that is
// frozen (SIGSTOP) and cancelled before the worker ever sees it. When the
// worker thaws, its heartbeat has seen the cancel and does not report the
// instance, so the head completes the cancel; PyLet leaves it CANCELLING
// forever (A14.2).
func cancelAssignedNeverStarted(t *testing.T, cl *cluster) {
	w := cl.workers["w1"]
	cl.signal(w, syscall.SIGSTOP)
	thawed := false
	defer func() {
		if !thawed {
			cl.signal(w, syscall.SIGCONT)
		}
	}()
	// Let the head answer the poll w1 was holding (poll timeout 1s), so no
	// poll is held when the instance is assigned.
	time.Sleep(1500 * time.Millisecond)
	marker := filepath.Join(cl.dir, "never-started")
	id := cl.submit(spec{cmd: "touch " + marker + "; exec sleep 600", target: "w1", labels: map[string]string{"phase": "d"}})
	cl.waitStatus(id, "ASSIGNED", 10*time.Second)
	cl.cancel(id, time.Second)
	if in := cl.get(id); in.DisplayStatus != "CANCELLING" {
		t.Fatalf("display status %s, want CANCELLING", in.DisplayStatus)
	}
	cl.signal(w, syscall.SIGCONT)
	thawed = true
	in := cl.waitStatus(id, "CANCELLED", 10*time.Second)
	if in.StartedAt != nil {
		t.Fatalf("instance started at %v", *in.StartedAt)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the cancelled instance ran")
	}
}

func headCrash(t *testing.T, cl *cluster) {
	cl.t = t
	runs := filepath.Join(cl.dir, "runs-c.log")
	cmd := fmt.Sprintf(`echo "$TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %s; sleep 1`, runs)
	var ids []string
	for range 60 {
		ids = append(ids, cl.submit(spec{cmd: cmd, labels: map[string]string{"phase": "c"}}))
	}
	cl.waitFor(20*time.Second, "some of phase c running", func() (bool, string) {
		c := cl.countByStatus("c")
		return c["RUNNING"] >= 10, fmt.Sprint(c)
	})
	atKill := cl.countByStatus("c")
	cl.kill9(cl.head)
	// Work goes on without the head: processes finish while it is down.
	started := len(runLines(t, runs))
	cl.waitFor(10*time.Second, "instances to finish while the head is down", func() (bool, string) {
		alivePIDs := 0
		for _, w := range []string{"w1", "w2", "w3"} {
			for _, pid := range pidsOf(t, cl.wdirs[w]) {
				if alive(pid) {
					alivePIDs++
				}
			}
		}
		return alivePIDs == 0, fmt.Sprintf("%d processes still running", alivePIDs)
	})
	cl.startHead()
	for range 20 {
		ids = append(ids, cl.submit(spec{cmd: cmd, labels: map[string]string{"phase": "c"}}))
	}
	cl.waitFor(40*time.Second, "all 80 phase c instances COMPLETED", func() (bool, string) {
		c := cl.countByStatus("c")
		return c["COMPLETED"] == 80, fmt.Sprint(c)
	})
	lines := runLines(t, runs)
	for _, id := range ids {
		if got := lines[id]; fmt.Sprint(got) != "[1]" {
			t.Errorf("instance %s ran %v, want once at attempt 1", id, got)
		}
	}
	if len(lines) != 80 {
		t.Errorf("%d instances ran, want 80", len(lines))
	}
	t.Logf("head killed with %v; %d had started; all 80 completed once", atKill, started)
}

func followRotation(t *testing.T, cl *cluster) {
	cl.t = t
	var want bytes.Buffer
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&want, "line %04d the quick brown fox jumps over the lazy dog\n", i)
	}
	id := cl.submit(spec{cmd: `i=1; while [ $i -le 2500 ]; do printf 'line %04d the quick brown fox jumps over the lazy dog\n' $i; ` +
		`if [ $((i % 100)) -eq 0 ]; then sleep 0.05; fi; i=$((i+1)); done`, labels: map[string]string{"phase": "e"}})
	var got bytes.Buffer
	var gaps [][2]int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end, err := cl.c.ReadLogs(ctx, id, &got, client.ReadOptions{Follow: true, Poll: 10 * time.Millisecond, Chunk: 8192,
		OnGap: func(f, to int64) { gaps = append(gaps, [2]int64{f, to}) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) > 0 || !bytes.Equal(got.Bytes(), want.Bytes()) || end != int64(want.Len()) {
		t.Fatalf("followed %d bytes (gaps %v), want the %d bytes written once", got.Len(), gaps, want.Len())
	}
	chunk, err := cl.c.Logs(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if chunk.AvailableOffset == 0 {
		t.Fatalf("the log never rotated (total %d)", chunk.TotalSize)
	}
	t.Logf("followed %d bytes through rotation; %d bytes retained from offset %d", got.Len(),
		chunk.TotalSize-chunk.AvailableOffset, chunk.AvailableOffset)
}
