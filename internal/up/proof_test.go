package up

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

// The proofs of the elastic-pools issue not covered by up_test.go: a fixed
// pool heals, partial readiness, scale-down around running work and daemons,
// a head restart that adopts its pool, and every policy on the same burst.

const fixedPool = `pools:
  - name: fixed
    provider: {type: local}
    nodes: %s
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
    scaling: {policy: tide, idle_timeout: 4s, cooldown: 2s, batch_window: 500ms, reconcile_interval: 1s,
              slots_per_node: 1}
`

func (r *running) nodes(pool string) []httpapi.NodeJSON {
	r.t.Helper()
	ns, err := r.cl.Nodes(context.Background(), &pool)
	if err != nil {
		r.t.Fatal(err)
	}
	return ns
}

func (r *running) instance(id string) *httpapi.InstanceJSON {
	r.t.Helper()
	in, err := r.cl.Instance(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return in
}

// readyMachines returns the machine ids of the pool's ready nodes.
func (r *running) readyMachines(pool string) map[string]bool {
	out := map[string]bool{}
	for _, n := range r.nodes(pool) {
		if n.State == "ready" && n.MachineID != "" {
			out[n.MachineID] = true
		}
	}
	return out
}

// TestFixedPoolSelfHeals: a fixed pool of 3 comes up with no work at all,
// and a worker killed with kill -9 is replaced so the pool is 3 again.
func TestFixedPoolSelfHeals(t *testing.T) {
	r := startUp(t, fmt.Sprintf(fixedPool, "3"))
	r.eventually("the fixed pool reaches 3 ready with no work", 30*time.Second, func() (bool, string) {
		p := r.pool("fixed")
		return p.Ready == 3 && p.Desired == 3, fmt.Sprintf("%+v", p)
	})
	if p := r.pool("fixed"); p.NodeSpec == nil || p.NodeSpec.Elastic || p.NodeSpec.Min != 3 || p.NodeSpec.Max != 3 {
		t.Fatalf("node spec %+v, want fixed 3", p.NodeSpec)
	}
	before := r.readyMachines("fixed")
	var victim string
	for id := range before {
		victim = id
		break
	}
	if err := syscall.Kill(workerPID(t, r.dir, victim), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.eventually("the killed machine is replaced and the pool is 3 ready again", 30*time.Second, func() (bool, string) {
		p, ready := r.pool("fixed"), r.readyMachines("fixed")
		return p.Ready == 3 && len(ready) == 3 && !ready[victim], fmt.Sprintf("%+v, ready %v", p, ready)
	})
	evs := r.events()
	if !strings.Contains(evs, "node-lost") || !strings.Contains(evs, victim) {
		t.Errorf("no node-lost event for %s:\n%s", victim, evs)
	}
	if n := strings.Count(evs, " launched:"); n != 4 {
		t.Errorf("%d launches, want 4 (3 + 1 replacement):\n%s", n, evs)
	}
	if p := r.pool("fixed"); p.Desired != 3 {
		t.Errorf("desired moved to %d in a fixed pool", p.Desired)
	}
}

// TestPartialReadiness: a pool {min: 3, desired: 1} is operational with one
// ready node while it keeps provisioning to 3. GET /pools exposes no
// operational flag: operational is its node spec's desired (1) reached by
// ready. A local boot joins all three machines in one reconcile tick, so the
// partial state is made by killing two of the three workers: the pool is
// then at 1 ready, operational, with 2 replacements pending, and returns
// to 3.
func TestPartialReadiness(t *testing.T) {
	r := startUp(t, fmt.Sprintf(fixedPool, "{min: 3, desired: 1}"))
	p := r.pool("fixed")
	if p.NodeSpec == nil || p.NodeSpec.Min != 3 || p.NodeSpec.Desired != 1 || p.NodeSpec.Elastic {
		t.Fatalf("node spec %+v, want {min: 3, desired: 1}", p.NodeSpec)
	}
	r.eventually("the pool provisions to min 3", 30*time.Second, func() (bool, string) {
		p := r.pool("fixed")
		return p.Ready == 3 && p.Desired == 3, fmt.Sprintf("%+v", p)
	})
	var victims []string
	for id := range r.readyMachines("fixed") {
		victims = append(victims, id)
	}
	victims = victims[:2]
	for _, m := range victims {
		if err := syscall.Kill(workerPID(t, r.dir, m), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	r.eventually("the pool is operational at 1 ready while 2 replacements are pending", 20*time.Second, func() (bool, string) {
		p := r.pool("fixed")
		s := fmt.Sprintf("ready %d pending %d desired %d", p.Ready, p.Pending, p.Desired)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		return p.Ready >= p.NodeSpec.Desired && p.Ready < p.NodeSpec.Min && p.Desired == 3 && p.Ready+p.Pending == 3, s
	})
	r.eventually("provisioning continues to 3", 30*time.Second, func() (bool, string) {
		p, ready := r.pool("fixed"), r.readyMachines("fixed")
		s := fmt.Sprintf("ready %d pending %d desired %d", p.Ready, p.Pending, p.Desired)
		if seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		return p.Ready == 3 && len(ready) == 3 && !ready[victims[0]] && !ready[victims[1]], s
	})
	t.Logf("pool states after killing two workers: %v", seen)
}

// TestScaleDownNeverKillsRunningWork: two long instances and a burst of
// short ones on a [0, 4] pool. Once the short ones are done the pool
// shrinks, but the nodes running the long ones are never drained while
// they run: both complete at their first attempt.
func TestScaleDownNeverKillsRunningWork(t *testing.T) {
	r := startUp(t, fmt.Sprintf(burstPool, "tide"))
	long := r.submit(2, "sleep 20", 1, nil)
	short := r.submit(6, "sleep 1", 1, nil)
	r.eventually("the long instances run", 30*time.Second, func() (bool, string) {
		st := r.statuses(long)
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	hosts := map[string]bool{}
	for _, id := range long {
		in := r.instance(id)
		if in.AssignedTo == nil {
			t.Fatalf("running instance %s has no worker", id)
		}
		hosts[*in.AssignedTo] = true
	}
	shrunk := false
	for deadline := time.Now().Add(35 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		st := r.statuses(long)
		if st["COMPLETED"] == 2 {
			break
		}
		// The two need not start (or end) at the same moment: one may
		// complete first; none may end any other way.
		if st["RUNNING"]+st["COMPLETED"] != 2 {
			t.Fatalf("a long instance stopped running before it completed: %v\n%s", st, r.events())
		}
		busy := map[string]bool{} // the nodes of the long instances still running
		for _, id := range long {
			if in := r.instance(id); in.Status == "RUNNING" && in.AssignedTo != nil {
				busy[*in.AssignedTo] = true
			}
		}
		for _, n := range r.nodes("burst") {
			// pending is fine (a worker runs work before its controller's
			// next tick sees it joined); draining or marked is not.
			if busy[n.ID] && (n.State == "draining" || n.State == "marked" || n.Cordoned) {
				t.Fatalf("node %s runs a long instance but is %s\n%s", n.ID, n.State, r.events())
			}
		}
		if r.statuses(short)["COMPLETED"] == 6 {
			if p := r.pool("burst"); p.Desired == 2 && p.Ready == 2 && p.Pending == 0 && p.Draining == 0 {
				shrunk = true
			}
		}
	}
	if !shrunk {
		t.Errorf("the pool never shrank to the 2 busy nodes while the long instances ran\n%s", r.events())
	}
	for _, id := range long {
		in := r.instance(id)
		if in.Status != "COMPLETED" || in.Attempt != 1 || in.AssignedTo == nil || !hosts[*in.AssignedTo] {
			t.Errorf("long instance %s: status %s attempt %d on %v, want COMPLETED at attempt 1 on %v",
				id, in.Status, in.Attempt, in.AssignedTo, hosts)
		}
	}
	r.eventually("the pool returns to 0 once the long instances are done", 20*time.Second, func() (bool, string) {
		p := r.pool("burst")
		return p.Ready == 0 && p.Pending == 0 && p.Desired == 0, fmt.Sprintf("%+v", p)
	})
}

// TestDaemonDoesNotHoldANode: a daemon alone on a node does not keep it: the
// pool scales to 0 while the daemon runs, and the daemon stops with its node.
func TestDaemonDoesNotHoldANode(t *testing.T) {
	r := startUp(t, fmt.Sprintf(burstPool, "tide"))
	daemon := r.submit(1, "sleep 600", 1, func(req *httpapi.SubmitRequest) { req.Daemon = new(true) })
	r.eventually("the daemon runs", 30*time.Second, func() (bool, string) {
		st := r.statuses(daemon)
		return st["RUNNING"] == 1, fmt.Sprintf("%v, pool %+v", st, r.pool("burst"))
	})
	r.eventually("the pool shrinks to 0 under the running daemon", 30*time.Second, func() (bool, string) {
		p := r.pool("burst")
		return p.Ready == 0 && p.Pending == 0 && p.Draining == 0 && p.Desired == 0, fmt.Sprintf("%+v", p)
	})
	in := r.instance(daemon[0])
	t.Logf("the daemon after its node went: status %s attempt %d", in.Status, in.Attempt)
	if in.Status == "RUNNING" {
		t.Errorf("the daemon still shows RUNNING with no node left")
	}
}

// upProcess is `tide up` run as a real subprocess.
type upProcess struct {
	cmd *exec.Cmd
	log *os.File
}

// startUpProcess runs `tide up` on dir and waits until its head answers.
func startUpProcess(t *testing.T, dir string, port int) (*upProcess, *running) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, "up.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tideBin, "up", "--config", filepath.Join(dir, "tide.yaml"),
		"--data-dir", filepath.Join(dir, "data"), "--port", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProcess{cmd: cmd, log: logf}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		p.log.Close()
	})
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, dir: dir, cl: cl}
	r.eventually("tide up answers", 30*time.Second, func() (bool, string) {
		_, err := cl.Pools(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	return p, r
}

// markedProcesses counts live processes carrying the local provider's
// marker of the root under dataDir (workers and the instances they run).
func markedProcesses(t *testing.T, dataDir, pool string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "machines", pool, "provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	var uid string
	if i := strings.Index(string(b), `"uid"`); i >= 0 {
		rest := string(b[i+len(`"uid"`):])
		if f := strings.Split(rest, `"`); len(f) > 1 {
			uid = f[1]
		}
	}
	if uid == "" {
		t.Fatalf("no uid in provider.json: %s", b)
	}
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "TIDE_LOCAL_MACHINE="+uid+"/") {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(stat), ") Z ") {
			continue
		}
		n++
	}
	return n
}

// TestHeadRestartAdoptsThePool kills `tide up` with SIGKILL while two
// workers run an instance each, starts it again on the same data dir: the
// workers are adopted (same processes, no new machine), the instances
// complete once, and a final SIGTERM leaves nothing running.
func TestHeadRestartAdoptsThePool(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tide.yaml"), []byte(fmt.Sprintf(burstPool, "tide")), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	up1, r := startUpProcess(t, dir, port)
	ids := r.submit(2, "sleep 12", 1, nil)
	r.eventually("two instances run", 30*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	pids := map[string]int{}
	for _, id := range ids {
		m := *r.instance(id).AssignedTo
		pids[m] = workerPID(t, r.dir, m)
	}
	if len(pids) != 2 {
		t.Fatalf("the instances share a worker: %v", pids)
	}
	launches := strings.Count(r.events(), " launched:")
	if launches != 2 {
		t.Fatalf("%d launches before the crash, want 2:\n%s", launches, r.events())
	}

	// The marker count must see the workers and their instances, so that
	// its 0 at the end means something.
	if n := markedProcesses(t, filepath.Join(dir, "data"), "burst"); n < 4 {
		t.Fatalf("%d processes carry the provider's marker, want ≥ 4 (2 workers, 2 instances)", n)
	}
	if err := up1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = up1.cmd.Wait()
	for m, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("worker %s (pid %d) died with tide up: %v", m, pid, err)
		}
	}

	up2, r := startUpProcess(t, dir, port)
	r.eventually("the restarted pool adopts both machines", 30*time.Second, func() (bool, string) {
		p := r.pool("burst")
		return p.Ready == 2 && strings.Contains(r.events(), "2 joined and 0 launching machines adopted"),
			fmt.Sprintf("%+v", p)
	})
	for m, pid := range pids {
		if got := workerPID(t, r.dir, m); got != pid {
			t.Errorf("machine %s runs worker pid %d, want the adopted %d", m, got, pid)
		}
	}
	r.eventually("the instances complete", 30*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["COMPLETED"] == 2, fmt.Sprint(st)
	})
	for _, id := range ids {
		if in := r.instance(id); in.Attempt != 1 {
			t.Errorf("instance %s completed at attempt %d, want 1 (run once)", id, in.Attempt)
		}
	}
	if n := strings.Count(r.events(), " launched:"); n != launches {
		t.Errorf("%d launches after the restart, want %d (nothing new):\n%s", n, launches, r.events())
	}
	entries, err := os.ReadDir(filepath.Join(dir, "data", "machines", "burst", "machines"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("%d machines in the provider's ledger, want 2", len(entries))
	}

	if err := up2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- up2.cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("tide up after SIGTERM: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("tide up did not stop within 40s of SIGTERM")
	}
	if n := workerProcesses(dir); n != 0 {
		t.Errorf("%d processes of this run still alive after SIGTERM", n)
	}
	if n := markedProcesses(t, filepath.Join(dir, "data"), "burst"); n != 0 {
		t.Errorf("%d processes carrying the provider's marker still alive after SIGTERM", n)
	}
}

const gpuPool = `pools:
  - name: burst
    provider: {type: local}
    nodes: [0, 4]
    offerings:
      - {type: local-1gpu, cpu: 1, memory: 1Gi, gpus: 1, price: 0.5}
    scaling: {policy: %s, idle_timeout: 4s, cooldown: 2s, batch_window: 500ms, reconcile_interval: 1s,
              slots_per_node: 1, scale_in_datapoints: 2, metric_period: 1s, scale_down_delay: 4s}
`

// TestEveryPolicyDrivesTheBurst runs a smaller burst (12 instances of a
// second on [0, 4]) under each of the four policies; utilization scales on
// GPUs, so its pool sells one-GPU nodes and its instances ask for a GPU.
func TestEveryPolicyDrivesTheBurst(t *testing.T) {
	for _, tc := range []struct {
		policy string
		gpu    bool
	}{{"tide", false}, {"skyward", false}, {"target-tracking", false}, {"utilization", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			start := time.Now()
			yaml, extra := fmt.Sprintf(burstPool, tc.policy), func(*httpapi.SubmitRequest) {}
			if tc.gpu {
				yaml = fmt.Sprintf(gpuPool, tc.policy)
				extra = func(req *httpapi.SubmitRequest) { req.ResourceRequirements.GPUUnits = new(int64(1)) }
			}
			r := startUp(t, yaml)
			if p := r.pool("burst"); p.Policy != tc.policy {
				t.Fatalf("pool runs policy %q, want %q", p.Policy, tc.policy)
			}
			ids := r.submit(12, "sleep 1", 1, extra)
			peak := 0
			r.eventually("all 12 instances complete", 60*time.Second, func() (bool, string) {
				p := r.pool("burst")
				peak = max(peak, p.Ready)
				st := r.statuses(ids)
				return st["COMPLETED"] == 12, fmt.Sprintf("%v, pool ready %d desired %d", st, p.Ready, p.Desired)
			})
			if peak < 2 {
				t.Errorf("the pool peaked at %d ready nodes: the burst did not scale it out", peak)
			}
			r.stop()
			if n := workerProcesses(r.dir); n != 0 {
				t.Errorf("%d processes of this run still alive after Ctrl-C", n)
			}
			t.Logf("%s: 12 instances done, peak %d nodes, %v", tc.policy, peak, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// TestPrometheusScrapesTide starts Debian's prometheus against a running
// head and reads tide_pool_desired_nodes back through its query API.
// Skipped when prometheus is not installed (scripts/test installs it).
func TestPrometheusScrapesTide(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus)")
	}
	r := startUp(t, fmt.Sprintf(fixedPool, "2"))
	r.eventually("the fixed pool reaches 2 ready", 30*time.Second, func() (bool, string) {
		p := r.pool("fixed")
		return p.Ready == 2, fmt.Sprintf("%+v", p)
	})
	head, err := url.Parse(r.cl.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"+
		"scrape_configs:\n  - job_name: tide\n    metrics_path: /metrics\n    static_configs:\n      - targets: [%q]\n", head.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	prom := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = logf, logf
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = prom.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = prom.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = prom.Process.Kill()
			<-done
		}
	})
	query := "http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(`tide_pool_desired_nodes{pool="fixed"}`)
	r.eventually("prometheus returns tide_pool_desired_nodes", 40*time.Second, func() (bool, string) {
		resp, err := http.Get(query)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err.Error()
		}
		if body.Status != "success" || len(body.Data.Result) != 1 {
			return false, fmt.Sprintf("%+v", body)
		}
		res := body.Data.Result[0]
		return res.Metric["job"] == "tide" && res.Value[1] == "2", fmt.Sprintf("%+v", res)
	})
}
