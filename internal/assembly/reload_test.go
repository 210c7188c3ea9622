package assembly

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/store"
)

// simPool is a pool of the sim provider: machines that boot, drain and
// delete at once and run no worker, so a test drives the controllers
// without processes.
func simPool(name, nodes, extra string) string {
	return fmt.Sprintf(`  - name: %s
    provider: {type: sim}
    nodes: %s
    offerings:
      - {type: s1, cpu: 1, memory: 1Gi, price: 0.1}
    scaling: {policy: tide, reconcile_interval: 200ms%s}
`, name, nodes, extra)
}

// testAssembly is an assembly running in the test process.
type testAssembly struct {
	t    *testing.T
	dir  string
	path string
	a    *Assembly
	cl   *client.Client
	done chan error
	stop context.CancelFunc
}

func startAssembly(t *testing.T, pools ...string) *testAssembly {
	t.Helper()
	dir := t.TempDir()
	ta := &testAssembly{t: t, dir: dir, path: filepath.Join(dir, "pools.yaml"), done: make(chan error, 1)}
	ta.write(pools...)
	a, err := New(context.Background(), Config{ConfigPath: ta.path,
		Head: head.Config{DataDir: filepath.Join(dir, "data"), Port: freePort(t), SchedulerInterval: 100 * time.Millisecond}})
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
		case err := <-ta.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the assembly did not stop within 60s")
		}
	})
	return ta
}

func (ta *testAssembly) write(pools ...string) {
	ta.t.Helper()
	if err := os.WriteFile(ta.path, []byte("pools:\n"+strings.Join(pools, "")), 0o600); err != nil {
		ta.t.Fatal(err)
	}
}

// load parses pools as a config file would be.
func (ta *testAssembly) load(pools ...string) *config.File {
	ta.t.Helper()
	f, err := config.Parse(ta.path, []byte("pools:\n"+strings.Join(pools, "")))
	if err != nil {
		ta.t.Fatal(err)
	}
	return f
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

// machines returns the machine ids of pool name, as GET /nodes shows them.
func (ta *testAssembly) machines(name string) []string {
	ta.t.Helper()
	ns, err := ta.cl.Nodes(context.Background(), &name)
	if err != nil {
		ta.t.Fatal(err)
	}
	var ids []string
	for _, n := range ns {
		if n.Managed && n.State == head.NodeReady {
			ids = append(ids, n.MachineID)
		}
	}
	slices.Sort(ids)
	return ids
}

// pools returns the managed pools' names, as GET /pools shows them.
func (ta *testAssembly) pools() []string {
	ta.t.Helper()
	ps, err := ta.cl.Pools(context.Background())
	if err != nil {
		ta.t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		if p.Managed {
			names = append(names, p.Name)
		}
	}
	return names
}

func (ta *testAssembly) events() []store.Event {
	ta.t.Helper()
	evs, err := ta.a.Head().Events(context.Background(), store.EventFilter{Limit: 10000})
	if err != nil {
		ta.t.Fatal(err)
	}
	return evs
}

func (ta *testAssembly) eventually(what string, cond func() (bool, string)) {
	ta.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	ta.t.Fatalf("%s: not within 30s; last: %s", what, last)
}

// TestReloadAddsChangesAndRemovesPools applies one reload that adds a pool,
// changes one and removes one: the new pool starts, the changed one keeps
// its machines and applies its new bounds in place, the removed one drains
// and releases its machines and leaves /pools.
func TestReloadAddsChangesAndRemovesPools(t *testing.T) {
	ta := startAssembly(t, simPool("keep", "2", ""), simPool("gone", "1", ""))
	ta.eventually("both pools have their machines", func() (bool, string) {
		k, g := ta.machines("keep"), ta.machines("gone")
		return len(k) == 2 && len(g) == 1, fmt.Sprint(k, g)
	})
	before := ta.machines("keep")

	err := ta.a.Reload(ta.load(simPool("keep", "[2, 5]", ", idle_timeout: 90s"), simPool("new", "1", "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := ta.pools(); !slices.Contains(got, "new") || !slices.Contains(got, "keep") {
		t.Fatalf("after the reload /pools lists %v", got)
	}
	ta.eventually("the new pool launches its node", func() (bool, string) {
		m := ta.machines("new")
		return len(m) == 1, fmt.Sprint(m)
	})
	ta.eventually("the removed pool releases its machine and leaves /pools", func() (bool, string) {
		return !slices.Contains(ta.pools(), "gone"), fmt.Sprint(ta.pools())
	})
	if after := ta.machines("keep"); !slices.Equal(before, after) {
		t.Errorf("the changed pool's machines went from %v to %v; a changed pool keeps its machines", before, after)
	}
	ps, err := ta.cl.Pools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == "keep" && (p.NodeSpec == nil || p.NodeSpec.Max != 5 || !p.NodeSpec.Elastic) {
			t.Errorf("the changed pool shows bounds %+v, want [2, 5]", p.NodeSpec)
		}
	}
	resp, err := http.Get("http://" + ta.a.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tide_pool_desired_nodes{pool="new"} 1`, `tide_pool_desired_nodes{pool="keep"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	var reasons []string
	for _, e := range ta.events() {
		reasons = append(reasons, e.Pool+"/"+e.Reason)
	}
	for _, want := range []string{"new/" + ReasonPoolAdded, "keep/" + ReasonPoolChanged, "gone/" + ReasonPoolRemoving,
		"gone/" + ReasonPoolRemoved, "/" + ReasonConfigReloaded, "gone/deleted"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("no event %s in %v\n%s", want, reasons, ta.eventText())
		}
	}
	for _, r := range reasons {
		if r == "keep/deleted" || r == "keep/drain" {
			t.Errorf("the changed pool lost a machine: event %s", r)
		}
	}
}

// TestReloadRefusesABadConfigAsAWhole: one bad pool in the file refuses the
// whole file: the valid change beside it is not applied, the running pools
// keep running, and the error (returned, logged and recorded as an event)
// names the file, the pool and the field.
func TestReloadRefusesABadConfigAsAWhole(t *testing.T) {
	ta := startAssembly(t, simPool("a", "1", ""), simPool("b", "1", ""))
	ta.eventually("the pools have their machines", func() (bool, string) {
		return len(ta.machines("a")) == 1 && len(ta.machines("b")) == 1, fmt.Sprint(ta.machines("a"), ta.machines("b"))
	})
	cases := []struct {
		name, field string
		pools       []string
	}{
		{"bad provider option", "provider.options", []string{simPool("a", "3", ""),
			strings.Replace(simPool("b", "1", ""), "{type: sim}", "{type: sim, options: {boot: -1s}}", 1)}},
		{"provider type changed", "provider.type", []string{simPool("a", "3", ""),
			strings.Replace(simPool("b", "1", ""), "{type: sim}", "{type: local}", 1)}},
		{"plugin without command or address", "provider.options", []string{simPool("a", "3", ""),
			strings.Replace(simPool("c", "1", ""), "{type: sim}", "{type: plugin}", 1)}},
	}
	for _, tc := range cases {
		err := ta.a.Reload(ta.load(tc.pools...))
		if err == nil {
			t.Fatalf("%s: accepted", tc.name)
		}
		for _, want := range []string{ta.path, tc.field} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not name %q", tc.name, err, want)
			}
		}
		if !strings.Contains(err.Error(), `pool "b"`) && !strings.Contains(err.Error(), `pool "c"`) {
			t.Errorf("%s: error %q names no pool", tc.name, err)
		}
	}
	// A file that does not parse is refused by ReloadFile the same way.
	ta.write(simPool("a", "3", ""), "  - name: b\n    nodes: [1, 0]\n")
	if err := ta.a.ReloadFile(); err == nil || !strings.Contains(err.Error(), ta.path) || !strings.Contains(err.Error(), `pool "b"`) {
		t.Errorf("ReloadFile of a bad file: %v", err)
	}
	if got := ta.pools(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after refused reloads /pools lists %v, want [a b]", got)
	}
	ps, _ := ta.cl.Pools(context.Background())
	for _, p := range ps {
		if p.Name == "a" && p.NodeSpec.Min != 1 {
			t.Errorf("pool a was changed by a refused reload: %+v", p.NodeSpec)
		}
	}
	rejected := 0
	for _, e := range ta.events() {
		if e.Reason == ReasonConfigRejected {
			rejected++
			if !strings.Contains(e.Message, ta.path) {
				t.Errorf("rejection event names no file: %s", e.Message)
			}
		}
		if e.Reason == ReasonPoolChanged || e.Reason == ReasonConfigReloaded {
			t.Errorf("a refused reload changed something: %s %s", e.Reason, e.Message)
		}
	}
	if rejected != len(cases)+1 {
		t.Errorf("%d config-rejected events, want %d", rejected, len(cases)+1)
	}
}

// TestReloadAddsBackARemovedPool: a pool removed and added back before it
// finished draining is kept, on its new settings.
func TestReloadAddsBackARemovedPool(t *testing.T) {
	ta := startAssembly(t, simPool("a", "1", ""), simPool("b", "1", ""))
	ta.eventually("pool b has its machine", func() (bool, string) { return len(ta.machines("b")) == 1, "" })
	if err := ta.a.Reload(ta.load(simPool("a", "1", ""))); err != nil {
		t.Fatal(err)
	}
	if err := ta.a.Reload(ta.load(simPool("a", "1", ""), simPool("b", "2", ""))); err != nil {
		t.Fatal(err)
	}
	ta.eventually("pool b runs on its new bounds", func() (bool, string) {
		return len(ta.machines("b")) == 2, fmt.Sprint(ta.machines("b"))
	})
	time.Sleep(2 * retireCheck) // a stale retirement would remove it now
	if got := ta.pools(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("/pools lists %v, want [a b]", got)
	}
}

// TestNewRefusesUnknownProviderBeforeTouchingTheDataDir: a provider type
// the head does not build is refused at start, naming file, pool and
// field, and no data dir is created.
func TestNewRefusesUnknownProviderBeforeTouchingTheDataDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	body := "pools:\n" + strings.Replace(simPool("p", "1", ""), "{type: sim}", "{type: kubernetes}", 1)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	_, err := New(context.Background(), Config{ConfigPath: path, Head: head.Config{DataDir: data, Port: freePort(t)}})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a ConfigError", err)
	}
	for _, want := range []string{path, `pool "p"`, "provider.type", "kubernetes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start created %s", data)
	}
}

// TestReloadKeepsLocalWorkers: a local pool whose offerings change (its
// provider is reopened on the same state) keeps its machine and the very
// worker process serving it.
func TestReloadKeepsLocalWorkers(t *testing.T) {
	localPool := func(price string) string {
		return fmt.Sprintf(`  - name: loc
    provider: {type: local}
    nodes: 1
    offerings:
      - {type: l1, cpu: 1, memory: 512Mi, price: %s}
    scaling: {reconcile_interval: 300ms}
`, price)
	}
	dir := t.TempDir()
	ta := &testAssembly{t: t, dir: dir, path: filepath.Join(dir, "pools.yaml"), done: make(chan error, 1)}
	ta.write(localPool("0.1"))
	a, err := New(context.Background(), Config{ConfigPath: ta.path, Binary: tideBin,
		Head: head.Config{DataDir: filepath.Join(dir, "data"), Port: freePort(t), SchedulerInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ta.a = a
	ctx, cancel := context.WithCancel(context.Background())
	go func() { ta.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ta.done:
		case <-time.After(60 * time.Second):
			t.Error("the assembly did not stop within 60s")
		}
	})
	if ta.cl, err = client.New("http://"+a.Addr().String(), "", nil); err != nil {
		t.Fatal(err)
	}
	workers := func() map[string]string { // machine -> worker pid
		out := map[string]string{}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			args := strings.Split(string(b), "\x00")
			if err != nil || len(args) < 2 || args[1] != "worker" || !strings.Contains(string(b), dir) {
				continue
			}
			for i, a := range args {
				if a == "--name" && i+1 < len(args) {
					out[args[i+1]] = e.Name()
				}
			}
		}
		return out
	}
	ta.eventually("the local worker joins", func() (bool, string) {
		return len(ta.machines("loc")) == 1 && len(workers()) == 1, fmt.Sprint(ta.machines("loc"), workers())
	})
	before := workers()
	if err := a.Reload(ta.load(localPool("0.2"))); err != nil {
		t.Fatal(err)
	}
	ta.eventually("the pool runs on its new offering", func() (bool, string) {
		ps, err := ta.cl.Pools(context.Background())
		return err == nil && len(ps) > 0 && ps[0].Ready == 1, fmt.Sprint(ps)
	})
	time.Sleep(time.Second) // a few reconcile ticks: a replaced worker would show
	if after := workers(); !reflect.DeepEqual(before, after) {
		t.Errorf("workers (machine: pid) went from %v to %v; a changed pool keeps its machines", before, after)
	}
}
