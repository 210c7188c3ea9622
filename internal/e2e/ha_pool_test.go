package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/sdk/provider"
)

// TestHAPoolFailover: the pool controllers run on the leader only, and a
// takeover neither leaks a machine nor creates one twice. Three heads on a
// 3-member etcd run one pool whose provider is a remote plugin they share
// (`tide provider serve-sim --listen`, every transition taking 1.5 s);
// instances that need three machines are queued in it and the leader is
// killed -9 at random moments while machines are created and configured
// (TIDE_HA_POOL_KILLS, 3 by default). Then the live machines serve distinct
// ordinals, exactly as many as needed, and they are the only machines the
// provider ever listed: none was created twice, none was left behind.
func TestHAPoolFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	cl := newCluster(t)
	ms := startEtcdCluster(t, cl)
	var eps []string
	for _, m := range ms {
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d", m.client))
	}
	storeURL := "etcd://" + strings.Join(eps, ",") + "/tide-pool"
	simAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cl.start("sim", "provider", "serve-sim", "--listen", simAddr, "--latency", "1500ms")
	cfgPath := filepath.Join(cl.dir, "pools.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`pools:
  - name: sim
    provider: {type: plugin, options: {address: "%s"}}
    nodes: [0, 6]
    offerings:
      - {type: m8, zone: z1, cpu: 8, memory: 32Gi, price: 0.4, capacity: on-demand}
    scaling: {policy: tide, idle_timeout: 1s, cooldown: 1s, reconcile_interval: 1s, scale_down_delay: 1s, batch_window: 200ms}
`, simAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	var sim provider.Provider
	cl.waitFor(20*time.Second, "the sim plugin to answer", func() (bool, string) {
		o, err := plugin.ParseOptions(map[string]any{"address": simAddr})
		if err != nil {
			t.Fatal(err)
		}
		p, closer, err := plugin.Open(context.Background(), o, slog.New(slog.DiscardHandler))
		if err != nil {
			return false, err.Error()
		}
		if _, err := p.List(context.Background(), provider.Filter{}); err != nil {
			closer.Close()
			return false, err.Error()
		}
		t.Cleanup(func() { closer.Close() })
		sim = p
		return true, ""
	})
	heads := make([]*haHead, 3)
	startHead := func(i int) {
		h := heads[i]
		h.d = cl.start(fmt.Sprintf("phead%d", i), "head", "--store", storeURL, "--config", cfgPath,
			"--port", strconv.Itoa(h.port), "--data-dir", h.dir, "--token", token, "--lease-ttl", "2s",
			"--scheduler-interval", "500ms", "--log-level", "info")
		cl.waitFor(20*time.Second, h.url+" to answer", func() (bool, string) {
			if !h.alive() {
				t.Fatalf("head %d exited: %v", i, h.d.cmd.ProcessState)
			}
			err := h.c.Health(context.Background())
			return err == nil, fmt.Sprint(err)
		})
	}
	for i := range heads {
		p := freePort(t)
		h := &haHead{port: p, dir: filepath.Join(cl.dir, fmt.Sprintf("phead%d", i)), url: fmt.Sprintf("http://127.0.0.1:%d", p)}
		c, err := client.New(h.url, token, &http.Client{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		h.c = c
		heads[i] = h
		startHead(i)
	}
	leaderIdx := func() int {
		for i, h := range heads {
			if h.alive() {
				if li, err := h.leader(); err == nil && li.Self {
					return i
				}
			}
		}
		return -1
	}
	cl.waitFor(20*time.Second, "a leader", func() (bool, string) { return leaderIdx() >= 0, "none" })

	var ids []string
	for i := range 3 {
		c, cpu, mem, pool, name := "true", 8.0, int64(1024), "sim", fmt.Sprint("big-", i)
		res, err := heads[i].c.Submit(context.Background(), &httpapi.SubmitRequest{Command: &c, Name: &name, Pool: &pool,
			ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.InstanceID)
	}
	live := func() ([]provider.Machine, error) {
		all, err := sim.List(context.Background(), provider.Filter{Pool: "sim"})
		if err != nil {
			return nil, err
		}
		var out []provider.Machine
		for _, m := range all {
			if m.State != provider.Deleting && m.State != provider.Failed {
				out = append(out, m)
			}
		}
		return out, nil
	}
	// Every machine id the provider ever lists is recorded.
	var seenMu sync.Mutex
	seen := map[string]bool{}
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for wctx.Err() == nil {
			if all, err := sim.List(wctx, provider.Filter{Pool: "sim"}); err == nil {
				seenMu.Lock()
				for _, m := range all {
					seen[m.ID] = true
				}
				seenMu.Unlock()
			}
			select {
			case <-wctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 41))
	kills := envInt("TIDE_HA_POOL_KILLS", 3)
	t.Logf("seed %d, %d kills", seed, kills)
	for k := range kills {
		time.Sleep(time.Duration(100+rng.IntN(1500)) * time.Millisecond)
		var li int
		cl.waitFor(15*time.Second, "a leader", func() (bool, string) { li = leaderIdx(); return li >= 0, "none" })
		ms, _ := live()
		cl.kill9(heads[li].d)
		t.Logf("kill %d: leader head %d killed with %d live machines", k+1, li, len(ms))
		cl.waitFor(15*time.Second, "a standby to lead", func() (bool, string) { return leaderIdx() >= 0, "none" })
		startHead(li)
	}
	cl.waitFor(60*time.Second, "three configured machines on distinct ordinals", func() (bool, string) {
		ms, err := live()
		if err != nil {
			return false, err.Error()
		}
		ords := map[int]string{}
		configured := 0
		for _, m := range ms {
			o, ok := controller.ParseMachineID("sim", m.ID)
			if !ok {
				return false, "foreign machine id " + m.ID
			}
			if prev, dup := ords[int(o)]; dup {
				return false, fmt.Sprintf("ordinal %d served by %s and %s", o, prev, m.ID)
			}
			ords[int(o)] = m.ID
			if m.State == provider.Configured {
				configured++
			}
		}
		return len(ms) == 3 && configured == 3, fmt.Sprintf("%d live, %d configured: %v", len(ms), configured, ords)
	})
	// Nothing was created twice: a re-created machine would carry a new
	// serial (a new id). Nothing leaked: every machine ever seen is live
	// and serves one of the three nodes.
	stopWatch()
	<-watched
	seenMu.Lock()
	defer seenMu.Unlock()
	final, err := live()
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || len(final) != 3 {
		t.Fatalf("machines ever seen %v, live at the end %d: want the same three", seen, len(final))
	}
	for _, m := range final {
		if !seen[m.ID] {
			t.Fatalf("live machine %s never seen", m.ID)
		}
	}
	t.Logf("machines ever created: %v; all live, one per node", seen)
	_ = ids
}
