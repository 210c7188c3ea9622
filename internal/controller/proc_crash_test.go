package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
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

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/netns"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/sdk/provider"
)

// The process-level crash test: TestCrashAtEveryStep's kill points, but the
// controller runs in a child process on a real SQLite journal and a real
// provider (local worker processes, or network namespaces with a process
// in each), and the crash is SIGKILL of that process.

const procCrashEnv = "TIDE_CONTROLLER_PROC_CRASH"

// procSpec tells a child what to run; it is passed as JSON in procCrashEnv.
type procSpec struct {
	Dir      string // holds tide.db and the provider's root
	Provider string // "local" or "netns"
	Prefix   string // netns names
	Subnet   string // netns /24
	K        int    // SIGKILL itself at step K; 0: never
}

const procPool = "pc"

var procOffering = capacity.Offering{Type: "p1", Kind: capacity.OnDemand, Resources: capacity.CPU(1000), PricePerHour: 0.1}

// shutdowner is what the test needs of a provider beyond provider.Provider.
type shutdowner interface {
	provider.Provider
	Wait(ctx context.Context) error
	Close() error
	Shutdown(ctx context.Context) error
}

// openProcProvider opens the spec's provider on its root; its machines run
// `sleep 3600`.
func openProcProvider(sp procSpec) (shutdowner, error) {
	cmd := func(local.Worker) (*exec.Cmd, error) { return exec.Command("sleep", "3600"), nil }
	root := filepath.Join(sp.Dir, "root")
	switch sp.Provider {
	case "local":
		return local.New(local.Config{Root: root, Command: cmd, Offerings: []capacity.Offering{procOffering},
			DrainTimeout: 5 * time.Second})
	case "netns":
		return netns.New(netns.Config{Root: root, Command: cmd, Offerings: []capacity.Offering{procOffering},
			Prefix: sp.Prefix, Subnet: sp.Subnet, DrainTimeout: 5 * time.Second})
	}
	return nil, fmt.Errorf("unknown provider %q", sp.Provider)
}

// stepJournal is a journal with a step (a possible kill point) before and
// after every write.
type stepJournal struct {
	controller.Journal
	step func(string)
}

func (j stepJournal) around(what string, fn func() error) error {
	j.step("before journal " + what)
	err := fn()
	j.step("after journal " + what)
	return err
}

func (j stepJournal) RaiseEpoch(ctx context.Context) (e uint64, err error) {
	err = j.around("raise epoch", func() error { e, err = j.Journal.RaiseEpoch(ctx); return err })
	return e, err
}

func (j stepJournal) NextSerial(ctx context.Context, epoch uint64) (s uint64, err error) {
	err = j.around("next serial", func() error { s, err = j.Journal.NextSerial(ctx, epoch); return err })
	return s, err
}

func (j stepJournal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	return j.around("put "+r.MachineID+" "+string(r.Intent), func() error { return j.Journal.Put(ctx, epoch, r) })
}

func (j stepJournal) Remove(ctx context.Context, epoch uint64, id string) error {
	return j.around("remove "+id, func() error { return j.Journal.Remove(ctx, epoch, id) })
}

func (j stepJournal) SetDesired(ctx context.Context, epoch uint64, d int) error {
	return j.around(fmt.Sprint("set desired ", d), func() error { return j.Journal.SetDesired(ctx, epoch, d) })
}

// procRig is a controller on a spec's journal and provider.
type procRig struct {
	sp    procSpec
	st    *store.Store
	jr    controller.Journal
	prov  shutdowner
	rec   *providertest.Recorder
	clk   *clock.Fake
	ctl   *controller.Controller
	ticks int
}

func openProcRig(sp procSpec, step func(string)) (*procRig, error) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(sp.Dir, "tide.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	pj, err := st.Journal(procPool)
	if err != nil {
		st.Close()
		return nil, err
	}
	prov, err := openProcProvider(sp)
	if err != nil {
		st.Close()
		return nil, err
	}
	r := &procRig{sp: sp, st: st, jr: pj, prov: prov, rec: providertest.NewRecorder(prov), clk: clock.NewFake(time.Now())}
	if step != nil {
		r.jr = stepJournal{Journal: pj, step: step}
		r.rec.Before = func(c providertest.Call) error { step(fmt.Sprintf("before %s %s", c.Op, c.MachineID)); return nil }
		r.rec.After = func(c providertest.Call) { step(fmt.Sprintf("after %s %s", c.Op, c.MachineID)) }
	}
	r.ctl, err = controller.New(controller.Config{
		Pool:              procPool,
		Reconcile:         reconcile.Config{Nodes: capacity.Elastic(0, 4)},
		Offerings:         []capacity.Offering{procOffering},
		Bootstrap:         []byte(`{"version":1,"head":"http://127.0.0.1:1","token":"t"}`),
		ControllerID:      "ctl",
		ReconcileInterval: 5 * time.Second,
	}, controller.Deps{Provider: r.rec, Journal: r.jr, Workload: controller.IdleWorkload{}, Clock: r.clk,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *procRig) close() {
	_ = r.prov.Close()
	_ = r.st.Close()
}

// tickUntil ticks (the controller's clock 5 s a tick; the provider's
// transitions awaited between ticks) until the pool holds want nodes and
// nothing else, or fails after max ticks.
func (r *procRig) tickUntil(want, max int) error {
	ctx := context.Background()
	r.ctl.SetDesired(policy.Decision{Desired: want, Reason: policy.NewReason("test", "test asks for %d", int64(want))})
	var err error
	for range max {
		r.clk.Advance(5 * time.Second)
		r.ticks++
		if terr := r.ctl.Tick(ctx); terr != nil && !provider.IsTransient(terr) {
			return fmt.Errorf("tick %d: %w", r.ticks, terr)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		werr := r.prov.Wait(wctx)
		cancel()
		if werr != nil {
			return fmt.Errorf("tick %d: provider wait: %w", r.ticks, werr)
		}
		if err = r.converged(want); err == nil {
			return nil
		}
	}
	return fmt.Errorf("not converged on %d nodes after %d ticks: %w", want, max, err)
}

// converged: the reconciler holds want joined nodes and nothing else, the
// provider lists exactly those machines, all Configured, and the journal
// records exactly them.
func (r *procRig) converged(want int) error {
	ctx := context.Background()
	st := r.ctl.Status()
	var errs []error
	if st.Desired != want || st.Current != want || st.Pending != 0 || st.Draining != 0 || st.State != "watching" || len(st.Deleting) > 0 {
		errs = append(errs, fmt.Errorf("reconciler: state %s, desired %d, current %d, pending %d, draining %d, deleting %v",
			st.State, st.Desired, st.Current, st.Pending, st.Draining, st.Deleting))
	}
	var held []string
	for _, n := range st.Nodes {
		if !n.Joined {
			errs = append(errs, fmt.Errorf("node %d (%s) has not joined", n.ID, n.MachineID))
		}
		held = append(held, n.MachineID)
	}
	slices.Sort(held)
	ms, err := r.prov.List(ctx, provider.Filter{Pool: procPool})
	if err != nil {
		errs = append(errs, err)
	}
	var listed []string
	for _, m := range ms {
		listed = append(listed, m.ID)
		if m.State != provider.Configured {
			errs = append(errs, fmt.Errorf("machine %s is %s", m.ID, m.State))
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, held) {
		errs = append(errs, fmt.Errorf("provider lists %v, controller holds %v", listed, held))
	}
	js, err := r.jr.Load(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	var recs []string
	for _, rec := range js.Records {
		recs = append(recs, rec.MachineID)
		if rec.Intent != controller.IntentCreate {
			errs = append(errs, fmt.Errorf("journal still means to %s %s", rec.Intent, rec.MachineID))
		}
	}
	if !slices.Equal(recs, held) {
		errs = append(errs, fmt.Errorf("journal records %v, controller holds %v", recs, held))
	}
	return errors.Join(errs...)
}

// procScenario is what the child runs: the pool from 0 to 3, then down to
// 1. Every kill point of a scale-up, a scale-down and the takeover lies on
// the way.
func procScenario(r *procRig) error {
	if err := r.tickUntil(3, 30); err != nil {
		return err
	}
	return r.tickUntil(1, 30)
}

// procChild runs in the child process: the scenario with a SIGKILL of
// itself at step K; it prints the number of steps when it finishes.
func procChild(raw string) {
	var sp procSpec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	n := 0
	step := func(what string) {
		mu.Lock()
		n++
		hit := n == sp.K
		mu.Unlock()
		if hit {
			fmt.Printf("kill at step %d: %s\n", sp.K, what)
			os.Stdout.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	r, err := openProcRig(sp, step)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if err := procScenario(r); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	mu.Lock()
	fmt.Println("steps", n)
	mu.Unlock()
	r.close() // a controller that stops leaves its machines running
	os.Exit(0)
}

// runProcChild runs the child on sp; it returns its output and whether it
// was killed.
func runProcChild(t *testing.T, sp procSpec) (string, bool) {
	t.Helper()
	raw, _ := json.Marshal(sp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashAtEveryStepRealProviders$")
	cmd.Env = append(os.Environ(), procCrashEnv+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return out.String(), true
		}
	}
	if err != nil {
		t.Fatalf("child (k=%d): %v\n%s", sp.K, err, out.String())
	}
	return out.String(), false
}

// markedProcs maps each machine id of the local provider under root to
// its live processes (by the provider's marker variable).
func markedProcs(t *testing.T, root string) map[string][]int {
	t.Helper()
	var uid string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "provider.json" {
			var id struct {
				UID string `json:"uid"`
			}
			if raw, err := os.ReadFile(path); err == nil && json.Unmarshal(raw, &id) == nil {
				uid = id.UID
			}
		}
		return nil
	})
	if uid == "" {
		return nil
	}
	prefix := []byte(local.MarkerEnv + "=" + uid + "/")
	out := map[string][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err != nil || bytes.Contains(stat, []byte(") Z ")) {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if id, ok := bytes.CutPrefix(kv, prefix); ok {
				out[string(id)] = append(out[string(id)], pid)
				break
			}
		}
	}
	return out
}

// machinesEver counts the machine records under root, tombstones included.
func machinesEver(root string) int {
	n := 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "machine.json" {
			n++
		}
		return nil
	})
	return n
}

// netnsLeft lists the namespaces and links whose names start with prefix.
func netnsLeft(prefix string) []string {
	var left []string
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
				left = append(left, "netns "+f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				if strings.HasPrefix(name, prefix) {
					left = append(left, "link "+name)
				}
			}
		}
	}
	return left
}

// removeNetns deletes whatever namespace or link carries prefix.
func removeNetns(prefix string) {
	for _, l := range netnsLeft(prefix) {
		kind, name, _ := strings.Cut(l, " ")
		if kind == "netns" {
			_ = exec.Command("ip", "netns", "del", name).Run()
		} else {
			_ = exec.Command("ip", "link", "del", name).Run()
		}
	}
}

// TestCrashAtEveryStepRealProviders is TestCrashAtEveryStep against real
// providers and a real crash: a child process runs a controller on a SQLite
// journal and the local provider (worker processes) or the netns provider
// (a network namespace and a process per machine; root only), scaling the
// pool 0 → 3 → 1, and kills itself with SIGKILL at step k (before and after
// each provider call and journal write). A new controller on the same
// journal and provider root then converges on 1 node, and the test counts
// machines leaked (a process, namespace or machine the controller does not
// hold) and created twice (two processes for a machine, more machines
// than the run needs): 0 each. Size: 3 kill points per provider drawn from
// the printed seed; TIDE_CHAOS=N (any N) kills at every step;
// TIDE_CHAOS_SEED replays the draw.
func TestCrashAtEveryStepRealProviders(t *testing.T) {
	if raw := os.Getenv(procCrashEnv); raw != "" {
		procChild(raw)
		return
	}
	every := os.Getenv("TIDE_CHAOS") != ""
	seed := chaostest.Seed(t)
	t.Logf("seed %d (TIDE_CHAOS_SEED=%d replays the kill points)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x636f6e74))
	for pi, prov := range []string{"local", "netns"} {
		t.Run(prov, func(t *testing.T) {
			if prov == "netns" {
				if why := netns.Supported(); why != "" {
					t.Skip("skipping: " + why)
				}
			}
			n := 10 + int(seed%200)
			spec := func(k int) procSpec {
				return procSpec{Dir: t.TempDir(), Provider: prov, K: k,
					Prefix: fmt.Sprintf("tk%d%d", pi, n), Subnet: fmt.Sprintf("10.232.%d.0/24", n)}
			}
			t.Cleanup(func() { removeNetns(fmt.Sprintf("tk%d%d", pi, n)) })
			// The run without a crash counts the steps.
			sp := spec(0)
			t.Cleanup(func() { cleanupProc(t, sp) })
			out, killed := runProcChild(t, sp)
			var steps int
			if killed || !strings.HasPrefix(out, "steps ") {
				t.Fatalf("the uncrashed run: %s", out)
			}
			fmt.Sscan(strings.TrimPrefix(out, "steps "), &steps)
			cleanupProc(t, sp)
			if steps < 20 {
				t.Fatalf("only %d steps: the hooks do not see the provider and the journal", steps)
			}
			ks := make([]int, steps)
			for i := range ks {
				ks[i] = i + 1
			}
			if !every {
				rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
				ks = ks[:3]
			}
			var recovery []time.Duration
			leaked, twice, maxCreated := 0, 0, 0
			for _, k := range ks {
				sp := spec(k)
				t.Cleanup(func() { cleanupProc(t, sp) })
				out, killed := runProcChild(t, sp)
				if !killed {
					t.Fatalf("seed %d k=%d: the child was not killed: %s", seed, k, out)
				}
				where := strings.TrimSpace(out)
				began := time.Now()
				r, err := openProcRig(sp, nil)
				if err != nil {
					t.Fatalf("seed %d, %s: reopen: %v", seed, where, err)
				}
				err = r.tickUntil(1, 30)
				recovery = append(recovery, time.Since(began))
				t.Logf("k=%d %s: recovered in %v", k, strings.TrimPrefix(where, fmt.Sprintf("kill at step %d: ", k)),
					time.Since(began).Round(time.Millisecond))
				if err != nil {
					r.close()
					t.Fatalf("seed %d, %s: a new controller does not converge: %v", seed, where, err)
				}
				held := r.ctl.Status().Nodes[0].MachineID
				procs := markedProcs(t, filepath.Join(sp.Dir, "root"))
				for id, pids := range procs {
					switch {
					case id != held:
						leaked++
						t.Errorf("seed %d, %s: machine %s left running (pids %v); the pool holds %s", seed, where, id, pids, held)
					case len(pids) != 1:
						twice++
						t.Errorf("seed %d, %s: machine %s runs %d processes %v", seed, where, id, len(pids), pids)
					}
				}
				if len(procs[held]) == 0 {
					leaked++
					t.Errorf("seed %d, %s: the held machine %s runs no process", seed, where, held)
				}
				if made := machinesEver(filepath.Join(sp.Dir, "root")); made > 3 {
					twice++
					t.Errorf("seed %d, %s: %d machines created for a run that needs 3", seed, where, made)
				} else {
					maxCreated = max(maxCreated, made)
				}
				if prov == "netns" {
					var extra []string
					for _, l := range netnsLeft(sp.Prefix + "-") {
						if !strings.HasSuffix(l, "-"+held) {
							extra = append(extra, l)
						}
					}
					if len(extra) > 0 {
						leaked++
						t.Errorf("seed %d, %s: namespaces of no held machine: %v", seed, where, extra)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err = r.prov.Shutdown(ctx)
				cancel()
				_ = r.st.Close()
				if err != nil {
					t.Errorf("seed %d, %s: shutdown: %v", seed, where, err)
				}
				if left := markedProcs(t, filepath.Join(sp.Dir, "root")); len(left) > 0 {
					t.Errorf("seed %d, %s: processes left after shutdown: %v", seed, where, left)
				}
				if prov == "netns" {
					if left := netnsLeft(sp.Prefix); len(left) > 0 {
						t.Errorf("seed %d, %s: left after shutdown: %v", seed, where, left)
					}
				}
				if t.Failed() {
					return
				}
			}
			slices.Sort(recovery)
			t.Logf("seed %d: %s provider, %d steps, %d kills, each recovered: %d leaked, %d created twice, at most %d machines made; "+
				"recovery (reopen → converged) p50 %v p99 %v", seed, prov, steps, len(ks), leaked, twice, maxCreated,
				recovery[len(recovery)/2].Round(time.Millisecond), recovery[min(len(recovery)-1, len(recovery)*99/100)].Round(time.Millisecond))
		})
	}
}

// cleanupProc stops whatever a run on sp left: its processes (through the
// provider when it opens, else by signal) and, for netns, its names.
func cleanupProc(t *testing.T, sp procSpec) {
	if p, err := openProcProvider(sp); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.Shutdown(ctx)
		cancel()
	}
	for _, pids := range markedProcs(t, filepath.Join(sp.Dir, "root")) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if sp.Provider == "netns" {
		removeNetns(sp.Prefix)
	}
}
