package head

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// simWorker is a simulated worker: it holds a long-poll heartbeat at all
// times and records when each instance first appears in its answers.
type simWorker struct {
	id, token string
	mu        sync.Mutex
	seen      map[string]time.Time // instance → first answer listing it as stopping
	notify    chan struct{}
}

func (w *simWorker) loop(ctx context.Context, hc *http.Client, base string, started *sync.WaitGroup) {
	var gen int64
	first := true
	for ctx.Err() == nil {
		body, _ := json.Marshal(httpapi.HeartbeatRequest{WorkerToken: w.token, BootID: "sim", LastSeenGen: gen})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/workers/"+w.id+"/heartbeat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // loopback hiccup; the benchmark reports slow deliveries anyway
			continue
		}
		var hb httpapi.HeartbeatResponse
		err = json.NewDecoder(resp.Body).Decode(&hb)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			continue
		}
		now := time.Now()
		gen = hb.Gen
		w.mu.Lock()
		for _, s := range hb.Stopping {
			if _, ok := w.seen[s.InstanceID]; !ok {
				w.seen[s.InstanceID] = now
				select {
				case w.notify <- struct{}{}:
				default:
				}
			}
		}
		w.mu.Unlock()
		if first {
			first = false
			started.Done()
		}
	}
}

// BenchmarkHeartbeatFanIn holds a long-poll heartbeat for each of 5,000
// simulated workers on one head (real HTTP on 127.0.0.1, real SQLite) and
// measures how long a desired-state change takes to reach its worker: from
// the moment the change is requested (POST /instances/{id}/cancel, which
// commits it) to the moment the worker has read the answer of its held
// poll. b.N changes are made one after another, on random workers, while
// every other worker keeps its poll held.
//
//	go test -run '^$' -bench HeartbeatFanIn -benchtime=400x ./internal/head
func BenchmarkHeartbeatFanIn(b *testing.B) {
	const workers = 5000
	h, err := New(context.Background(), Config{DataDir: b.TempDir(), PollTimeout: 10 * time.Minute,
		SuspectAfter: 20 * time.Minute, OfflineAfter: 30 * time.Minute, ReserveAfter: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.ReadHeaderTimeout = time.Minute
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	tr := &http.Transport{MaxIdleConnsPerHost: workers + 100, MaxConnsPerHost: 0, IdleConnTimeout: time.Hour,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	sims := make([]*simWorker, workers)
	cpu, mem, gpus := 64.0, int64(1<<20), int64(0)
	for i := range sims {
		id := "sim-" + strconv.Itoa(i)
		tok, err := h.RegisterWorker(ctx, &httpapi.RegisterRequest{WorkerID: id, Host: "127.0.0.1",
			Resources: &httpapi.ResourceSpec{CPUCores: &cpu, GPUUnits: &gpus, MemoryMB: &mem}})
		if err != nil {
			b.Fatal(err)
		}
		sims[i] = &simWorker{id: id, token: tok, seen: map[string]time.Time{}, notify: make(chan struct{}, 1)}
	}
	// One instance per sampled worker, assigned before measuring.
	n := min(b.N, workers)
	ids := make([]string, n)
	for i := range n {
		cmd, target := "sleep 600", sims[i*(workers/n)].id
		c := 0.1
		got, err := h.Submit(ctx, &httpapi.SubmitRequest{Command: &cmd, TargetWorker: &target,
			ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &c}})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = got[0]
	}
	for {
		placed, err := h.ScheduleOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if placed == 0 {
			break
		}
	}
	// Connect the workers in waves, so the listen backlog never overflows.
	var started sync.WaitGroup
	for i, w := range sims {
		started.Add(1)
		go w.loop(ctx, hc, srv.URL, &started)
		if i%250 == 249 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	started.Wait()
	// Every worker has had its first answer and now holds a poll; give the
	// last ones time to arrive.
	time.Sleep(500 * time.Millisecond)

	lat := make([]time.Duration, 0, n)
	b.ResetTimer()
	for i := range n {
		w := sims[i*(workers/n)]
		t0 := time.Now()
		resp, err := hc.Post(srv.URL+"/instances/"+ids[i]+"/cancel", "application/json", nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("cancel: status %d", resp.StatusCode)
		}
		deadline := time.After(10 * time.Second)
		for {
			w.mu.Lock()
			at, ok := w.seen[ids[i]]
			w.mu.Unlock()
			if ok {
				lat = append(lat, at.Sub(t0))
				break
			}
			select {
			case <-w.notify:
			case <-deadline:
				b.Fatalf("change %d never reached worker %s", i, w.id)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(workers), "held_polls")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max_ms")
	b.ReportMetric(0, "ns/op")
	if testing.Verbose() {
		fmt.Printf("fan-in: %d held polls, %d changes: p50 %.2fms p99 %.2fms max %.2fms\n", workers, len(lat),
			pct(0.5), pct(0.99), float64(lat[len(lat)-1].Microseconds())/1000)
	}
}
