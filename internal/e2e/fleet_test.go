package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fleetRig is one etcd, a coordinator, one shard whose provider runs local
// worker processes, and heads whose pools get their machines from the fleet.
type fleetRig struct {
	*cluster
	etcd     *etcdtest.Server
	coord    string // the coordinator's Fleet API address
	conf     string // the fleet's configuration file
	shardDir string
	coordD   *daemon
	shardD   *daemon
	headArgv map[string][]string
	headD    map[string]*daemon
	heads    map[string]*client.Client
}

const fleetConfig = `{
  "offerings": [{"provider": "here", "profile": "local-1cpu",
                 "offering": {"type": "local-1cpu", "cpu": 1, "memory": "256Mi", "price": 1}}],
  "providers": [{"name": "here", "type": "local"}],
  "shards": [{"id": 1, "quota": [{"provider": "here", "offering": "local-1cpu/on-demand", "count": 2}]}]
}`

func startFleet(t *testing.T) *fleetRig {
	t.Helper()
	r := &fleetRig{cluster: newCluster(t), etcd: etcdtest.Start(t), heads: map[string]*client.Client{},
		headArgv: map[string][]string{}, headD: map[string]*daemon{}}
	r.conf = filepath.Join(r.dir, "fleet.json")
	if err := os.WriteFile(r.conf, []byte(fleetConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	r.coord = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.shardDir = filepath.Join(r.dir, "shard")
	// The shard's machines outlive the shard on purpose (its successor adopts
	// them): the test stops them itself.
	t.Cleanup(r.killMachines)
	r.startCoordinator()
	r.startShard()
	return r
}

// startCoordinator starts the coordinator and waits until it leads.
func (r *fleetRig) startCoordinator() {
	r.t.Helper()
	r.coordD = r.start("coordinator", "fleet", "coordinator", "--etcd", r.etcd.Endpoint(), "--listen", r.coord,
		"--config", r.conf, "--interval", "500ms", "--lease-ttl", "2s")
	r.waitFor(20*time.Second, "the coordinator to lead", func() (bool, string) {
		st, err := r.fleetStatus()
		if err != nil {
			return false, err.Error()
		}
		return st.GetCoordinator().GetLeader(), "not leading"
	})
}

// startShard starts shard 1's controller and waits until it is live.
func (r *fleetRig) startShard() {
	r.t.Helper()
	r.shardD = r.start("shard", "fleet", "shard", "--etcd", r.etcd.Endpoint(), "--shard", "1", "--data-dir", r.shardDir,
		"--interval", "250ms", "--lease-ttl", "2s")
	r.waitFor(30*time.Second, "shard 1 to run", func() (bool, string) {
		st, err := r.fleetStatus()
		if err != nil {
			return false, err.Error()
		}
		for _, sh := range st.GetShards() {
			if sh.GetShard() == 1 && sh.GetLive() {
				return true, ""
			}
		}
		return false, "shard 1 not live"
	})
}

func (r *fleetRig) fleetStatus() (*fleetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(r.coord, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return fleetv1.NewFleetClient(cc).Status(ctx, &fleetv1.StatusRequest{})
}

// startHead starts a head named name whose pool fa gets its machines from
// the fleet as cluster name, at priority.
func (r *fleetRig) startHead(name string, priority int) *client.Client {
	r.t.Helper()
	port := freePort(r.t)
	dir := filepath.Join(r.dir, "head-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	pools := fmt.Sprintf(`pools:
  - name: fa
    provider: {type: fleet, options: {coordinator: %q, cluster: %s, priority: %d, period: 500ms}}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 256Mi, price: 1}
    scaling: {policy: tide, idle_timeout: 1s, batch_window: 200ms, reconcile_interval: 250ms}
`, r.coord, name, priority)
	conf := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte(pools), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.headArgv[name] = []string{"head", "--config", conf, "--port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--token", token, "--poll-timeout", "1s", "--scheduler-interval", "200ms", "--log-level", "info"}
	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), token, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.heads[name] = c
	r.runHead(name)
	return c
}

// headPort is the port of the head c talks to.
func (r *fleetRig) headPort(c *client.Client) string {
	u := c.BaseURL()
	return u[strings.LastIndex(u, ":")+1:]
}

// runHead starts (or starts again) head name's process and waits until it
// answers.
func (r *fleetRig) runHead(name string) {
	r.t.Helper()
	d := r.start("head-"+name, r.headArgv[name]...)
	r.headD[name] = d
	r.waitFor(20*time.Second, "head "+name+" to answer", func() (bool, string) {
		select {
		case <-d.done:
			r.t.Fatalf("head %s exited: %v", name, d.cmd.ProcessState)
		default:
		}
		err := r.heads[name].Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
}

// firstAttemptRunning reports whether instance id of head c runs its first
// attempt: it was never stopped or run again.
func firstAttemptRunning(c *client.Client, id string) (bool, string) {
	in, err := c.Instance(context.Background(), id)
	if err != nil {
		return false, err.Error()
	}
	return in.Status == "RUNNING" && in.Attempt == 1, fmt.Sprintf("%s attempt %d", in.Status, in.Attempt)
}

// waitNoneOnline waits until no worker of head c is ONLINE: its pool has
// given its machines back.
func (r *fleetRig) waitNoneOnline(c *client.Client, name string) {
	r.t.Helper()
	r.waitFor(60*time.Second, name+"'s pool to give its machines back", func() (bool, string) {
		ws, err := c.Workers(context.Background())
		if err != nil {
			return false, err.Error()
		}
		online := 0
		for _, w := range ws {
			if w.Status == "ONLINE" {
				online++
			}
		}
		return online == 0, fmt.Sprintf("%d workers of %s online", online, name)
	})
}

// killMachines kills the worker process group of every machine the shard's
// local provider recorded, and of every instance those workers ran.
func (r *fleetRig) killMachines() {
	r.stopDaemons() // no shard or head left to start a worker again
	machines := filepath.Join(r.shardDir, "here", "machines", "*")
	recs, _ := filepath.Glob(filepath.Join(machines, "machine.json"))
	// and the instances the workers ran, each in a process group of its own
	runs, _ := filepath.Glob(filepath.Join(machines, "data", "run", "*", "record.json"))
	for _, p := range append(recs, runs...) {
		var rec struct {
			PID int `json:"pid"`
		}
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
			syscall.Kill(-rec.PID, syscall.SIGKILL)
		}
	}
}

// machines lists the shard provider's machine ids (one directory each: the
// local provider never reuses an id, so this counts its Creates).
func (r *fleetRig) machines() []string {
	ents, _ := os.ReadDir(filepath.Join(r.shardDir, "here", "machines"))
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// blobOfMachine reads the bootstrap blob a shard machine was configured with.
func (r *fleetRig) blobOfMachine(id string) (provider.Bootstrap, bool) {
	data, err := os.ReadFile(filepath.Join(r.shardDir, "here", "machines", id, "machine.json"))
	if err != nil {
		return provider.Bootstrap{}, false
	}
	var rec struct {
		Bootstrap []byte `json:"bootstrap"`
	}
	if json.Unmarshal(data, &rec) != nil || len(rec.Bootstrap) == 0 {
		return provider.Bootstrap{}, false
	}
	b, err := provider.ParseBootstrap(rec.Bootstrap)
	return b, err == nil
}

func (r *fleetRig) runAll(c *client.Client, n int, cmd string) []string {
	r.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, r.submit1(c, cmd, false))
	}
	return ids
}

// submit1 submits one instance of one CPU.
func (r *fleetRig) submit1(c *client.Client, cmd string, restartable bool) string {
	r.t.Helper()
	cpu, mem := 1.0, int64(16)
	res, err := c.Submit(context.Background(), &httpapi.SubmitRequest{Command: &cmd, Restartable: &restartable,
		ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.InstanceID
}

func (r *fleetRig) waitDone(c *client.Client, ids []string, timeout time.Duration) map[string]string {
	r.t.Helper()
	workers := map[string]string{}
	r.waitFor(timeout, "instances to complete", func() (bool, string) {
		for _, id := range ids {
			in, err := c.Instance(context.Background(), id)
			if err != nil {
				return false, err.Error()
			}
			if in.Status != "COMPLETED" {
				return false, fmt.Sprintf("%s is %s (%s)", id, in.DisplayStatus, in.WaitingReason)
			}
			workers[id] = fmt.Sprint(deref(in.AssignedTo))
		}
		return true, ""
	})
	return workers
}

// TestFleetServesTwoHeads: work submitted to head A gets machines from the
// fleet that join A and run it; once A's work is done and B's arrives, B's
// runs on the machines A gave back: the shard's provider created no new
// machine, and A's credentials for them no longer register anything.
func TestFleetServesTwoHeads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and two heads")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	b := r.startHead("b", 100)

	started := time.Now()
	idsA := r.runAll(a, 2, "echo on-a; sleep 2")
	onA := r.waitDone(a, idsA, 90*time.Second)
	t.Logf("A's 2 instances ran on %v, %s after submission", onA, time.Since(started).Round(time.Millisecond))
	created := r.machines()
	if len(created) != 2 {
		t.Fatalf("the shard's provider created %v, want 2 machines", created)
	}
	// A's credentials, read from what each machine was configured with.
	credsA := map[string]provider.Bootstrap{}
	for _, id := range created {
		if bl, ok := r.blobOfMachine(id); ok && bl.Pool == "fa" {
			credsA[id] = bl
		}
	}
	if len(credsA) != 2 {
		t.Fatalf("A's blobs found for %d machines, want 2", len(credsA))
	}

	// A's pool goes idle and gives its machines back; B's work takes them.
	r.waitNoneOnline(a, "A")
	started = time.Now()
	idsB := r.runAll(b, 2, "echo on-b; sleep 1")
	onB := r.waitDone(b, idsB, 90*time.Second)
	t.Logf("B's 2 instances ran on %v, %s after submission", onB, time.Since(started).Round(time.Millisecond))
	if got := r.machines(); strings.Join(got, ",") != strings.Join(created, ",") {
		t.Errorf("the shard's provider has machines %v after B's work, want only A's old %v (no new Create)", got, created)
	}
	for id, bl := range credsA {
		if now, ok := r.blobOfMachine(id); !ok || now.Head == bl.Head {
			t.Errorf("machine %s is not configured into B: blob %+v (found %v)", id, now, ok)
		}
		body, _ := json.Marshal(map[string]any{"worker_id": bl.Machine, "host": "127.0.0.1", "pool": bl.Pool})
		req, _ := http.NewRequest("POST", bl.Head+"/workers", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+bl.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("A's credential of machine %s (worker %s) answered %d, want 401", id, bl.Machine, resp.StatusCode)
		}
	}
}

// TestFleetPreemptsForHigherPriority: the fleet's quota is held by A's
// long-running work when B asks at a much higher priority. The shard drains
// one of A's machines for B (drain first, a 10 s grace for a priority gap
// above 900,000): A cordons it and moves its restartable instance off at
// once, a non-restartable instance runs until the grace has passed, and B's
// work runs on the machine. A's events say why.
func TestFleetPreemptsForHigherPriority(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and two heads")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	b := r.startHead("b", 950000)
	keep := r.submit1(a, "sleep 600", false)
	move := r.submit1(a, "sleep 600", true)
	r.waitFor(90*time.Second, "A's two instances to run", func() (bool, string) {
		for _, id := range []string{keep, move} {
			in, err := a.Instance(context.Background(), id)
			if err != nil || in.Status != "RUNNING" {
				return false, fmt.Sprintf("%s: %v %v", id, deref(in), err)
			}
		}
		return true, ""
	})
	before, _ := a.Instance(context.Background(), move)
	workerOf := map[string]string{}
	for _, id := range []string{keep, move} {
		in, _ := a.Instance(context.Background(), id)
		workerOf[id] = fmt.Sprint(deref(in.AssignedTo))
	}
	idB := r.submit1(b, "echo on-b; sleep 15", false)

	// A hears of the preemption first: an event naming B.
	var ev httpapi.EventJSON
	r.waitFor(60*time.Second, "A's preempted event", func() (bool, string) {
		evs, err := a.Events(context.Background(), client.EventOptions{Limit: 500})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs {
			if e.Reason == "preempted" {
				ev = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none preempted", len(evs))
	})
	if !strings.Contains(ev.Message, "cluster b") {
		t.Errorf("the preempted event does not name B: %q", ev.Message)
	}
	t.Logf("A: %s", ev.Message)
	victimRan := ""
	for _, id := range []string{keep, move} {
		if workerOf[id] == ev.Node {
			victimRan = id
		}
	}
	switch victimRan {
	case move:
		// Moved off at once: a new attempt, never FAILED.
		r.waitFor(10*time.Second, "the restartable instance to move", func() (bool, string) {
			in, _ := a.Instance(context.Background(), move)
			off := in.Status == "PENDING" || in.Attempt > before.Attempt && in.Status != "FAILED"
			return off, fmt.Sprintf("%s attempt %d on %v", in.Status, in.Attempt, deref(in.AssignedTo))
		})
	case keep:
		// Runs on until the grace has passed.
		until := ev.Time.Add(8 * time.Second)
		for time.Now().Before(until) {
			if in, _ := a.Instance(context.Background(), keep); in.Status != "RUNNING" {
				t.Fatalf("the non-restartable instance on the preempted machine ended %s after the preemption, before its 10s grace: %+v",
					time.Since(ev.Time), deref(in))
			}
			time.Sleep(200 * time.Millisecond)
		}
	default:
		t.Fatalf("the preempted worker %s ran neither of A's instances", ev.Node)
	}
	r.waitFor(60*time.Second, "B's instance to run", func() (bool, string) {
		in, err := b.Instance(context.Background(), idB)
		return err == nil && in.Status == "RUNNING", fmt.Sprint(deref(in), err)
	})
	// While B holds the machine, A's pool says what it asked, what it has
	// and why it has no more.
	r.waitFor(30*time.Second, "A's pool to show its shortfall", func() (bool, string) {
		ps, err := a.Pools(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, p := range ps {
			if f := p.Fleet; p.Name == "fa" && f != nil {
				ok := f.Cluster == "a" && f.Shard == 1 && f.Short >= 1 && strings.Contains(f.Why, "at priority 100")
				return ok, fmt.Sprintf("%+v", *f)
			}
		}
		return false, "pool fa has no fleet status"
	})
	// And so does the fleet: tide fleet status's clusters, through the coordinator.
	r.waitFor(30*time.Second, "the fleet's status of cluster a", func() (bool, string) {
		st, err := r.fleetStatus()
		if err != nil {
			return false, err.Error()
		}
		for _, c := range st.GetClusters() {
			if c.GetCluster() == "a" {
				return c.GetShort() >= 1 && strings.Contains(c.GetWhy(), "priority 100"), c.String()
			}
		}
		return false, fmt.Sprintf("no cluster a in %v", st.GetClusters())
	})
	r.waitDone(b, []string{idB}, 90*time.Second)
	if got := r.machines(); len(got) != 2 {
		t.Errorf("the shard's provider has machines %v, want the quota's 2", got)
	}
	// The other of A's instances was never touched.
	other := keep
	if victimRan == keep {
		other = move
	}
	if in, _ := a.Instance(context.Background(), other); in.Status != "RUNNING" || in.Attempt != 1 {
		t.Errorf("A's instance on the machine not preempted: %+v", deref(in))
	}
}

// TestFleetDownClustersKeepRunning: static stability. With the shard and the
// coordinator killed (-9) and etcd stopped, a head's work keeps running on
// the machines it has, and its pool says the fleet is unreachable; once the
// fleet is back, the shard adopts its machines (nothing created again) and
// new work gets a new machine.
func TestFleetDownClustersKeepRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and a head")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	first := r.submit1(a, "sleep 600", false)
	running := func(id string) (bool, string) { return firstAttemptRunning(a, id) }
	r.waitFor(60*time.Second, "A's instance to run", func() (bool, string) { return running(first) })
	before := r.machines()

	r.kill9(r.shardD)
	r.kill9(r.coordD)
	r.etcd.Stop()
	r.waitFor(20*time.Second, "A's pool to say the fleet is unreachable", func() (bool, string) {
		ps, err := a.Pools(context.Background())
		if err != nil || len(ps) == 0 || ps[0].Fleet == nil {
			return false, fmt.Sprint(ps, err)
		}
		return ps[0].Fleet.LastError != "", fmt.Sprintf("%+v", *ps[0].Fleet)
	})
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if ok, why := running(first); !ok {
			t.Fatalf("with the fleet down A's instance is %s", why)
		}
		ps, _ := a.Pools(context.Background())
		if len(ps) != 1 || ps[0].Ready != 1 {
			t.Fatalf("with the fleet down A's pool is %+v, want its one node ready", ps)
		}
	}

	r.etcd.Restart()
	r.startCoordinator()
	r.startShard()
	second := r.submit1(a, "sleep 600", false)
	r.waitFor(90*time.Second, "new work to get a machine once the fleet is back", func() (bool, string) { return running(second) })
	if ok, why := running(first); !ok {
		t.Errorf("A's first instance after the fleet came back: %s", why)
	}
	after := r.machines()
	if len(after) != 2 || !strings.Contains(strings.Join(after, ","), before[0]) {
		t.Errorf("machines %v after the fleet came back, want the adopted %v and one new", after, before)
	}
}

// TestFleetHeadKilledKeepsItsMachines: kill -9 of a head whose pool holds a
// fleet machine running its work. Restarted on its data dir, the head adopts
// the machine (its claims are on disk): the instance runs on, attempt 1;
// the fleet created nothing more, and the machine is in one cluster.
func TestFleetHeadKilledKeepsItsMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and a head")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	id := r.submit1(a, "sleep 600", false)
	running := func() (bool, string) { return firstAttemptRunning(a, id) }
	r.waitFor(60*time.Second, "A's instance to run", running)
	before := r.machines()
	r.kill9(r.headD["a"])
	time.Sleep(2 * time.Second) // the shard goes on; A's needs stop for a while
	r.runHead("a")
	r.waitFor(30*time.Second, "A's pool to have its node ready again", func() (bool, string) {
		ps, err := a.Pools(context.Background())
		if err != nil || len(ps) != 1 || ps[0].Fleet == nil {
			return false, fmt.Sprint(ps, err)
		}
		return ps[0].Ready == 1 && ps[0].Fleet.Granted == 1 && ps[0].Fleet.LastError == "", fmt.Sprintf("%+v %+v", ps[0], *ps[0].Fleet)
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if ok, why := running(); !ok {
			t.Fatalf("after A's restart its instance is %s", why)
		}
	}
	if after := r.machines(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("machines %v after A's restart, want %v", after, before)
	}
}

// TestFleetShardKilledDuringTransfer: A gives its two machines back and B's
// work arrives; the shard is killed (-9) while it moves them to B and
// started again. B's work runs on A's old machines: nothing created again,
// no machine serves both clusters, and each is configured once for B.
func TestFleetShardKilledDuringTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and two heads")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	b := r.startHead("b", 100)
	r.waitDone(a, r.runAll(a, 2, "true"), 90*time.Second)
	created := r.machines()
	r.waitNoneOnline(a, "A")
	idsB := r.runAll(b, 2, "echo on-b; sleep 1")
	time.Sleep(400 * time.Millisecond) // B's needs reach the shard; the transfer starts
	r.kill9(r.shardD)
	r.startShard()
	r.waitDone(b, idsB, 120*time.Second)
	if got := r.machines(); strings.Join(got, ",") != strings.Join(created, ",") {
		t.Errorf("machines %v after the transfer, want A's old %v", got, created)
	}
	for _, id := range created {
		if bl, ok := r.blobOfMachine(id); ok && bl.Pool == "fa" && strings.Contains(bl.Head, r.headPort(a)) {
			t.Errorf("machine %s is still configured for A", id)
		}
	}
	ws, err := a.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Status == "ONLINE" {
			t.Errorf("A's worker %s is ONLINE while its machine serves B", w.WorkerID)
		}
	}
	wb, err := b.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Each machine is configured for B at most once: a configuration
	// registers a worker of its own, so no more workers than machines. Under load B's two short instances may both finish on the first
	// machine before the second one joins (and B, idle, no longer needs
	// it), so one worker is as right as two.
	if n := len(wb); n < 1 || n > len(created) {
		t.Errorf("B has %d workers, want 1 to %d (each machine configured once)", n, len(created))
	}
}
