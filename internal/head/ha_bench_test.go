package head

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/store"
)

// benchStores are the stores the store benchmarks compare: SQLite, and
// etcd (TIDE_ETCD_URL, e.g. the 3-member cluster scripts/etcd-test-cluster
// starts; an embedded single member when unset).
func benchStores(b *testing.B) map[string]func(b *testing.B) Config {
	return map[string]func(b *testing.B) Config{
		"sqlite": func(b *testing.B) Config { return Config{DataDir: b.TempDir()} },
		"etcd": func(b *testing.B) Config {
			u := os.Getenv("TIDE_ETCD_URL")
			if u == "" {
				srv := etcdtest.Start(b)
				u = "etcd://" + strings.TrimPrefix(srv.Endpoint(), "http://")
			}
			return Config{DataDir: b.TempDir(), Store: fmt.Sprintf("%s/bench-%d", u, time.Now().UnixNano())}
		},
	}
}

// BenchmarkSubmitHTTPStore measures durable submits through the HTTP API
// on each store: each answered only after its commit (SQLite) or its etcd
// transaction (a quorum fsync'd it).
func BenchmarkSubmitHTTPStore(b *testing.B) {
	for _, name := range []string{"sqlite", "etcd"} {
		b.Run(name, func(b *testing.B) {
			h, err := New(context.Background(), benchStores(b)[name](b))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			srv := httptest.NewServer(h.Handler())
			defer srv.Close()
			client := srv.Client()
			client.Transport.(*http.Transport).MaxIdleConnsPerHost = 128
			body := []byte(`{"command":"echo hi","resource_requirements":{"cpu_cores":1,"memory_mb":256},"labels":{"app":"bench"}}`)
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(srv.URL+"/instances", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
	}
}

// BenchmarkPlaceStored measures placements committed to each store: b.N
// pending instances on 50 workers, scheduling passes until all are placed
// (the scheduler's decision and the store's conditional writes).
func BenchmarkPlaceStored(b *testing.B) {
	for _, name := range []string{"sqlite", "etcd"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			cfg := benchStores(b)[name](b)
			cfg.ReserveAfter = -1
			h, err := New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if h.ha != nil {
				h.ha.st.SetFence("", 0) // placing without an election, as the leader would
			}
			st := h.Store()
			now := time.Now()
			for i := range 50 {
				if _, err := st.RegisterWorker(ctx, store.Registration{ID: fmt.Sprint("w", i), Host: "10.0.0.1",
					Capacity: capacity.Resources{MilliCPU: 1_000_000, Memory: 1 << 40}}, now); err != nil {
					b.Fatal(err)
				}
			}
			ins := make([]store.Instance, b.N)
			for i := range ins {
				ins[i] = store.Instance{ID: fmt.Sprint("i", i), Name: fmt.Sprint("n", i), Command: "true",
					Requests: capacity.Resources{MilliCPU: 100, Memory: 1 << 20}}
			}
			for len(ins) > 0 {
				n := min(len(ins), 64)
				if err := st.InsertInstances(ctx, ins[:n], now); err != nil {
					b.Fatal(err)
				}
				ins = ins[n:]
			}
			b.ResetTimer()
			placed := 0
			for placed < b.N {
				n, err := h.ScheduleOnce(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("a pass placed nothing with %d of %d placed", placed, b.N)
				}
				placed += n
			}
			b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
		})
	}
}
