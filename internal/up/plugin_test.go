package up

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/plugin"
)

// pluginPool is burstPool on a subprocess plugin: `tide provider
// serve-local`, the local provider served over the plugin protocol, so the
// machines are real `tide worker` processes behind gRPC.
const pluginPool = `pools:
  - name: burst
    provider:
      type: plugin
      options:
        command: [%q, provider, serve-local, --root, %q, --offerings, '[{"type":"local-1cpu","cpu":1,"memory":"1Gi","price":0.05}]']
    nodes: [0, 4]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
    scaling: {policy: tide, idle_timeout: 4s, batch_window: 500ms, reconcile_interval: 1s}
`

// TestBurstThroughPluginProvider is TestBurst with the pool's provider a
// subprocess plugin that tide starts: 40 one-CPU instances complete on a
// pool that grows 0 → 4 and back to 0 through the plugin protocol, and
// Ctrl-C stops the plugin and every worker it started.
func TestBurstThroughPluginProvider(t *testing.T) {
	dir := t.TempDir()
	r := startUp(t, fmt.Sprintf(pluginPool, tideBin, filepath.Join(dir, "plugin-machines")))
	ids := r.submit(40, "sleep 1", 1, nil)
	maxReady := 0
	r.eventually("all 40 instances complete", 120*time.Second, func() (bool, string) {
		p := r.pool("burst")
		maxReady = max(maxReady, p.Ready)
		st := r.statuses(ids)
		return st["COMPLETED"] == 40, fmt.Sprintf("%v, pool ready %d desired %d", st, p.Ready, p.Desired)
	})
	if maxReady != 4 {
		t.Errorf("the pool peaked at %d ready nodes, want 4", maxReady)
	}
	if p := r.pool("burst"); p.Provider != "plugin" {
		t.Errorf("pool provider %q, want plugin", p.Provider)
	}
	r.eventually("the pool returns to 0 and its machines are deleted", 60*time.Second, func() (bool, string) {
		p := r.pool("burst")
		deleted := strings.Count(r.events(), " deleted: ")
		return p.Ready == 0 && p.Pending == 0 && p.Desired == 0 && deleted == 4, fmt.Sprintf("%d deleted, %+v", deleted, p)
	})
	if n := workerProcesses(dir); n != 1 {
		t.Errorf("%d processes under the plugin's root before Ctrl-C, want 1 (the plugin)", n)
	}
	r.stop()
	if n := workerProcesses(dir) + workerProcesses(r.dir); n != 0 {
		t.Errorf("%d processes of this run still alive after Ctrl-C", n)
	}
}

// TestCtrlCStopsPluginWorkers: Ctrl-C while a plugin's workers run
// instances gives the plugin SIGTERM; it stops every worker before exiting.
func TestCtrlCStopsPluginWorkers(t *testing.T) {
	dir := t.TempDir()
	r := startUp(t, fmt.Sprintf(pluginPool, tideBin, filepath.Join(dir, "plugin-machines")))
	ids := r.submit(2, "sleep 600", 1, nil)
	r.eventually("instances run", 60*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	if n := workerProcesses(dir); n < 3 {
		t.Fatalf("only %d processes under the plugin's root (plugin + 2 workers) before Ctrl-C", n)
	}
	r.stop()
	if n := workerProcesses(dir) + workerProcesses(r.dir); n != 0 {
		t.Errorf("%d processes of this run still alive after Ctrl-C", n)
	}
}

// TestShippedPluginExample: examples/plugin/tide.yaml loads, and its
// plugin options parse.
func TestShippedPluginExample(t *testing.T) {
	f, err := config.Load(filepath.Join("..", "..", "examples", "plugin", "tide.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pools := f.Pools
	if len(pools) != 1 || pools[0].Provider.Type != "plugin" {
		t.Fatalf("pools = %+v, want one plugin pool", pools)
	}
	o, err := plugin.ParseOptions(pools[0].Provider.Options)
	if err != nil || len(o.Command) < 3 || o.Command[1] != "provider" {
		t.Fatalf("options = %+v, %v", o, err)
	}
}
