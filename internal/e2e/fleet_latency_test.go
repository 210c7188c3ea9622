package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
)

// TestFleetJoinLatency measures need → machine joined → instance running
// through the fleet (shard 250 ms cycle, needs sent every 500 ms and on
// every change) against the same pool on its provider used directly (local
// worker processes both). Each round submits one instance to an empty pool
// and waits for it to run, then for the pool to be empty again. Run with
// TIDE_FLEET_LATENCY=1 (about 3 minutes); figures in docs/benchmarks.md.
func TestFleetJoinLatency(t *testing.T) {
	if os.Getenv("TIDE_FLEET_LATENCY") != "1" {
		t.Skip("a measurement: TIDE_FLEET_LATENCY=1")
	}
	rounds := 12
	if v, err := strconv.Atoi(os.Getenv("TIDE_FLEET_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	r := startFleet(t)
	viaFleet := r.startHead("a", 100)
	direct := r.startDirectHead()
	for name, c := range map[string]*client.Client{"fleet": viaFleet, "direct": direct} {
		var ds []time.Duration
		for i := 0; i < rounds; i++ {
			r.waitFor(60*time.Second, name+" pool to be empty", func() (bool, string) {
				ps, err := c.Pools(context.Background())
				if err != nil || len(ps) != 1 {
					return false, fmt.Sprint(ps, err)
				}
				return ps[0].Ready+ps[0].Pending+ps[0].Draining == 0, fmt.Sprintf("%+v", ps[0])
			})
			start := time.Now()
			id := r.submit1(c, "sleep 1", false)
			r.waitFor(60*time.Second, "the instance to run", func() (bool, string) {
				in, err := c.Instance(context.Background(), id)
				return err == nil && (in.Status == "RUNNING" || in.Status == "COMPLETED"), fmt.Sprint(err)
			})
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		p := func(q float64) time.Duration {
			return ds[min(len(ds)-1, int(q*float64(len(ds))))].Round(time.Millisecond)
		}
		t.Logf("%s: need → running over %d rounds: p50 %s, p99 %s, min %s, max %s", name, len(ds), p(0.5), p(0.99),
			ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
}

// startDirectHead starts a head whose pool runs local workers itself, with
// the fleet pool's scaling settings.
func (r *fleetRig) startDirectHead() *client.Client {
	r.t.Helper()
	port := freePort(r.t)
	dir := filepath.Join(r.dir, "head-direct")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	conf := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte(`pools:
  - name: fa
    provider: {type: local}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 256Mi, price: 1}
    scaling: {policy: tide, idle_timeout: 1s, batch_window: 200ms, reconcile_interval: 250ms}
`), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.start("head-direct", "head", "--config", conf, "--port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--token", token, "--poll-timeout", "1s", "--scheduler-interval", "200ms", "--log-level", "warn")
	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), token, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.waitFor(20*time.Second, "the direct head to answer", func() (bool, string) {
		err := c.Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	return c
}
