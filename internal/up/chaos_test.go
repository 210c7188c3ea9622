package up

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/chaostest"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/sdk/provider"
)

const chaosPool = `pools:
  - name: chaos
    provider: {type: local}
    nodes: [0, 4]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
    scaling: {policy: tide, idle_timeout: 3s, cooldown: 1s, batch_window: 300ms, reconcile_interval: 1s}
`

// liveWorkers lists the live (not zombie) `tide worker` processes whose
// command line names dir, by machine id. A child the worker has forked to
// start an instance shows the worker's command line until it execs: it is
// left out (its parent is the worker).
func liveWorkers(dir string) map[string][]int {
	out := map[string][]int{}
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(raw), dir) {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) < 2 || args[1] != "worker" {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			continue
		}
		// "pid (comm) state ppid ...": the comm may hold spaces, not ")".
		if rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:]); len(strings.Fields(rest)) > 1 {
			parent[pid], _ = strconv.Atoi(strings.Fields(rest)[1])
		}
		if i := slices.Index(args, "--name"); i >= 0 && i+1 < len(args) {
			out[args[i+1]] = append(out[args[i+1]], pid)
		}
	}
	for id, pids := range out {
		out[id] = slices.DeleteFunc(pids, func(pid int) bool { return slices.Contains(pids, parent[pid]) })
	}
	return out
}

// ledgerMachine is a machine record of the local provider, as its
// machine.json stores it.
type ledgerMachine struct {
	provider.Machine
	PID     int  `json:"pid"`
	Deleted bool `json:"deleted"`
}

// ledger reads every machine record of the pool's local provider under
// dataDir (tombstones included).
func ledger(t *testing.T, dataDir, pool string) map[string]ledgerMachine {
	t.Helper()
	root := filepath.Join(dataDir, "machines", pool, "machines")
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledgerMachine{}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(root, e.Name(), "machine.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue // being created
		}
		if err != nil {
			t.Fatal(err)
		}
		var m ledgerMachine
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("machine %s: %v", e.Name(), err)
		}
		out[e.Name()] = m
	}
	return out
}

// machineAudit compares the provider's ledger with the processes alive. It
// reads the ledger first: a tombstone is written only after the machine's
// processes are gone, so a tombstoned machine with a live worker read
// afterwards is a leak, not a race.
type machineAudit struct {
	leaked []string // a live worker of a machine unknown to the ledger, or tombstoned
	twice  []string // two live workers for one machine, or two live machines for one ordinal
}

func auditMachines(t *testing.T, dir, pool string) machineAudit {
	t.Helper()
	led := ledger(t, filepath.Join(dir, "data"), pool)
	live := liveWorkers(dir)
	var a machineAudit
	for id, pids := range live {
		m, ok := led[id]
		if !ok || m.Deleted {
			a.leaked = append(a.leaked, fmt.Sprintf("%s (pids %v, known %v, tombstoned %v)", id, pids, ok, m.Deleted))
		}
		if len(pids) > 1 {
			a.twice = append(a.twice, fmt.Sprintf("%s runs %d workers %v", id, len(pids), pids))
		}
	}
	byOrdinal := map[int][]string{}
	for id, m := range led {
		switch {
		case m.Deleted, m.State == provider.Draining, m.State == provider.Deleting, m.State == provider.Failed:
			continue
		}
		if len(live[id]) == 0 {
			continue // not serving: a record waiting for its delete or configure
		}
		ord, ok := controller.ParseMachineID(pool, id)
		if !ok {
			a.leaked = append(a.leaked, id+" (not a controller machine id)")
			continue
		}
		byOrdinal[int(ord)] = append(byOrdinal[int(ord)], id)
	}
	for ord, ids := range byOrdinal {
		if len(ids) > 1 {
			a.twice = append(a.twice, fmt.Sprintf("node %d served by %v at once", ord, ids))
		}
	}
	return a
}

// chaosUp is one `tide up` process of the chaos test.
type chaosUp struct {
	cmd   *exec.Cmd
	done  chan struct{}
	began time.Time
}

func startChaosUp(t *testing.T, dir string, port int, logf *os.File) *chaosUp {
	t.Helper()
	cmd := exec.Command(tideBin, "up", "--config", filepath.Join(dir, "tide.yaml"),
		"--data-dir", filepath.Join(dir, "data"), "--port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	u := &chaosUp{cmd: cmd, done: make(chan struct{}), began: time.Now()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(u.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-u.done
	})
	return u
}

// kill9 kills the process and waits for it to be gone.
func (u *chaosUp) kill9(t *testing.T) {
	t.Helper()
	if err := u.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	<-u.done
}

// submitter submits names[i] until each is acknowledged (200) or found
// stored already (the answer to an earlier try was cut off by a kill).
type submitter struct {
	mu       sync.Mutex
	acked    map[string]string // name -> instance id
	inDoubt  map[string]bool   // names refused as taken: stored by a try whose answer was lost
	tries    int
	finished chan struct{}
}

func (s *submitter) run(ctx context.Context, cl *client.Client, names []string, command string, workers int, pace time.Duration) {
	var wg sync.WaitGroup
	next := make(chan string)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				cpus, mem := 0.25, int64(100) // 4 at a time on a node of 1 CPU and 1 GiB
				req := &httpapi.SubmitRequest{Command: &command, Name: &name,
					ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpus, MemoryMB: &mem}, Labels: map[string]string{"chaos": "1"}}
				for ctx.Err() == nil {
					s.mu.Lock()
					s.tries++
					s.mu.Unlock()
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					res, err := cl.Submit(cctx, req)
					cancel()
					var ce *client.Error
					switch {
					case err == nil && res.InstanceID != "":
						s.mu.Lock()
						s.acked[name] = res.InstanceID
						s.mu.Unlock()
					case errors.As(err, &ce) && ce.StatusCode == http.StatusBadRequest && strings.Contains(ce.Detail, "already exists"):
						s.mu.Lock()
						s.inDoubt[name] = true
						s.mu.Unlock()
					default:
						time.Sleep(50 * time.Millisecond) // the head is down or restarting
						continue
					}
					break
				}
				time.Sleep(pace) // spread the burst over the kills
			}
		}()
	}
	for _, n := range names {
		select {
		case next <- n:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	close(s.finished)
}

// percentile returns the p-th percentile (0–100) of sorted durations.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)].Round(time.Millisecond)
}

// TestUpKill9DuringPoolBurst is issue 16's head chaos: a burst of
// instances on a local pool that scales from 0 (real `tide up` processes,
// real worker processes; the submissions are spread over the first
// kills, the queue lasts for most of them, and the last tenth fall
// after it emptied, while the pool scales down), while `tide up` is killed with SIGKILL at random
// moments and restarted on the same data dir. A quarter of the kills fall
// in the restart itself (before the pool converged), the rest at a random
// moment after it converged. Counted, each must be 0: instances lost (not
// COMPLETED once at the end), instances run to completion twice (each
// appends its id to a file when it ends), submissions acknowledged but
// missing, machines leaked (a live worker the provider does not know or
// has tombstoned, a ready node without its worker, a worker without its
// node, anything left once the pool is back at 0) and machines created
// twice (two workers for one machine, or two serving machines for one
// node). Recovery is restart → the pool converged (ready = desired, none
// pending, every worker back). Size: 3 kills and 40 instances; TIDE_CHAOS=N
// runs N kills of 500 instances; TIDE_CHAOS_SEED replays the printed seed.
func TestUpKill9DuringPoolBurst(t *testing.T) {
	kills, full := chaostest.Size(t, 3)
	// The submissions are spread over window and the queue lasts about
	// as long as the kills (each ≈ 1 s); the last tenth of the kills wait
	// for the queue to empty, and fall while the idle pool scales down.
	instances, sleep, window := 40, 1, 2*time.Second
	if full {
		instances, sleep, window = 500, 3, time.Duration(kills)*time.Second
	}
	seed := chaostest.Seed(t)
	replay := fmt.Sprintf("TIDE_CHAOS_SEED=%d", seed)
	if full {
		replay += fmt.Sprintf(" TIDE_CHAOS=%d", kills)
	}
	t.Logf("seed %d (%s replays this run): %d kills, %d instances", seed, replay, kills, instances)
	rng := rand.New(rand.NewPCG(seed, 0x7469646575))

	dir := t.TempDir()
	t.Cleanup(func() { killMarked(t, filepath.Join(dir, "data"), "chaos") }) // runs last
	if err := os.WriteFile(filepath.Join(dir, "tide.yaml"), []byte(chaosPool), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "up.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	runs := filepath.Join(dir, "runs.log")
	command := fmt.Sprintf(`sleep %d; echo "$TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %s`, sleep, runs)
	port := freePort(t)
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), "", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d (%s): %s", seed, replay, fmt.Sprintf(format, args...))
	}
	fatal := func(format string, args ...any) {
		t.Helper()
		b, _ := os.ReadFile(filepath.Join(dir, "up.log"))
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Fatalf("seed %d (%s): %s\nlast of tide up's log:\n%s", seed, replay, fmt.Sprintf(format, args...), b)
	}
	pool := func() (httpapi.PoolJSON, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ps, err := cl.Pools(ctx)
		if err != nil {
			return httpapi.PoolJSON{}, err
		}
		for _, p := range ps {
			if p.Name == "chaos" {
				return p, nil
			}
		}
		return httpapi.PoolJSON{}, errors.New("no pool chaos")
	}
	// tookOver reports whether a controller took the pool over since began
	// (its "started" event: it listed the machines and adopted them).
	tookOver := func(began time.Time) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pn := "chaos"
		evs, err := cl.Events(ctx, client.EventOptions{Pool: &pn, Limit: 100})
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Reason == controller.ReasonStarted && !e.Time.Before(began) {
				return true
			}
		}
		return false
	}
	// workersOnline reports whether every ready node's worker is online.
	workersOnline := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pn := "chaos"
		nodes, err := cl.Nodes(ctx, &pn)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.State == "ready" && n.WorkerStatus != string(store.WorkerOnline) {
				return false
			}
		}
		return true
	}
	// converged waits until the pool holds what it wants: ready = desired,
	// nothing pending or draining, every ready node's worker connected.
	converged := func(u *chaosUp, within time.Duration) (time.Duration, error) {
		deadline := time.Now().Add(within)
		last := "no answer"
		for time.Now().Before(deadline) {
			select {
			case <-u.done:
				return 0, errors.New("tide up exited")
			default:
			}
			if p, err := pool(); err != nil {
				last = err.Error()
			} else if !tookOver(u.began) {
				last = "the controller has not taken the pool over"
			} else if p.Ready == p.Desired && p.Pending == 0 && p.Draining == 0 && p.Workers >= p.Ready && workersOnline() {
				return time.Since(u.began), nil
			} else {
				last = fmt.Sprintf("%+v", p)
			}
			time.Sleep(25 * time.Millisecond)
		}
		return 0, fmt.Errorf("pool not converged within %v: %s", within, last)
	}

	names := make([]string, instances)
	for i := range names {
		names[i] = fmt.Sprintf("chaos-%04d", i)
	}
	sub := &submitter{acked: map[string]string{}, inDoubt: map[string]bool{}, finished: make(chan struct{})}
	subCtx, stopSubmit := context.WithCancel(context.Background())
	defer stopSubmit()

	u := startChaosUp(t, dir, port, logf)
	if _, err := converged(u, 60*time.Second); err != nil {
		fatal("first start: %v", err)
	}
	go sub.run(subCtx, cl, names, command, 4, window*4/time.Duration(instances))

	var recovery []time.Duration
	var audits []machineAudit
	duringStart := 0
	phases := map[string]int{}
	for k := 1; k <= kills; k++ {
		var at time.Time
		if rng.IntN(4) == 0 && k > 1 {
			// A kill inside the restart: before the head listens, while the
			// controller adopts, or just after.
			at = u.began.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			duringStart++
		} else {
			if k > 1 {
				d, err := converged(u, 60*time.Second)
				if err != nil {
					fatal("restart %d: %v", k-1, err)
				}
				recovery = append(recovery, d)
			}
			at = time.Now().Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			if k > kills-max(1, kills/10) {
				// The last tenth of the kills: once the queue is empty,
				// while the idle pool waits out idle_timeout, drains and
				// deletes its machines.
				for end := time.Now().Add(5 * time.Minute); ; {
					if p, err := pool(); err == nil && p.Queued+p.Inflight == 0 {
						break
					}
					if time.Now().After(end) {
						fatal("kill %d: the queue is not empty 5 minutes on", k)
					}
					time.Sleep(100 * time.Millisecond)
				}
				at = time.Now().Add(time.Duration(rng.IntN(6000)) * time.Millisecond)
			}
		}
		select {
		case <-u.done:
			fatal("kill %d: tide up exited by itself", k)
		case <-time.After(max(0, time.Until(at))):
		}
		phase := "restart" // the head does not answer yet
		if p, err := pool(); err == nil {
			switch {
			case p.Queued+p.Inflight > 0:
				phase = "burst"
			case p.Ready+p.Pending+p.Draining > 0:
				phase = "idle or scaling down"
			default:
				phase = "at 0"
			}
		}
		phases[phase]++
		u.kill9(t)
		audits = append(audits, auditMachines(t, dir, "chaos"))
		u = startChaosUp(t, dir, port, logf)
	}
	d, err := converged(u, 60*time.Second)
	if err != nil {
		fatal("last restart: %v", err)
	}
	recovery = append(recovery, d)

	// Every submission goes in, every instance completes.
	select {
	case <-sub.finished:
	case <-time.After(3 * time.Minute):
		fatal("submissions not finished within 3m of the last restart")
	}
	var list []httpapi.InstanceJSON
	// 16 run at a time (4 nodes of 4): twice that long, and 2 minutes.
	deadline := time.Now().Add(time.Duration(instances*sleep)*time.Second/16*2 + 2*time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err = cl.Instances(ctx, client.ListOptions{Labels: map[string]string{"chaos": "1"}})
		cancel()
		done := 0
		for _, in := range list {
			if in.Status == "COMPLETED" || in.Status == "FAILED" || in.Status == "CANCELLED" || in.Status == "UNKNOWN" {
				done++
			}
		}
		if err == nil && done == instances && len(list) == instances {
			break
		}
		if time.Now().After(deadline) {
			p, _ := pool()
			fatal("%d of %d instances ended (listed %d, %v) by the deadline; pool %+v", done, instances, len(list), err, p)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Count what was lost or done twice.
	byName := map[string][]httpapi.InstanceJSON{}
	for _, in := range list {
		if in.Name != nil {
			byName[*in.Name] = append(byName[*in.Name], in)
		}
	}
	ranTimes := map[string]int{}
	if f, err := os.Open(runs); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if id, _, ok := strings.Cut(sc.Text(), " "); ok {
				ranTimes[id]++
			}
		}
		f.Close()
	}
	lost, twice, ackedMissing, storedTwice := 0, 0, 0, 0
	for _, name := range names {
		ins := byName[name]
		if len(ins) > 1 {
			storedTwice++
			fail("%s stored %d times", name, len(ins))
		}
		if id, ok := sub.acked[name]; ok && (len(ins) == 0 || ins[0].InstanceID != id) {
			ackedMissing++
			fail("acknowledged submission %s (%s) is missing", name, id)
			continue
		}
		if len(ins) == 0 {
			lost++
			fail("%s never stored", name)
			continue
		}
		in := ins[0]
		if in.Status != "COMPLETED" || ranTimes[in.InstanceID] == 0 {
			lost++
			reason := ""
			if in.FailureReason != nil {
				reason = *in.FailureReason
			}
			fail("instance %s (%s) ended %s %q after %d runs", name, in.InstanceID, in.Status, reason, ranTimes[in.InstanceID])
		}
		if ranTimes[in.InstanceID] > 1 || in.Attempt > 1 {
			twice++
			fail("instance %s (%s) ran to completion %d times (attempt %d)", name, in.InstanceID, ranTimes[in.InstanceID], in.Attempt)
		}
	}

	// The machines: what serves the pool is exactly what runs.
	leaked, createdTwice := 0, 0
	for i, a := range audits {
		for _, s := range a.leaked {
			leaked++
			fail("after kill %d: leaked machine %s", i+1, s)
		}
		for _, s := range a.twice {
			createdTwice++
			fail("after kill %d: machine created twice: %s", i+1, s)
		}
	}
	var mismatch string
	for try := 0; try < 50; try++ { // nodes and processes agree within 10 s
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pn := "chaos"
		nodes, err := cl.Nodes(ctx, &pn)
		cancel()
		if err != nil {
			fatal("nodes: %v", err)
		}
		live := liveWorkers(dir)
		mismatch = ""
		known := map[string]bool{}
		for _, n := range nodes {
			if n.MachineID == "" {
				continue
			}
			known[n.MachineID] = true
			if n.State == "ready" && len(live[n.MachineID]) == 0 {
				mismatch += fmt.Sprintf(" node %s is ready but its worker is gone;", n.MachineID)
			}
		}
		for id := range live {
			if !known[id] {
				mismatch += fmt.Sprintf(" worker %s runs but no node knows it;", id)
			}
		}
		if mismatch == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if mismatch != "" {
		leaked++
		fail("machines and nodes disagree:%s", mismatch)
	}
	a := auditMachines(t, dir, "chaos")
	leaked += len(a.leaked)
	createdTwice += len(a.twice)
	for _, s := range a.leaked {
		fail("at the end: leaked machine %s", s)
	}
	for _, s := range a.twice {
		fail("at the end: machine created twice: %s", s)
	}

	// Idle, the pool returns to 0 and leaves nothing behind.
	var p httpapi.PoolJSON
	for end := time.Now().Add(60 * time.Second); ; {
		p, err = pool()
		if err == nil && p.Desired == 0 && p.Ready == 0 && p.Pending == 0 && p.Draining == 0 && len(liveWorkers(dir)) == 0 {
			break
		}
		if time.Now().After(end) {
			fatal("the idle pool did not return to 0 within 60s: %+v (%v), %d workers alive", p, err, len(liveWorkers(dir)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u.done:
	case <-time.After(60 * time.Second):
		fatal("tide up did not stop within 60s of SIGTERM")
	}
	if n := markedProcesses(t, filepath.Join(dir, "data"), "chaos"); n != 0 {
		leaked++
		fail("%d processes of the pool alive after it returned to 0 and tide up stopped", n)
	}
	led := ledger(t, filepath.Join(dir, "data"), "chaos")
	for id, m := range led {
		if !m.Deleted {
			leaked++
			fail("machine %s not deleted at the end: %s", id, m.State)
		}
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "data", "tide.db"), store.Options{})
	if err != nil {
		fatal("reopen the store: %v", err)
	}
	j, err := st.Journal("chaos")
	if err != nil {
		t.Fatal(err)
	}
	js, err := j.Load(context.Background())
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(js.Records) != 0 {
		leaked++
		fail("the journal still holds %d machines at the end: %+v", len(js.Records), js.Records)
	}

	slices.Sort(recovery)
	sub.mu.Lock()
	tries, acked, inDoubt := sub.tries, len(sub.acked), len(sub.inDoubt)
	sub.mu.Unlock()
	t.Logf("seed %d: %d kills (%d drawn inside a restart; pool when killed: %v); %d instances, %d submission tries, %d acknowledged, %d in doubt (stored, answer cut); "+
		"lost %d, completed twice %d, acknowledged but missing %d, stored twice %d; machines: %d created, %d leaked, %d created twice; "+
		"recovery (restart → pool converged, %d samples) p50 %v p99 %v max %v",
		seed, kills, duringStart, phases, instances, tries, acked, inDoubt, lost, twice, ackedMissing, storedTwice,
		len(led), leaked, createdTwice, len(recovery), percentile(recovery, 50), percentile(recovery, 99), percentile(recovery, 100))
}
