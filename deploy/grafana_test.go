package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/assembly"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/kube/operator"
)

// recorder is a registry that remembers every collector registered on it,
// so that a test can list the metric names a component registers, series
// or not (Gather shows a vector only once it has a child).
type recorder struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// names adds the fully-qualified names of every recorded collector to into.
func (r *recorder) names(t *testing.T, into map[string]bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range r.collectors {
			c.Describe(descs)
		}
		close(descs)
	}()
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		into[m[1]] = true
	}
}

// registeredMetrics builds a head with a pool of each kind of policy
// figures (the assembly tide head --config and tide up run) and tide kube's
// operator, each on a recorder, and returns every metric name they register.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(cfg, []byte(`pools:
  - name: tt
    provider: {type: sim}
    nodes: [0, 2]
    offerings: [{type: s1, cpu: 1, memory: 1Gi, price: 1}]
    scaling: {policy: target-tracking}
  - name: td
    provider: {type: sim}
    nodes: [0, 2]
    offerings: [{type: s1, cpu: 1, memory: 1Gi, price: 1}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	hr := &recorder{Registry: prometheus.NewRegistry()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := assembly.New(ctx, assembly.Config{ConfigPath: cfg, Name: "grafana-test", ControllerID: "grafana-test", Registry: hr,
		Head: head.Config{DataDir: filepath.Join(dir, "head"), Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stop()
	if err := <-done; err != nil && ctx.Err() != nil {
		t.Fatal(err)
	}
	hr.names(t, names)

	kr := &recorder{Registry: prometheus.NewRegistry()}
	if _, err := operator.New(operator.Config{Client: noClient{}, API: noAPI{}, Metrics: kr}); err != nil {
		t.Fatal(err)
	}
	kr.names(t, names)
	return names
}

// noClient and noAPI stand for the clients operator.New takes; building it
// registers its metrics and calls neither.
type noClient struct{ ctrlclient.Client }
type noAPI struct{ operator.API }

// TestGrafanaDashboardUsesRegisteredMetrics: every tide_* name in
// deploy/grafana/tide.json's queries is one a tide component registers (a
// histogram's _bucket, _sum and _count included), every panel uses the
// datasource variable, and the dashboard covers pools, decisions, waits,
// provider calls, the head and the build.
func TestGrafanaDashboardUsesRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	for _, must := range []string{"tide_build_info", "tide_head_placements_total", "tide_pool_desired_nodes",
		"tide_provider_operation_duration_seconds", "tide_kube_pending_pods", "tide_pool_capacity_provider_reservation_percent"} {
		if !registered[must] {
			t.Fatalf("%s is not among the registered metrics: the recorder missed a component", must)
		}
	}
	data, err := os.ReadFile("grafana/tide.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title      string
			Type       string
			Datasource struct{ UID string }
			Targets    []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	metric := regexp.MustCompile(`\btide_[a-z0-9_]+`)
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			for _, name := range metric.FindAllString(q.Expr, -1) {
				used[name] = true
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
						base = b
					}
				}
				if !registered[base] {
					t.Errorf("panel %q queries %s, which tide does not register", p.Title, name)
				}
			}
		}
	}
	for _, area := range []string{"tide_pool_", "tide_autoscaler_decisions_total", "tide_head_pending_to_running_seconds",
		"tide_provider_operation_", "tide_head_", "tide_build_info", "tide_kube_", "tide_pool_target_tracking_"} {
		found := false
		for name := range used {
			found = found || strings.HasPrefix(name, area)
		}
		if !found {
			t.Errorf("the dashboard has no panel on %s*", area)
		}
	}
	var unused []string
	for name := range registered {
		if strings.HasPrefix(name, "tide_") && !used[name] && !used[name+"_bucket"] && !used[name+"_count"] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("%d tide metrics registered, %d on the dashboard; not shown: %v", len(registered), len(used), unused)
}
