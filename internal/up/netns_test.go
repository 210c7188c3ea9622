package up

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/netnstest"
	"github.com/tide-project/tide/internal/provider/netns"
)

// netPool is a pool of namespaces (min %d, max %d) of two offerings.
const netPool = `pools:
  - name: net
    provider: {type: netns, options: {prefix: %s, subnet: %s}}
    nodes: [%d, %d]
    offerings:
      - {type: ns-small, cpu: 1, memory: 512Mi, price: 0.05}
      - {type: ns-big, cpu: 2, memory: 1Gi, price: 0.09}
    scaling: {policy: tide, idle_timeout: 4s, cooldown: 2s, batch_window: 500ms, reconcile_interval: 1s,
              slots_per_node: 1, scale_in_datapoints: 2, metric_period: 1s}
`

// netRun is a `tide up --tls auto --token T --addr <gateway>` run whose
// pool's machines are network namespaces.
type netRun struct {
	*running
	prefix, subnet string
	gateway        string
	token          string
	// hc trusts the run's CA.
	hc *http.Client
}

func skipUnlessNetns(t *testing.T) {
	t.Helper()
	if why := netns.Supported(); why != "" {
		t.Skip("skipping: " + why)
	}
}

func startNetUp(t *testing.T, minNodes, maxNodes int, hc head.Config) *netRun {
	t.Helper()
	skipUnlessNetns(t)
	n := netnstest.Reserve(t, 200, 250) // its own /24 and name prefix, machine-wide
	nr := &netRun{prefix: fmt.Sprintf("tu%d", n), subnet: fmt.Sprintf("10.231.%d.0/24", n),
		gateway: fmt.Sprintf("10.231.%d.1", n), token: "admin-" + t.Name()}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tide.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(netPool, nr.prefix, nr.subnet, minNodes, maxNodes)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Checked even when the test fails: nothing of the run is left.
	t.Cleanup(func() { nr.wantNothingLeft(t, dir) })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	r := &running{t: t, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, Config{
			ConfigPath: cfgPath, DataDir: filepath.Join(dir, "data"), Binary: tideBin,
			Addr: nr.gateway + ":0", Token: nr.token, TLS: "auto",
			OnListen:        func(a net.Addr) { addr <- a },
			Head:            hc,
			ShutdownTimeout: 20 * time.Second,
		})
	}()
	select {
	case a := <-addr:
		pem, err := os.ReadFile(filepath.Join(dir, "data", "tls", "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		hcl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		nr.hc = hcl
		cl, err := client.New("https://"+a.String(), nr.token, hcl)
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
	nr.running = r
	return nr
}

// wantNothingLeft fails when a namespace, a link or a process of the run
// outlives it.
func (nr *netRun) wantNothingLeft(t *testing.T, dir string) {
	t.Helper()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), nr.prefix+"-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(out), " "+nr.prefix) {
		t.Errorf("links left behind:\n%s", out)
	}
	if n := workerProcesses(dir); n != 0 {
		t.Errorf("%d processes of this run still alive", n)
	}
	removeLeftovers(nr.prefix)
	killRunProcesses(dir)
}

// killRunProcesses kills, after a failed test, the processes started from
// the run's directory.
func killRunProcesses(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeLeftovers removes, after a failed test, every namespace and link
// with the prefix (the test's own).
func removeLeftovers(prefix string) {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
				exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	links, _ := filepath.Glob("/sys/class/net/" + prefix + "*")
	for _, l := range links {
		exec.Command("ip", "link", "del", filepath.Base(l)).Run()
	}
}

func (nr *netRun) logs(id string) string {
	nr.t.Helper()
	c, err := nr.cl.Logs(context.Background(), id, 0, 1<<20)
	if err != nil {
		nr.t.Fatalf("logs of %s: %v", id, err)
	}
	return string(c.Content)
}

var ipv4 = regexp.MustCompile(`\b10\.231\.\d+\.\d+\b`)

// TestNetnsBurst is the proof over the network: a head with
// --tls auto and an admin token on a bridge address, a pool min 0 / max 3
// of two offerings whose machines are namespaces joining with their own
// bootstrap blobs. A burst of 20 instances that print their host's address
// all complete, at least two distinct machine addresses appear (none is
// the head's), the pool returns to 0, and nothing is left behind.
func TestNetnsBurst(t *testing.T) {
	nr := startNetUp(t, 0, 3, head.Config{SchedulerInterval: 200 * time.Millisecond, LivenessInterval: time.Second,
		PollTimeout: 5 * time.Second, SuspectAfter: 20 * time.Second, OfflineAfter: 30 * time.Second})
	// Without the token the API refuses (401) and does nothing.
	anon, _ := client.New(nr.cl.BaseURL(), "", nr.hc)
	var ce *client.Error
	if _, err := anon.Submit(context.Background(), &httpapi.SubmitRequest{Command: ptr("true")}); !errors.As(err, &ce) || ce.StatusCode != 401 {
		t.Fatalf("a submit without the admin token: %v, want 401", err)
	}
	if ins, err := nr.cl.Instances(context.Background(), client.ListOptions{}); err != nil || len(ins) != 0 {
		t.Fatalf("instances after a refused submit: %v %v", ins, err)
	}
	ids := nr.submit(20, "hostname -I; sleep 1", 1, nil)
	nr.eventually("all 20 instances complete", 120*time.Second, func() (bool, string) {
		st := nr.statuses(ids)
		p := nr.pool("net")
		return st["COMPLETED"] == 20, fmt.Sprintf("%v, pool ready %d desired %d", st, p.Ready, p.Desired)
	})
	addrs := map[string]int{}
	for _, id := range ids {
		a := ipv4.FindString(nr.logs(id))
		if a == "" || a == nr.gateway || !strings.HasPrefix(a, strings.TrimSuffix(nr.subnet, "0/24")) {
			t.Fatalf("instance %s printed %q: not a machine address of %s", id, nr.logs(id), nr.subnet)
		}
		addrs[a]++
	}
	if len(addrs) < 2 {
		t.Errorf("the burst ran on %d machine address(es) %v, want at least 2", len(addrs), addrs)
	}
	t.Logf("instances per machine address: %v", addrs)
	ws, err := nr.cl.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if !strings.HasPrefix(w.WorkerID, "net-") || !strings.HasPrefix(w.Host, "10.231.") {
			t.Errorf("worker %s on %s: not a machine of the pool on its namespace address", w.WorkerID, w.Host)
		}
	}
	nr.eventually("the pool returns to 0 and its machines are deleted", 90*time.Second, func() (bool, string) {
		p := nr.pool("net")
		deleted := strings.Count(nr.events(), " deleted: ")
		return p.Ready == 0 && p.Pending == 0 && p.Desired == 0 && deleted > 0 && deleted == strings.Count(nr.events(), " launched:"), fmt.Sprintf("%d deleted, %+v", deleted, p)
	})
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), nr.prefix+"-") {
		t.Errorf("namespaces of deleted machines remain:\n%s", out)
	}
	nr.stop()
}

func ptr[T any](v T) *T { return &v }

// machineOf returns the worker an instance runs on, waiting until it runs.
func (nr *netRun) machineOf(id string) string {
	nr.t.Helper()
	in, err := nr.cl.Instance(context.Background(), id)
	if err != nil || in.AssignedTo == nil {
		nr.t.Fatalf("instance %s: %+v %v", id, in, err)
	}
	return *in.AssignedTo
}

// doneLog is a host file every instance appends "<id> <attempt>" to when
// it runs to completion (namespaces share the host's file system).
func doneLines(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if id, _, ok := strings.Cut(line, " "); ok {
			out[id]++
		}
	}
	return out
}

// TestNetnsMachineLoss: a machine's namespace deleted under it is NodeLost
// and replaced, and its instances rerun; a machine whose link is cut for
// longer than offline-after and then restored sees its instances rerun
// elsewhere while its stale reports change nothing (attempt fencing).
// Nothing runs twice to completion.
func TestNetnsMachineLoss(t *testing.T) {
	// A fixed pool of four machines for three instances: one is free for
	// the cut machine's instance to rerun on while the cut lasts (the
	// policy counts the cut machine as a node until it is lost).
	nr := startNetUp(t, 4, 4, head.Config{SchedulerInterval: 200 * time.Millisecond, LivenessInterval: 500 * time.Millisecond,
		PollTimeout: 2 * time.Second, SuspectAfter: 12 * time.Second, OfflineAfter: 15 * time.Second})
	done := filepath.Join(nr.dir, "done.log")
	policy, restarts := "on-failure", 3
	// Long enough that the cut machine's first attempt cannot finish
	// before the link comes back (a partitioned machine keeps running
	// its work: nothing on it can hear that the head moved it).
	cmd := fmt.Sprintf(`sleep 45 && echo "$TIDE_INSTANCE_ID $TIDE_ATTEMPT $TIDE_WORKER $(date +%%T.%%N)" >> %s`, done)
	ids := nr.submit(3, cmd, 1, func(req *httpapi.SubmitRequest) { req.RestartPolicy, req.MaxRestarts = &policy, &restarts })
	nr.eventually("three instances run", 90*time.Second, func() (bool, string) {
		st := nr.statuses(ids)
		return st["RUNNING"] == 3, fmt.Sprint(st)
	})
	lost, cut := nr.machineOf(ids[0]), nr.machineOf(ids[1])
	if lost == cut {
		t.Fatalf("two instances share machine %s (slots_per_node 1)", lost)
	}
	// 1. The namespace of one machine disappears under its worker.
	if out, err := exec.Command("ip", "netns", "del", nr.prefix+"-"+lost).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	// 2. Another machine's link goes down for longer than offline-after.
	link := hostLinkOf(t, nr.prefix, cut)
	if out, err := exec.Command("ip", "link", "set", link, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set down: %v: %s", err, out)
	}
	cutAt := time.Now()
	// Every change of the instances' placement, for the failure message.
	var trace strings.Builder
	stopTrace := make(chan struct{})
	traced := make(chan struct{})
	go func() {
		defer close(traced)
		last := map[string]string{}
		for {
			for _, id := range ids {
				if in, err := nr.cl.Instance(context.Background(), id); err == nil {
					w := ""
					if in.AssignedTo != nil {
						w = *in.AssignedTo
					}
					cur := fmt.Sprintf("attempt %d %s on %s", in.Attempt, in.Status, w)
					if last[id] != cur {
						last[id] = cur
						fmt.Fprintf(&trace, "%s %s: %s\n", time.Now().Format("15:04:05.000"), id[:8], cur)
					}
				}
			}
			select {
			case <-stopTrace:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stopTrace)
		<-traced
		if t.Failed() || testing.Verbose() {
			t.Logf("placements:\n%s", trace.String())
		}
	}()
	// The lost machine's instance reruns through NodeLost, well before
	// offline-after would have requeued it.
	nr.eventually("the lost machine's instance reruns elsewhere", 12*time.Second, func() (bool, string) {
		in, err := nr.cl.Instance(context.Background(), ids[0])
		if err != nil {
			return false, err.Error()
		}
		w := ""
		if in.AssignedTo != nil {
			w = *in.AssignedTo
		}
		return in.Attempt >= 2 && w != lost && in.Status == "RUNNING", fmt.Sprintf("attempt %d on %s %s", in.Attempt, w, in.Status)
	})
	nr.eventually("the lost machine is replaced", 30*time.Second, func() (bool, string) {
		evs := nr.events()
		return strings.Contains(evs, "node-lost") && strings.Contains(evs, lost) && strings.Count(evs, " launched:") >= 4,
			"waiting for node-lost and a replacement"
	})
	// Offline-after (15 s), then the fencing lease's hold: poll 2 s +
	// liveness 0.5 s + 2 × margin 5 s + the default grace 30 s.
	nr.eventually("the cut machine's instance reruns elsewhere", 90*time.Second, func() (bool, string) {
		in, err := nr.cl.Instance(context.Background(), ids[1])
		if err != nil {
			return false, err.Error()
		}
		w := ""
		if in.AssignedTo != nil {
			w = *in.AssignedTo
		}
		return in.Attempt >= 2 && w != cut && in.Status == "RUNNING", fmt.Sprintf("attempt %d on %s %s", in.Attempt, w, in.Status)
	})
	// Offline-after counts from the last heartbeat, which arrived at most
	// a poll timeout (2s) before the cut.
	if d := time.Since(cutAt); d < 13*time.Second {
		t.Fatalf("rerun %v after the cut: before offline-after (15s)", d)
	}
	if out, err := exec.Command("ip", "link", "set", link, "up").CombinedOutput(); err != nil && hostLinkExists(link) {
		t.Fatalf("ip link set up: %v: %s", err, out)
	}
	rerun, err := nr.cl.Instance(context.Background(), ids[1])
	if err != nil {
		t.Fatal(err)
	}
	// The cut machine comes back: its worker registers again (its used
	// credential still good) and reports its stale first attempt, which
	// changes nothing: the rerun keeps its attempt and machine.
	nr.eventually("the cut machine's worker is back online", 30*time.Second, func() (bool, string) {
		w, err := nr.cl.Worker(context.Background(), cut)
		if err != nil {
			return false, err.Error()
		}
		return w.Status == "ONLINE", w.Status
	})
	if in, err := nr.cl.Instance(context.Background(), ids[1]); err != nil || in.Attempt != rerun.Attempt ||
		*in.AssignedTo != *rerun.AssignedTo || in.Status != "RUNNING" {
		t.Fatalf("the rerun after the cut machine came back: %+v %v; want attempt %d on %s, running",
			in, err, rerun.Attempt, *rerun.AssignedTo)
	}
	nr.eventually("every instance completes", 120*time.Second, func() (bool, string) {
		st := nr.statuses(ids)
		return st["COMPLETED"] == 3, fmt.Sprint(st)
	})
	t.Logf("events:\n%s", nr.events())
	t.Logf("lost %s, cut %s at %s; completions:\n%s", lost, cut, cutAt.Format("15:04:05.000"), mustRead(done))
	for _, id := range ids {
		in, _ := nr.cl.Instance(context.Background(), id)
		t.Logf("instance %s: attempt %d on %v", id, in.Attempt, *in.AssignedTo)
	}
	for i, id := range ids[:2] {
		in, _ := nr.cl.Instance(context.Background(), id)
		if in.Attempt < 2 {
			t.Errorf("instance %d (%s) finished at attempt %d, want a rerun", i, id, in.Attempt)
		}
	}
	// The stale attempt was stopped, or its late exit ignored: each
	// instance ran to completion exactly once.
	for _, id := range ids {
		if n := doneLines(t, done)[id]; n != 1 {
			t.Errorf("instance %s ran to completion %d times, want once:\n%s", id, n, mustRead(done))
		}
	}
	nr.stop()
}

func mustRead(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// hostLinkOf finds the host side of a machine's veth from the netns state file.
func hostLinkOf(t *testing.T, prefix, machine string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", prefix+"-"+machine, "ip", "-o", "-4", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		t.Fatalf("address of machine %s: %v", machine, err)
	}
	a := ipv4.FindString(string(out))
	octet := a[strings.LastIndex(a, ".")+1:]
	return prefix + "h" + octet
}

func hostLinkExists(l string) bool {
	_, err := os.Stat("/sys/class/net/" + l)
	return err == nil
}

// TestNetnsHeadKill9: `tide up` with a netns pool is killed with kill -9
// while its machines run work: their namespaces and workers survive it.
// The restarted `tide up` adopts them (the instances keep running, same
// attempt) and removes a leftover namespace no machine owns; its Ctrl-C
// then leaves no namespace, link or process behind.
func TestNetnsHeadKill9(t *testing.T) {
	skipUnlessNetns(t)
	n := netnstest.Reserve(t, 200, 250)
	prefix, subnet, gw := fmt.Sprintf("tu%d", n), fmt.Sprintf("10.231.%d.0/24", n), fmt.Sprintf("10.231.%d.1", n)
	dir := t.TempDir()
	nr := &netRun{prefix: prefix}
	t.Cleanup(func() { nr.wantNothingLeft(t, dir) })
	cfgPath := filepath.Join(dir, "tide.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(netPool, prefix, subnet, 0, 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	url := fmt.Sprintf("https://%s:%d", gw, port)
	start := func(name string) (*exec.Cmd, chan struct{}) {
		t.Helper()
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(tideBin, "up", "--config", cfgPath, "--data-dir", filepath.Join(dir, "data"),
			"--addr", gw, "--port", fmt.Sprint(port), "--token", "admin-k9", "--tls", "auto")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); logf.Close(); close(done) }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
			if t.Failed() {
				out, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				t.Logf("--- %s log:\n%s", name, out)
			}
		})
		return cmd, done
	}
	connect := func() *running {
		t.Helper()
		r := &running{t: t, dir: dir}
		r.eventually("tide up answers over TLS", 30*time.Second, func() (bool, string) {
			pem, err := os.ReadFile(filepath.Join(dir, "data", "tls", "ca.pem"))
			if err != nil {
				return false, err.Error()
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(pem)
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
			cl, _ := client.New(url, "admin-k9", hc)
			if err := cl.Health(context.Background()); err != nil {
				return false, err.Error()
			}
			r.cl = cl
			return true, ""
		})
		return r
	}
	first, firstDone := start("up1")
	r := connect()
	ids := r.submit(2, "sleep 600", 1, nil)
	r.eventually("two instances run", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	nss := func() []string {
		out, _ := exec.Command("ip", "netns", "list").Output()
		var got []string
		for line := range strings.SplitSeq(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
				got = append(got, f[0])
			}
		}
		return got
	}
	// The purchase decides how many machines host the two instances (one
	// ns-big is cheaper than two ns-small): those are what must survive.
	machines := len(nss())
	if machines == 0 {
		t.Fatal("no namespace runs the two instances")
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-firstDone
	if got := nss(); len(got) != machines {
		t.Fatalf("namespaces after kill -9: %v, want the %d machines'", got, machines)
	}
	// A namespace of a machine never recorded (a crash between the two).
	if out, err := exec.Command("ip", "netns", "add", prefix+"-ghost-9").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	second, secondDone := start("up2")
	r = connect()
	r.eventually("the ghost namespace is removed and the machines adopted", 30*time.Second, func() (bool, string) {
		got := nss()
		return len(got) == machines && !strings.Contains(strings.Join(got, " "), "ghost"), fmt.Sprint(got)
	})
	r.eventually("the restarted controller adopts the joined machines", 30*time.Second, func() (bool, string) {
		return strings.Contains(r.events(), fmt.Sprintf("at epoch 2: %d joined", machines)), "no adoption event yet"
	})
	for _, id := range ids {
		in, err := r.cl.Instance(context.Background(), id)
		if err != nil || in.Status != "RUNNING" || in.Attempt != 1 {
			t.Fatalf("instance %s after the restart: %+v %v, want RUNNING at attempt 1", id, in, err)
		}
	}
	if err := second.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-secondDone:
	case <-time.After(60 * time.Second):
		t.Fatal("tide up did not stop within 60s of Ctrl-C")
	}
	// wantNothingLeft (cleanup) checks namespaces, links and processes.
}
