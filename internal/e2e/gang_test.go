package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

// gangSpec is a submit of replicas instances as one gang (or of one
// instance when replicas is 0) with cpu cores each.
type gangSpec struct {
	cmd         string
	cpu         float64
	replicas    int
	gang        *httpapi.GangRequest
	priority    int
	restartable bool
	labels      map[string]string
	pool        string
	// restartPolicy and maxRestarts, when set, are the instances'.
	restartPolicy string
	maxRestarts   int
}

func (cl *cluster) submitGang(s gangSpec) []string {
	cl.t.Helper()
	return submitTo(cl.t, cl.c, s)
}

func submitTo(t *testing.T, c *client.Client, s gangSpec) []string {
	t.Helper()
	mem := int64(16)
	req := &httpapi.SubmitRequest{Command: &s.cmd, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &s.cpu, MemoryMB: &mem},
		Labels: s.labels, Gang: s.gang}
	if s.replicas > 0 {
		req.Replicas = &s.replicas
	}
	if s.priority != 0 {
		req.Priority = &s.priority
	}
	if s.restartable {
		req.Restartable = &s.restartable
	}
	if s.pool != "" {
		req.Pool = &s.pool
	}
	if s.restartPolicy != "" {
		req.RestartPolicy, req.MaxRestarts = &s.restartPolicy, &s.maxRestarts
	}
	res, err := c.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("submit %q: %v", s.cmd, err)
	}
	if len(res.InstanceIDs) == 0 {
		return []string{res.InstanceID}
	}
	return res.InstanceIDs
}

// gangLines reads the "<gang> <rank> <size> <hosts>" lines the instances
// of gangs write at start.
func gangLines(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("line %q: want gang, rank, size and hosts", l)
		}
		out[f[0]] = append(out[f[0]], l)
	}
	return out
}

const gangCmd = `echo "$TIDE_GANG_NAME $TIDE_GANG_RANK $TIDE_GANG_SIZE $TIDE_GANG_HOSTS" >> %s; sleep %s`

// TestGangsStartWholeOnRealWorkers: two 3-instance gangs on two worker
// processes with room for 4 such instances at once: one gang runs whole,
// the other waits whole and then runs whole; no poll ever sees part of a
// gang running while the rest waits (never 2+2). Each instance's process
// reads its gang, rank, size and every rank's host from its environment.
func TestGangsStartWholeOnRealWorkers(t *testing.T) {
	cl := newCluster(t)
	cl.startHead()
	cl.startWorker("gw1", freePort(t)+1000)
	cl.startWorker("gw2", freePort(t)+2000)
	out := filepath.Join(cl.dir, "gangs.txt")
	for _, g := range []string{"ga", "gb"} {
		ids := cl.submitGang(gangSpec{cmd: fmt.Sprintf(gangCmd, out, "2"), cpu: 2, replicas: 3,
			gang: &httpapi.GangRequest{Name: g}, labels: map[string]string{"gang": g}})
		if len(ids) != 3 {
			t.Fatalf("gang %s: %d instances", g, len(ids))
		}
	}
	ctx := context.Background()
	polls, sawWait := 0, false
	cl.waitFor(90*time.Second, "both gangs to complete", func() (bool, string) {
		polls++
		done := 0
		active := map[string]int{}
		for _, g := range []string{"ga", "gb"} {
			ins, err := cl.c.Instances(ctx, client.ListOptions{Labels: map[string]string{"gang": g}})
			if err != nil {
				t.Fatal(err)
			}
			byStatus := map[string]int{}
			for _, in := range ins {
				byStatus[in.Status]++
			}
			active[g] = byStatus["ASSIGNED"] + byStatus["RUNNING"]
			if active[g] > 0 && byStatus["PENDING"] > 0 {
				t.Fatalf("gang %s partly placed: %v", g, byStatus)
			}
			if byStatus["FAILED"]+byStatus["CANCELLED"] > 0 {
				t.Fatalf("gang %s: %v", g, byStatus)
			}
			if byStatus["PENDING"] == 3 && (active["ga"] > 0 || active[g] > 0) {
				sawWait = true
			}
			done += byStatus["COMPLETED"]
		}
		if active["ga"]+active["gb"] > 4 {
			t.Fatalf("%v instances active on room for 4", active)
		}
		return done == 6, fmt.Sprintf("%d completed, active %v", done, active)
	})
	if !sawWait {
		t.Fatal("never saw a gang wait whole while the other ran")
	}
	lines := gangLines(t, out)
	for _, g := range []string{"ga", "gb"} {
		ls := lines[g]
		if len(ls) != 3 {
			t.Fatalf("gang %s started %d processes: %v", g, len(ls), ls)
		}
		var ranks []string
		hosts := strings.Fields(ls[0])[3]
		for _, l := range ls {
			f := strings.Fields(l)
			ranks = append(ranks, f[1])
			if f[2] != "3" || f[3] != hosts || len(strings.Split(hosts, ",")) != 3 || strings.Contains(","+hosts+",", ",,") {
				t.Fatalf("gang %s: line %q, want size 3 and the same 3 hosts %q", g, l, hosts)
			}
		}
		slices.Sort(ranks)
		if !slices.Equal(ranks, []string{"0", "1", "2"}) {
			t.Fatalf("gang %s ranks %v", g, ranks)
		}
	}
	t.Logf("%d polls; gangs ran one after the other, whole", polls)
}

// TestPriorityPreemptsOnRealWorkers: on a full worker of a pool that cannot
// grow, a waiting instance of higher priority preempts the restartable
// instance of lower priority (after the grace; its process is stopped, it
// is requeued, an event names both) and never the non-restartable one,
// whatever its priority.
func TestPriorityPreemptsOnRealWorkers(t *testing.T) {
	cl := newCluster(t)
	cl.headArgs = []string{"--preempt-grace", "1s"}
	cl.startHead()
	cl.startWorker("pw1", freePort(t)+1000)
	pids := filepath.Join(cl.dir, "pids")
	if err := os.Mkdir(pids, 0o700); err != nil {
		t.Fatal(err)
	}
	sleeper := func(name string) string {
		return fmt.Sprintf(`echo $$ > %s/%s.$(date +%%s%%N); exec sleep 300`, pids, name)
	}
	lo := cl.submitGang(gangSpec{cmd: sleeper("lo"), cpu: 2, priority: 1, restartable: true})[0]
	fixed := cl.submitGang(gangSpec{cmd: sleeper("fixed"), cpu: 2, priority: -5})[0]
	cl.waitStatus(lo, "RUNNING", 30*time.Second)
	cl.waitStatus(fixed, "RUNNING", 30*time.Second)
	hi := cl.submitGang(gangSpec{cmd: sleeper("hi"), cpu: 2, priority: 10})[0]
	cl.waitStatus(hi, "RUNNING", 30*time.Second)
	if in := cl.get(lo); in.Status != "PENDING" || deref(in.FailureReason) != "PREEMPTED" {
		t.Fatalf("low-priority restartable instance: %s, reason %v", in.Status, deref(in.FailureReason))
	}
	if in := cl.get(fixed); in.Status != "RUNNING" || in.Attempt != 1 {
		t.Fatalf("non-restartable instance: %s attempt %d", in.Status, in.Attempt)
	}
	// The preempted attempt's process is gone.
	loPIDs, _ := filepath.Glob(filepath.Join(pids, "lo.*"))
	if len(loPIDs) != 1 {
		t.Fatalf("lo started %d times", len(loPIDs))
	}
	b, _ := os.ReadFile(loPIDs[0])
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	cl.waitFor(20*time.Second, "the preempted process to exit", func() (bool, string) {
		err := syscall.Kill(pid, 0)
		return err == syscall.ESRCH, fmt.Sprint(err)
	})
	evs, err := cl.c.Events(context.Background(), client.EventOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	named := false
	for _, e := range evs {
		reasons = append(reasons, e.Reason)
		if e.Reason == "Preempting" && strings.Contains(e.Message, hi) && strings.Contains(e.Message, lo) {
			named = true
		}
	}
	if !named || !slices.Contains(reasons, "InstancePreempted") {
		t.Fatalf("events %v: want Preempting naming %s and %s, then InstancePreempted", reasons, hi, lo)
	}
	// Nothing running now may be preempted: fixed is not restartable, hi
	// neither. A waiting instance of the highest priority waits.
	top := cl.submitGang(gangSpec{cmd: sleeper("top"), cpu: 2, priority: 100})[0]
	time.Sleep(4 * time.Second) // 4 preempt graces, 8 scheduler intervals
	if in := cl.get(top); in.Status != "PENDING" {
		t.Fatalf("top %s", in.Status)
	}
	for _, id := range []string{fixed, hi} {
		if in := cl.get(id); in.Status != "RUNNING" || in.Attempt != 1 {
			t.Fatalf("%s preempted: %s attempt %d", id, in.Status, in.Attempt)
		}
	}
	for _, id := range []string{lo, fixed, hi, top} {
		cl.cancel(id, time.Second)
	}
}

// startHeadWithPools starts the head with the pool configuration yaml.
func (cl *cluster) startHeadWithPools(yaml string) {
	cl.t.Helper()
	conf := filepath.Join(cl.dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		cl.t.Fatal(err)
	}
	cl.headArgs = []string{"--config", conf}
	cl.startHead()
}

// pool returns the head's view of the pool name, failing the test when the
// head does not list it.
func (cl *cluster) pool(name string) httpapi.PoolJSON {
	cl.t.Helper()
	ps, err := cl.c.Pools(context.Background())
	if err != nil {
		cl.t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	cl.t.Fatalf("pool %s not listed", name)
	return httpapi.PoolJSON{}
}

// TestGangFailsWholeWithoutNodes: a local-provider pool of at most 2
// one-core nodes cannot give a gang of 3 one-core instances: no node is
// bought for it at any time, and once its max_wait passed it fails whole
// with the reason. A gang of 2 then gets both its nodes in one scale-up
// (the desired count goes from 0 to 2, never 1) and runs whole.
func TestGangFailsWholeWithoutNodes(t *testing.T) {
	cl := newCluster(t)
	cl.startHeadWithPools(`pools:
  - name: gp
    provider: {type: local}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 256Mi, price: 1}
    scaling: {policy: tide, idle_timeout: 2s, batch_window: 200ms, reconcile_interval: 250ms}
`)
	pool := func() httpapi.PoolJSON { return cl.pool("gp") }
	out := filepath.Join(cl.dir, "gangs.txt")
	big := cl.submitGang(gangSpec{cmd: fmt.Sprintf(gangCmd, out, "1"), cpu: 1, replicas: 3, pool: "gp",
		gang: &httpapi.GangRequest{Name: "big", MaxWait: "4s"}})
	cl.waitFor(30*time.Second, "the gang of 3 to fail", func() (bool, string) {
		if p := pool(); p.Desired != 0 || p.Ready+p.Pending+p.Workers != 0 {
			t.Fatalf("nodes bought for a gang the pool cannot hold: desired %d, ready %d, pending %d, workers %d",
				p.Desired, p.Ready, p.Pending, p.Workers)
		}
		failed := 0
		for _, id := range big {
			in := cl.get(id)
			if in.Status == "FAILED" {
				failed++
				if r := deref(in.FailureReason); !strings.Contains(fmt.Sprint(r), "gang big (3 instances) not placed within 4s") {
					t.Fatalf("reason %v", r)
				}
			} else if in.Status != "PENDING" {
				t.Fatalf("gang member %s", in.Status)
			}
		}
		return failed == 3, fmt.Sprintf("%d of 3 failed", failed)
	})
	small := cl.submitGang(gangSpec{cmd: fmt.Sprintf(gangCmd, out, "1"), cpu: 1, replicas: 2, pool: "gp",
		gang: &httpapi.GangRequest{Name: "pair", MaxWait: "2m"}})
	var desired []int
	cl.waitFor(90*time.Second, "the gang of 2 to complete", func() (bool, string) {
		if d := pool().Desired; len(desired) == 0 || desired[len(desired)-1] != d {
			desired = append(desired, d)
		}
		done := 0
		for _, id := range small {
			switch in := cl.get(id); in.Status {
			case "COMPLETED":
				done++
			case "PENDING", "ASSIGNED", "RUNNING":
			default:
				t.Fatalf("pair member %s: %v", in.Status, deref(in.FailureReason))
			}
		}
		return done == 2, fmt.Sprintf("%d of 2 completed, desired so far %v", done, desired)
	})
	if len(desired) < 2 || desired[0] != 0 || desired[1] != 2 {
		t.Fatalf("desired node counts %v: want 0 then 2 (one scale-up for the whole gang)", desired)
	}
	lines := gangLines(t, out)
	if len(lines["big"]) != 0 || len(lines["pair"]) != 2 {
		t.Fatalf("started: %v", lines)
	}
	t.Logf("desired node counts seen: %v", desired)
}

// TestGangFailsWholeWhenTheProviderIsSlow: a pool whose machines boot in
// 30 s (the local provider's start_delay) buys the two nodes of a gang of
// two one-core instances with a max_wait of 3 s, in one purchase. The
// machines are still booting when the max_wait passes: the gang fails
// whole with the reason, and then every machine bought for it is released
// (the booting ones cancelled: no worker ever registers, and the provider
// is left with no machine but tombstones, the pool's min being 0) well
// before they would have joined. No member ever runs.
func TestGangFailsWholeWhenTheProviderIsSlow(t *testing.T) {
	cl := newCluster(t)
	cl.startHeadWithPools(`pools:
  - name: slow
    provider: {type: local, options: {start_delay: 30s}}
    nodes: [0, 4]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 256Mi, price: 1}
    scaling: {policy: tide, idle_timeout: 2s, batch_window: 200ms, reconcile_interval: 250ms}
`)
	ctx := context.Background()
	pool := func() httpapi.PoolJSON { return cl.pool("slow") }
	// Every poll: no member ever placed, no worker ever registered.
	noRun := func(ids []string) {
		for _, id := range ids {
			switch in := cl.get(id); in.Status {
			case "PENDING", "FAILED":
			default:
				t.Fatalf("gang member %s is %s", id, in.Status)
			}
		}
		ws, err := cl.c.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			t.Fatalf("a machine bought for the gang joined as worker %s (%s): it should have been cancelled while booting", ws[0].WorkerID, ws[0].Status)
		}
	}
	out := filepath.Join(cl.dir, "gangs.txt")
	start := time.Now()
	ids := cl.submitGang(gangSpec{cmd: fmt.Sprintf(gangCmd, out, "1"), cpu: 1, replicas: 2, pool: "slow",
		gang: &httpapi.GangRequest{Name: "slowgang", MaxWait: "3s"}})
	var desired []int
	seen := func() {
		if d := pool().Desired; len(desired) == 0 || desired[len(desired)-1] != d {
			desired = append(desired, d)
		}
	}
	cl.waitFor(20*time.Second, "the gang to fail", func() (bool, string) {
		seen()
		noRun(ids)
		failed := 0
		for _, id := range ids {
			if in := cl.get(id); in.Status == "FAILED" {
				failed++
				if r := fmt.Sprint(deref(in.FailureReason)); !strings.Contains(r, "gang slowgang (2 instances) not placed within 3s") {
					t.Fatalf("reason %q", r)
				}
			}
		}
		return failed == 2, fmt.Sprintf("%d of 2 failed, desired so far %v", failed, desired)
	})
	if !slices.Contains(desired, 2) {
		t.Fatalf("desired node counts %v: the gang's 2 nodes were never bought", desired)
	}
	failedAfter := time.Since(start)
	machines := filepath.Join(cl.headDir, "machines", "slow", "machines")
	var live []string
	cl.waitFor(20*time.Second, "every machine bought for the gang to be released", func() (bool, string) {
		seen()
		noRun(ids)
		p := pool()
		nodes, err := cl.c.Nodes(ctx, &p.Name)
		if err != nil {
			t.Fatal(err)
		}
		live = live[:0]
		recs, _ := filepath.Glob(filepath.Join(machines, "*", "machine.json"))
		for _, r := range recs {
			b, err := os.ReadFile(r)
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Deleted bool `json:"deleted"`
			}
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if !rec.Deleted {
				live = append(live, filepath.Base(filepath.Dir(r)))
			}
		}
		return p.Desired == 0 && p.Ready+p.Pending+p.Draining == 0 && len(nodes) == 0 && len(live) == 0 && len(recs) >= 2,
			fmt.Sprintf("desired %d, ready %d, pending %d, draining %d, %d nodes, machines %v of %d records",
				p.Desired, p.Ready, p.Pending, p.Draining, len(nodes), live, len(recs))
	})
	released := time.Since(start)
	if released >= 30*time.Second {
		t.Fatalf("released after %s, past the machines' 30s boot: not cancelled while booting", released)
	}
	noRun(ids)
	if b, err := os.ReadFile(out); err == nil && len(b) > 0 {
		t.Fatalf("a gang member ran: %s", b)
	}
	t.Logf("desired node counts %v; gang failed after %s, its machines released after %s", desired,
		failedAfter.Round(time.Millisecond), released.Round(time.Millisecond))
}

// TestGangRestartsWholeOnRealWorkers: a restartable gang of two runs on two
// worker processes, with the restart policy on-failure; rank 1's process
// fails on its first attempt. The head restarts the gang whole: rank 0's
// running process is stopped too (SIGTERM), and both ranks start again
// together on their second attempt, with every rank's host; no process of
// the second attempt starts before both of the first have ended. An event
// GangRestart says why, and the gang completes.
func TestGangRestartsWholeOnRealWorkers(t *testing.T) {
	cl := newCluster(t)
	cl.startHead()
	cl.startWorker("rw1", freePort(t)+1000)
	cl.startWorker("rw2", freePort(t)+2000)
	out := filepath.Join(cl.dir, "restart.txt")
	flag := filepath.Join(cl.dir, "failed-once")
	cmd := fmt.Sprintf(`echo "start $TIDE_GANG_RANK $TIDE_GANG_HOSTS" >> %[1]s
trap 'echo "stop $TIDE_GANG_RANK" >> %[1]s; exit 143' TERM
if [ "$TIDE_GANG_RANK" = 1 ] && mkdir %[2]s 2>/dev/null; then sleep 1; echo "stop 1" >> %[1]s; exit 1; fi
t=2; [ "$(grep -c "^start $TIDE_GANG_RANK " %[1]s)" = 1 ] && t=60 # the first attempt runs until the restart stops it
sleep $t & wait $!
echo "done $TIDE_GANG_RANK" >> %[1]s`, out, flag)
	ids := cl.submitGang(gangSpec{cmd: cmd, cpu: 4, replicas: 2, gang: &httpapi.GangRequest{Name: "rg"}, restartable: true,
		restartPolicy: "on-failure", maxRestarts: 2})
	cl.waitFor(90*time.Second, "the gang to complete after one restart", func() (bool, string) {
		done := 0
		var st []string
		for _, id := range ids {
			in := cl.get(id)
			st = append(st, fmt.Sprintf("%s/%d", in.Status, in.Attempt))
			switch in.Status {
			case "COMPLETED":
				done++
			case "FAILED", "CANCELLED":
				t.Fatalf("member %s: %s (%v)", id, in.Status, deref(in.FailureReason))
			}
		}
		return done == 2, strings.Join(st, " ")
	})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// start 0/1, stop 1 (its failure), stop 0 (stopped for the restart),
	// then start 0/1 again and done 0/1; the first two and the last four
	// in either order within their kind.
	count := map[string]int{}
	var order []string
	for _, l := range lines {
		f := strings.Fields(l)
		count[f[0]]++
		order = append(order, f[0])
		if f[0] == "start" && (len(f) != 3 || len(strings.Split(f[2], ",")) != 2 || strings.Contains(f[2], ",,") ||
			strings.HasPrefix(f[2], ",") || strings.HasSuffix(f[2], ",")) {
			t.Fatalf("line %q: want both ranks' hosts", l)
		}
	}
	if count["start"] != 4 || count["stop"] != 2 || count["done"] != 2 {
		t.Fatalf("lines %q: want 4 starts, 2 stops (rank 1 failing, rank 0 stopped for the restart) and 2 completions", lines)
	}
	if i := slices.Index(order, "stop"); i != 2 || order[3] != "stop" {
		t.Fatalf("lines %q: a process of the second attempt started before both of the first ended", lines)
	}
	for _, id := range ids {
		if in := cl.get(id); in.Attempt != 2 {
			t.Fatalf("member %s completed on attempt %d, want 2", id, in.Attempt)
		}
	}
	evs, err := cl.c.Events(context.Background(), client.EventOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarts := 0
	for _, e := range evs {
		if e.Reason == "GangRestart" && strings.Contains(e.Message, "gang rg: rank 1") {
			restarts++
		}
	}
	if restarts != 1 {
		t.Fatalf("%d GangRestart events, want 1", restarts)
	}
	t.Logf("lines: %q", lines)
}

// TestGangPreemptedWholeOnRealWorkers: a restartable gang of two fills two
// worker processes of a pool that cannot grow; an instance of higher
// priority preempts one member, and so the whole gang: after the grace
// both members' processes are stopped and the gang waits whole while the
// preemptor runs (no member running alone), then runs again whole once the
// preemptor is cancelled, never placed in part.
func TestGangPreemptedWholeOnRealWorkers(t *testing.T) {
	cl := newCluster(t)
	cl.headArgs = []string{"--preempt-grace", "1s"}
	cl.startHead()
	cl.startWorker("pg1", freePort(t)+1000)
	cl.startWorker("pg2", freePort(t)+2000)
	out := filepath.Join(cl.dir, "preempt.txt")
	cmd := fmt.Sprintf(`echo "start $TIDE_GANG_RANK $$" >> %[1]s; trap 'echo "stop $TIDE_GANG_RANK $$" >> %[1]s; exit 143' TERM; sleep 300 & wait $!`, out)
	ids := cl.submitGang(gangSpec{cmd: cmd, cpu: 4, replicas: 2, gang: &httpapi.GangRequest{Name: "pg"}, restartable: true})
	for _, id := range ids {
		cl.waitStatus(id, "RUNNING", 30*time.Second)
	}
	hi := cl.submitGang(gangSpec{cmd: "exec sleep 300", cpu: 4, priority: 10})[0]
	// The scheduler never places part of the gang: no member runs a later
	// attempt while another waits. (Stopping the members for the restart
	// takes one store write each, so a poll may land between two of them.)
	partial := func() {
		waiting, again := 0, 0
		for _, id := range ids {
			switch in := cl.get(id); {
			case in.Status == "PENDING":
				waiting++
			case in.Attempt > 1 && (in.Status == "ASSIGNED" || in.Status == "RUNNING"):
				again++
			}
		}
		if waiting > 0 && again > 0 {
			t.Fatalf("gang partly placed again: %d waiting, %d on a later attempt", waiting, again)
		}
	}
	cl.waitFor(30*time.Second, "the preemptor to run and the gang to wait whole", func() (bool, string) {
		partial()
		in := cl.get(hi)
		a, b := cl.get(ids[0]), cl.get(ids[1])
		return in.Status == "RUNNING" && a.Status == "PENDING" && b.Status == "PENDING",
			fmt.Sprintf("hi %s, gang %s %s", in.Status, a.Status, b.Status)
	})
	cl.waitFor(20*time.Second, "both first attempts to be stopped", func() (bool, string) {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "stop ") == 2, string(b)
	})
	for range 6 { // the gang keeps waiting whole while the preemptor runs
		for _, id := range ids {
			if in := cl.get(id); in.Status != "PENDING" {
				t.Fatalf("member %s %s while the preemptor runs", id, in.Status)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	cl.cancel(hi, time.Second)
	cl.waitFor(30*time.Second, "the gang to run again whole", func() (bool, string) {
		partial()
		a, b := cl.get(ids[0]), cl.get(ids[1])
		return a.Status == "RUNNING" && b.Status == "RUNNING" && a.Attempt == 2 && b.Attempt == 2,
			fmt.Sprintf("%s/%d %s/%d", a.Status, a.Attempt, b.Status, b.Attempt)
	})
	b, _ := os.ReadFile(out)
	if n := strings.Count(string(b), "start "); n != 4 {
		t.Fatalf("%d starts, want 2 per attempt:\n%s", n, b)
	}
	for _, id := range ids {
		cl.cancel(id, time.Second)
	}
}
