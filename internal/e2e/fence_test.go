package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards TCP connections from a loopback port to a target. cut
// closes its listener and every connection (a partition: the worker's
// requests are refused or fail, none reaches the target); heal listens on
// the same port again.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
}

// track records a connection pair; false (and both closed) when the proxy
// was cut meanwhile.
func (p *cutProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = true, true
	return true
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *cutProxy) heal() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port was ours a moment ago; retry briefly if the kernel is slow to free it
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// fenceEvents reads "<event> <id> <attempt>" lines in the order they were
// appended: the order in which the instances' shells logged them.
func fenceEvents(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | "))
}

// TestPartitionFence (issue 16) runs a real head, and a real worker w1
// that reaches it only through a TCP proxy on loopback, which the test
// cuts. A cut shorter than offline-after changes nothing. A cut longer
// than it: the head declares w1 OFFLINE and requeues its restart-on-failure
// instance, holding it out of scheduling (not_before, and a waiting reason
// that says why) while w1's fence stops attempt 1; attempt 2 starts on w2
// only after attempt 1 has ended, so the instance never runs twice at
// once. w1's restart-never instance keeps running throughout, and is
// RUNNING again once the partition heals.
func TestPartitionFence(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	cl := newCluster(t)
	cl.startHead() // offline-after 12 s, poll 1 s, liveness 250 ms, grace 2 s; fence margin 5 s
	proxy := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", cl.headPort))
	realPort := cl.headPort
	cl.headPort, _ = func() (int, error) { // w1 is told the proxy's address
		_, port, err := net.SplitHostPort(proxy.addr)
		var n int
		fmt.Sscan(port, &n)
		return n, err
	}()
	cl.startWorker("w1", 26000)
	cl.headPort = realPort

	runs := filepath.Join(cl.dir, "fence-runs.log")
	// Attempt 1 runs long (it must be stopped by the fence); later
	// attempts are short. The shell logs its start, its end, and a TERM.
	cmd := fmt.Sprintf(`trap 'echo "term $TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %[1]s; exit 143' TERM; `+
		`echo "start $TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %[1]s; `+
		`if [ "$TIDE_ATTEMPT" = 1 ]; then sleep 300 & wait; else sleep 1; fi; `+
		`echo "end $TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %[1]s`, runs)
	rerun := cl.submit(spec{cmd: cmd, restart: "on-failure", target: ""})
	keep := cl.submit(spec{cmd: cmd, restart: "never", target: "w1"})
	cl.waitStatus(rerun, "RUNNING", 20*time.Second)
	cl.waitStatus(keep, "RUNNING", 20*time.Second)
	if w := *cl.get(rerun).AssignedTo; w != "w1" {
		t.Fatalf("%s placed on %s, want w1 (the only worker)", rerun, w)
	}
	cl.startWorker("w2", 26100) // where attempt 2 may go
	pids := pidsOf(t, cl.wdirs["w1"])
	pid1, pidKeep := pids[rerun+"@1"], pids[keep+"@1"]
	if pid1 == 0 || pidKeep == 0 {
		t.Fatalf("run records of w1: %v", pids)
	}
	ctx := context.Background()

	// 1. A cut shorter than offline-after (12 s): nothing is stopped or
	// requeued.
	proxy.cut()
	time.Sleep(8 * time.Second)
	proxy.heal()
	cl.waitFor(10*time.Second, "w1 ONLINE after a short cut", func() (bool, string) {
		w, err := cl.c.Worker(ctx, "w1")
		return err == nil && w.Status == "ONLINE", fmt.Sprint(w, err)
	})
	if in := cl.get(rerun); in.Status != "RUNNING" || in.Attempt != 1 || !alive(pid1) || !alive(pidKeep) {
		t.Fatalf("after a short cut: %s attempt %d, processes alive %v %v", in.Status, in.Attempt, alive(pid1), alive(pidKeep))
	}

	// 2. A cut longer than the lease.
	time.Sleep(2 * time.Second) // a successful heartbeat or two after the heal
	proxy.cut()
	cut := time.Now()
	cl.waitFor(20*time.Second, "w1 OFFLINE", func() (bool, string) {
		w, err := cl.c.Worker(ctx, "w1")
		return err == nil && w.Status == "OFFLINE", fmt.Sprint(w, err)
	})
	held := cl.get(rerun)
	if held.Status != "PENDING" || held.NotBefore == nil || !strings.Contains(held.WaitingReason, "held until") ||
		!strings.Contains(held.WaitingReason, "w1") {
		t.Fatalf("requeued instance: %s, not_before %v, waiting reason %q", held.Status, deref(held.NotBefore), held.WaitingReason)
	}
	t.Logf("w1 OFFLINE %s after the cut; %s: %s", time.Since(cut).Round(time.Millisecond), rerun, held.WaitingReason)
	if !alive(pid1) {
		t.Fatalf("attempt 1 was stopped before the head could be sure... at %s after the cut", time.Since(cut))
	}
	in := cl.waitStatus(rerun, "COMPLETED", 60*time.Second)
	if in.Attempt != 2 || deref(in.AssignedTo) != "w2" {
		t.Fatalf("re-run: attempt %d on %v, want 2 on w2", in.Attempt, deref(in.AssignedTo))
	}
	t.Logf("attempt 2 completed %s after the cut", time.Since(cut).Round(time.Millisecond))
	if alive(pid1) {
		t.Fatal("attempt 1 still runs after attempt 2 completed")
	}
	if !alive(pidKeep) {
		t.Fatal("the restart-never instance was stopped by the fence")
	}
	ev := fenceEvents(t, runs)
	line := strings.Join(ev, " ")
	term1 := strings.Index(line, "term "+rerun+" 1")
	start2 := strings.Index(line, "start "+rerun+" 2")
	if term1 < 0 || start2 < 0 || term1 > start2 {
		t.Fatalf("attempt 2 started before attempt 1 ended (or one is missing): %s", line)
	}
	if strings.Contains(line, "end "+rerun+" 1") {
		t.Fatalf("attempt 1 ran to its end: %s", line)
	}
	var rec struct {
		Fenced string `json:"fenced"`
	}
	b, err := os.ReadFile(filepath.Join(cl.wdirs["w1"], "run", rerun+".1", "record.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || !strings.HasPrefix(rec.Fenced, "FENCED: worker w1") {
		t.Fatalf("w1's record of attempt 1 says no fence: %s %v", b, err)
	}

	// 3. Heal: w1 comes back; its restart-never instance runs on.
	proxy.heal()
	cl.waitFor(20*time.Second, "w1 ONLINE and its restart-never instance RUNNING", func() (bool, string) {
		w, err := cl.c.Worker(ctx, "w1")
		if err != nil || w.Status != "ONLINE" {
			return false, fmt.Sprint(w, err)
		}
		in := cl.get(keep)
		return in.Status == "RUNNING" && in.Attempt == 1, in.Status
	})
	if !alive(pidKeep) {
		t.Fatal("the restart-never instance is not running")
	}
	cl.cancel(keep, time.Second)
	cl.waitStatus(keep, "CANCELLED", 20*time.Second)
}
