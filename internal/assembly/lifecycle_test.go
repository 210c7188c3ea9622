package assembly

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// The real-process tests of a node's life after it joins (issue 34): local
// pools of `tide worker` processes under an in-process head.

// lifecycleAssembly runs an assembly on pools with the tide binary (or
// binary) as its machines' worker and a head whose workers go OFFLINE
// about 14s after their last heartbeat, with the fencing lease off (a
// requeued instance is placed again at once).
func lifecycleAssembly(t *testing.T, binary string, pools ...string) *testAssembly {
	t.Helper()
	dir := t.TempDir()
	ta := &testAssembly{t: t, dir: dir, path: filepath.Join(dir, "pools.yaml"), done: make(chan error, 1)}
	ta.write(pools...)
	a, err := New(context.Background(), Config{ConfigPath: ta.path, Binary: binary,
		Head: head.Config{DataDir: filepath.Join(dir, "data"), Port: freePort(t), SchedulerInterval: 100 * time.Millisecond,
			PollTimeout: 2 * time.Second, SuspectAfter: 12 * time.Second, OfflineAfter: 14 * time.Second,
			LivenessInterval: 500 * time.Millisecond, FenceMargin: -1}})
	if err != nil {
		t.Fatal(err)
	}
	ta.a = a
	ctx, cancel := context.WithCancel(context.Background())
	ta.stop = cancel
	go func() { ta.done <- a.Run(ctx) }()
	if ta.cl, err = client.New("http://"+a.Addr().String(), "", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-ta.done:
		case <-time.After(90 * time.Second):
			t.Error("the assembly did not stop within 90s")
		}
		killLeftovers(t, dir)
	})
	return ta
}

// localLifecyclePool is a local pool of nodes workers of 1 cpu with the
// given lifecycle and disruption sections.
func localLifecyclePool(name, nodes, lifecycle, extra string) string {
	return fmt.Sprintf(`  - name: %s
    provider: {type: local}
    nodes: %s
    offerings:
      - {type: l1, cpu: 1, memory: 512Mi, price: 0.1}
    scaling: {reconcile_interval: 300ms}
    lifecycle: %s
%s`, name, nodes, lifecycle, extra)
}

// procsUnder returns the pids of the processes whose command line names
// dir (the test's data dir), with their command lines.
func procsUnder(dir string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		out[pid] = strings.ReplaceAll(string(b), "\x00", " ")
	}
	return out
}

// workerPID returns the pid of the worker process of machine id.
func workerPID(dir, machine string) int {
	for pid, cmd := range procsUnder(dir) {
		if strings.Contains(cmd, " worker ") && strings.Contains(cmd, "--name "+machine+" ") {
			return pid
		}
	}
	return 0
}

// killLeftovers continues and kills whatever process of the test is left
// (a frozen worker the test could not see deleted), so nothing outlives it.
func killLeftovers(t *testing.T, dir string) {
	for pid, cmd := range procsUnder(dir) {
		syscall.Kill(pid, syscall.SIGCONT)
		syscall.Kill(pid, syscall.SIGKILL)
		t.Logf("killed a leftover process %d: %s", pid, cmd)
	}
}

// nodesOf returns pool's managed nodes as GET /nodes shows them.
func (ta *testAssembly) nodesOf(pool string) []httpapi.NodeJSON {
	ta.t.Helper()
	ns, err := ta.cl.Nodes(context.Background(), &pool)
	if err != nil {
		ta.t.Fatal(err)
	}
	return slices.DeleteFunc(ns, func(n httpapi.NodeJSON) bool { return !n.Managed })
}

// waitFor is eventually with a longer limit: these tests wait out worker
// liveness and timeouts under load.
func (ta *testAssembly) waitFor(what string, limit time.Duration, cond func() (bool, string)) {
	ta.t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(200 * time.Millisecond)
	}
	ta.t.Fatalf("%s: not within %s; last: %s\nevents:\n%s", what, limit, last, ta.eventText())
}

func (ta *testAssembly) eventText() string {
	var b strings.Builder
	for _, e := range ta.events() {
		fmt.Fprintf(&b, "%s %s %s %s: %s\n", e.Time.UTC().Format("15:04:05.000"), e.Pool, e.Type, e.Reason, e.Message)
	}
	return b.String()
}

// eventsOf returns the events of reason whose message holds every word.
func (ta *testAssembly) eventsOf(reason string, words ...string) []store.Event {
	var out []store.Event
	for _, e := range ta.events() {
		ok := e.Reason == reason
		for _, w := range words {
			ok = ok && strings.Contains(e.Message, w)
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

func (ta *testAssembly) submit(pool, command string, restartable bool) string {
	ta.t.Helper()
	cpu := 1.0
	policy := "never"
	if restartable {
		policy = "always"
	}
	req := &httpapi.SubmitRequest{Command: &command, Pool: &pool, Restartable: &restartable, RestartPolicy: &policy}
	req.ResourceRequirements = &httpapi.ResourceSpec{CPUCores: &cpu}
	resp, err := ta.cl.Submit(context.Background(), req)
	if err != nil {
		ta.t.Fatal(err)
	}
	return resp.InstanceID
}

func (ta *testAssembly) instance(id string) *httpapi.InstanceJSON {
	ta.t.Helper()
	in, err := ta.cl.Instance(context.Background(), id)
	if err != nil {
		ta.t.Fatal(err)
	}
	return in
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestFrozenWorkerIsRepaired: a worker frozen with SIGSTOP goes OFFLINE;
// past repair_after its node is replaced (the replacement joins before the
// frozen machine is deleted), the frozen process is gone, and its
// restartable instance runs elsewhere. tide_nodes_disrupted_total counts a
// repair.
func TestFrozenWorkerIsRepaired(t *testing.T) {
	ta := lifecycleAssembly(t, tideBin, localLifecyclePool("rep", "2", `{repair_after: 2s, max_unhealthy: "50%"}`, ""))
	ta.waitFor("two workers join", 60*time.Second, func() (bool, string) {
		return len(ta.machines("rep")) == 2, fmt.Sprint(ta.machines("rep"))
	})
	a := ta.submit("rep", "sleep 600", true)
	b := ta.submit("rep", "sleep 600", true)
	ta.waitFor("both run", 30*time.Second, func() (bool, string) {
		ia, ib := ta.instance(a), ta.instance(b)
		return ia.Status == "RUNNING" && ib.Status == "RUNNING", ia.Status + " " + ib.Status
	})
	frozen := deref(ta.instance(a).AssignedTo)
	pid := workerPID(ta.dir, frozen)
	if pid == 0 {
		t.Fatalf("no worker process for %s: %v", frozen, procsUnder(ta.dir))
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	frozeAt := time.Now()
	ta.waitFor("the frozen node is repaired", 90*time.Second, func() (bool, string) {
		return len(ta.eventsOf(controller.ReasonRepair, frozen, "longer than repair_after 2s")) == 1, fmt.Sprint(ta.machines("rep"))
	})
	ta.waitFor("the replacement joins and the frozen machine goes", 90*time.Second, func() (bool, string) {
		ms := ta.machines("rep")
		return len(ms) == 2 && !slices.Contains(ms, frozen), fmt.Sprint(ms)
	})
	ta.waitFor("the frozen process is gone", 30*time.Second, func() (bool, string) {
		return workerPID(ta.dir, frozen) == 0, fmt.Sprint(procsUnder(ta.dir))
	})
	ta.waitFor("the restartable instance runs elsewhere", 60*time.Second, func() (bool, string) {
		in := ta.instance(a)
		on := deref(in.AssignedTo)
		return in.Status == "RUNNING" && on != frozen && on != "", fmt.Sprintf("%s on %s attempt %d", in.Status, on, in.Attempt)
	})
	if in := ta.instance(b); in.Status != "RUNNING" || in.Attempt != 1 {
		t.Errorf("the instance on the healthy node was disturbed: %s attempt %d", in.Status, in.Attempt)
	}
	// Order: unhealthy, repair (the replacement launched), joined, then the
	// frozen machine is deleted (its deletion is confirmed a tick later).
	var order []string
	ta.waitFor("the frozen machine's deletion is recorded", 30*time.Second, func() (bool, string) {
		return len(ta.eventsOf(controller.ReasonDeleted, frozen)) == 1, ""
	})
	for _, e := range ta.events() {
		switch {
		case e.Reason == controller.ReasonUnhealthy && strings.Contains(e.Message, frozen):
			order = append(order, "unhealthy")
		case e.Reason == controller.ReasonRepair && strings.Contains(e.Message, "is replaced"):
			order = append(order, "repair")
		case e.Reason == controller.ReasonJoined && len(order) > 0 && order[len(order)-1] == "repair":
			order = append(order, "joined")
		case e.Reason == controller.ReasonDeleted && strings.Contains(e.Message, frozen):
			order = append(order, "deleted")
		}
	}
	if !slices.Equal(order, []string{"unhealthy", "repair", "joined", "deleted"}) {
		t.Errorf("events in order %v, want unhealthy, repair, joined (the replacement), deleted\n%s", order, ta.eventText())
	}
	metrics := ta.metrics()
	if !strings.Contains(metrics, `tide_nodes_disrupted_total{pool="rep",reason="repair"} 1`) {
		t.Errorf("no repair in tide_nodes_disrupted_total:\n%s", grepLines(metrics, "disrupted"))
	}
	t.Logf("frozen worker replaced and its work running elsewhere %s after SIGSTOP", time.Since(frozeAt).Round(time.Second))
}

// TestRepairBreakerHoldsWithHalfThePoolFrozen: two of four workers frozen
// (50 %, more than the default 20 % breaker allows): none is repaired, an
// event and the breaker gauge say so; the frozen workers are continued at
// the end and the pool is whole again.
func TestRepairBreakerHoldsWithHalfThePoolFrozen(t *testing.T) {
	ta := lifecycleAssembly(t, tideBin, localLifecyclePool("brk", "4", `{repair_after: 1s}`, ""))
	ta.waitFor("four workers join", 90*time.Second, func() (bool, string) {
		return len(ta.machines("brk")) == 4, fmt.Sprint(ta.machines("brk"))
	})
	ms := ta.machines("brk")
	var pids []int
	for _, m := range ms[:2] {
		pid := workerPID(ta.dir, m)
		if pid == 0 {
			t.Fatalf("no worker process for %s", m)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	ta.waitFor("the breaker holds and says so", 90*time.Second, func() (bool, string) {
		return len(ta.eventsOf(controller.ReasonRepairBreaker, "2 of 4 nodes are unhealthy (50%)", "20% breaker")) == 1, ""
	})
	time.Sleep(5 * time.Second) // five repair_afters: nothing may be repaired
	if evs := ta.eventsOf(controller.ReasonRepair); len(evs) != 0 {
		t.Fatalf("%d repairs with half the pool frozen:\n%s", len(evs), ta.eventText())
	}
	if got := ta.machines("brk"); len(got) != 4 {
		t.Errorf("the pool holds %v, want its four machines", got)
	}
	for _, m := range ms[:2] {
		var n httpapi.NodeJSON
		for _, x := range ta.nodesOf("brk") {
			if x.MachineID == m {
				n = x
			}
		}
		if !strings.Contains(n.Unhealthy, "OFFLINE") || !strings.Contains(n.Disruption, "breaker") {
			t.Errorf("node %s shows unhealthy %q, disruption %q: want OFFLINE and the breaker", m, n.Unhealthy, n.Disruption)
		}
	}
	if m := ta.metrics(); !strings.Contains(m, `tide_pool_repair_breaker_open{pool="brk"} 1`) || !strings.Contains(m, `tide_pool_unhealthy_nodes{pool="brk"} 2`) {
		t.Errorf("breaker gauges:\n%s", grepLines(m, "brk"))
	}
}

// TestWorkerThatNeverRegistersTimesOut: the cheaper offering's worker
// cannot start (its "binary" runs but never registers); each of its
// machines is deleted at the registration timeout with an event naming the
// timeout and the machine, and after two the offering backs off: the pool
// runs on the other offering, and no process of the failed machines is left.
func TestWorkerThatNeverRegistersTimesOut(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "worker.sh")
	// Machines of the 256Mi offering hang; the others run tide.
	body := fmt.Sprintf("#!/bin/sh\ncase \"$*\" in *\"--memory 256Mi\"*) while :; do sleep 1; done;; esac\nexec %s \"$@\"\n", tideBin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ta := lifecycleAssembly(t, script, `  - name: reg
    provider: {type: local}
    nodes: 1
    offerings:
      - {type: hang, cpu: 1, memory: 256Mi, price: 0.05}
      - {type: good, cpu: 1, memory: 512Mi, price: 0.1}
    scaling: {reconcile_interval: 300ms}
    lifecycle: {registration_timeout: 3s}
`)
	ta.waitFor("the pool runs on the good offering", 120*time.Second, func() (bool, string) {
		ns := ta.nodesOf("reg")
		return len(ns) == 1 && ns[0].Offering == "good/on-demand" && ns[0].State == head.NodeReady, fmt.Sprint(ns)
	})
	timeouts := ta.eventsOf(controller.ReasonRegistrationTimeout, "hang/on-demand", "registration timeout of 3s", "reg-0-")
	if len(timeouts) != 2 {
		t.Fatalf("%d registration-timeout events naming the timeout, the offering and the machine, want 2\n%s", len(timeouts), ta.eventText())
	}
	if len(ta.eventsOf(controller.ReasonOfferingBackedOff, "hang/on-demand", "2 times")) != 1 {
		t.Fatalf("the offering did not back off\n%s", ta.eventText())
	}
	ta.waitFor("no hung worker is left", 30*time.Second, func() (bool, string) {
		for _, cmd := range procsUnder(ta.dir) {
			if strings.Contains(cmd, "256Mi") {
				return false, cmd
			}
		}
		return true, ""
	})
}

// TestExpiredNodeIsReplaced: a node older than expire_after is replaced,
// its replacement joined before it is drained; its restartable instance
// moves to the replacement and runs there.
func TestExpiredNodeIsReplaced(t *testing.T) {
	ta := lifecycleAssembly(t, tideBin, localLifecyclePool("exp", "1", `{expire_after: 8s}`, ""))
	ta.waitFor("the worker joins", 60*time.Second, func() (bool, string) {
		return len(ta.machines("exp")) == 1, fmt.Sprint(ta.machines("exp"))
	})
	first := ta.machines("exp")[0]
	id := ta.submit("exp", "sleep 600", true)
	ta.waitFor("the instance runs", 30*time.Second, func() (bool, string) {
		return ta.instance(id).Status == "RUNNING", ta.instance(id).Status
	})
	minJoined := 1
	ta.waitFor("the expired node is replaced", 90*time.Second, func() (bool, string) {
		ms := ta.machines("exp")
		minJoined = min(minJoined, len(ms))
		return len(ms) == 1 && ms[0] != first, fmt.Sprint(ms)
	})
	if minJoined < 1 {
		t.Errorf("the pool went without a ready node during the replacement")
	}
	if len(ta.eventsOf(controller.ReasonExpired, first, "older than expire_after 8s")) != 1 {
		t.Errorf("no expired event naming %s\n%s", first, ta.eventText())
	}
	ta.waitFor("the instance runs on the replacement", 60*time.Second, func() (bool, string) {
		in := ta.instance(id)
		return in.Status == "RUNNING" && deref(in.AssignedTo) != first, fmt.Sprintf("%s on %s", in.Status, deref(in.AssignedTo))
	})
}

// metrics returns the head's /metrics text.
func (ta *testAssembly) metrics() string {
	ta.t.Helper()
	resp, err := httpGet("http://" + ta.a.Addr().String() + "/metrics")
	if err != nil {
		ta.t.Fatal(err)
	}
	return resp
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestSIGHUPRollsDriftedNodesOneBudgetAtATime runs `tide head --config` as
// a process with a local pool of three workers, each running one
// instance: one that may not be restarted, two restartable. A SIGHUP that
// changes the pool's labels drifts every node; the pool rolls one node at
// a time (its budget), each replacement ready before its node drains, the
// restartable instances move to the replacements, and the node running
// the non-restartable instance waits (and says why) until that instance
// ends; then it is replaced too. No non-restartable instance is ever
// disrupted.
func TestSIGHUPRollsDriftedNodesOneBudgetAtATime(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	write := func(tier string) {
		t.Helper()
		pool := fmt.Sprintf(`pools:
  - name: roll
    provider: {type: local}
    nodes: 3
    offerings:
      - {type: l1, cpu: 1, memory: 512Mi, price: 0.1}
    selector: {labels: {tier: %s}}
    scaling: {reconcile_interval: 300ms}
    disruption: {budgets: [{nodes: 1}]}
`, tier)
		if err := os.WriteFile(path, []byte(pool), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	port := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "head.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(tideBin, "head", "--config", path, "--data-dir", filepath.Join(dir, "data"), "--port", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		killLeftovers(t, dir)
	})
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAssembly{t: t, dir: dir, cl: cl}
	ready := func() []httpapi.NodeJSON {
		ns, err := cl.Nodes(context.Background(), nil)
		if err != nil {
			return nil
		}
		return slices.DeleteFunc(ns, func(n httpapi.NodeJSON) bool { return !n.Managed || n.State != head.NodeReady })
	}
	wait := func(what string, limit time.Duration, cond func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(limit)
		last := ""
		for time.Now().Before(deadline) {
			ok, state := cond()
			if ok {
				return
			}
			last = state
			select {
			case err := <-exited:
				b, _ := os.ReadFile(logf.Name())
				t.Fatalf("tide head exited (%v) while waiting for %s\n%s", err, what, b)
			case <-time.After(100 * time.Millisecond):
			}
		}
		evs, _ := cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
		var b strings.Builder
		for _, e := range evs {
			fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.Reason, e.Message)
		}
		t.Fatalf("%s: not within %s; last: %s\nevents:\n%s", what, limit, last, b.String())
	}
	wait("three workers join", 90*time.Second, func() (bool, string) { return len(ready()) == 3, fmt.Sprint(len(ready())) })
	pinned := ta.submit("roll", "sleep 600", false)
	movers := []string{ta.submit("roll", "sleep 600", true), ta.submit("roll", "sleep 600", true)}
	wait("the three instances run", 60*time.Second, func() (bool, string) {
		for _, id := range append([]string{pinned}, movers...) {
			if in := ta.instance(id); in.Status != "RUNNING" {
				return false, id + " " + in.Status
			}
		}
		return true, ""
	})
	pinnedNode := deref(ta.instance(pinned).AssignedTo)
	old := map[string]bool{}
	for _, n := range ready() {
		old[n.MachineID] = true
	}

	write("b")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	maxReplacing, minReady := 0, 3
	check := func() {
		t.Helper()
		ns, err := cl.Nodes(context.Background(), nil)
		if err != nil {
			return
		}
		replacing, readyNow := 0, 0
		for _, n := range ns {
			if n.Managed && n.Replacing != "" {
				replacing++
			}
			// Workers in service: the view of a pool whose controller has
			// not ticked since the reload lists them unmanaged.
			if n.Pool == "roll" && n.WorkerStatus == string(store.WorkerOnline) && !n.Cordoned {
				readyNow++
			}
		}
		maxReplacing = max(maxReplacing, replacing)
		minReady = min(minReady, readyNow)
		if in := ta.instance(pinned); in.Status != "RUNNING" || in.Attempt != 1 || deref(in.AssignedTo) != pinnedNode {
			t.Fatalf("the non-restartable instance was disrupted: %s attempt %d on %s", in.Status, in.Attempt, deref(in.AssignedTo))
		}
	}
	wait("the two nodes without non-restartable work are replaced", 180*time.Second, func() (bool, string) {
		check()
		var left []string
		for _, n := range ready() {
			if old[n.MachineID] {
				left = append(left, n.MachineID)
			}
		}
		return len(left) == 1 && left[0] == pinnedNode && len(ready()) == 3, fmt.Sprint(left)
	})
	for _, id := range movers {
		wait("the restartable instances run on the new nodes", 60*time.Second, func() (bool, string) {
			check()
			in := ta.instance(id)
			return in.Status == "RUNNING" && !old[deref(in.AssignedTo)], fmt.Sprintf("%s on %s", in.Status, deref(in.AssignedTo))
		})
	}
	wait("the pinned node says why it waits", 30*time.Second, func() (bool, string) {
		for _, n := range ready() {
			if n.MachineID == pinnedNode {
				return strings.Contains(n.Disruption, "non-restartable work") && strings.Contains(n.Disruption, "drifted"), n.Disruption
			}
		}
		return false, "pinned node not listed"
	})
	if maxReplacing != 1 {
		t.Errorf("at most %d nodes were seen replaced at once, want 1 (the budget)", maxReplacing)
	}
	if minReady < 3 {
		t.Errorf("only %d workers in service at one point: a drifted node was cordoned before its replacement was ready", minReady)
	}
	evs, err := cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
	if err != nil {
		t.Fatal(err)
	}
	drifts := 0
	for _, e := range evs {
		if e.Reason == controller.ReasonDrift {
			drifts++
		}
	}
	if drifts != 2 {
		t.Errorf("%d drift replacements before the pinned instance ended, want 2", drifts)
	}
	// Its instance ends: the last drifted node is replaced too.
	if _, err := cl.Cancel(context.Background(), pinned, nil); err != nil {
		t.Fatal(err)
	}
	wait("the last drifted node is replaced", 120*time.Second, func() (bool, string) {
		var left []string
		for _, n := range ready() {
			if old[n.MachineID] {
				left = append(left, n.MachineID)
			}
		}
		return len(left) == 0 && len(ready()) == 3, fmt.Sprint(left)
	})
	t.Logf("rolled 3 drifted nodes, at most %d at once, never fewer than %d ready", maxReplacing, minReady)
}
