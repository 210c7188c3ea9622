package head

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// registerIn registers a worker with 8 cores and 16 GiB in pool.
func (e *env) registerIn(id, pool string) string {
	e.t.Helper()
	var out httpapi.RegisterResponse
	code := e.do("POST", "/workers", obj{"worker_id": id, "host": "10.2.0.1", "pool": pool,
		"resources": obj{"cpu_cores": 8, "gpu_units": 0, "memory_mb": 16384}, "labels": obj{"zone": "z1"}}, &out)
	if code != 200 {
		e.t.Fatalf("register %s in %q: %d", id, pool, code)
	}
	return out.WorkerToken
}

func (e *env) drainPoke() {
	select {
	case <-e.h.poke:
	default:
	}
}

// TestCordonKeepsNewWorkOffAndBusyIgnoresDaemons: a cordoned worker gets
// nothing new (even as the best fit) but keeps what runs; the cordon
// survives a head restart; uncordoning pokes the scheduler; WorkerBusy sees
// only ASSIGNED/RUNNING non-daemons; the Workload adapter maps a node to
// the worker named by its machine id.
func TestCordonKeepsNewWorkOffAndBusyIgnoresDaemons(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	tokA := e.register("a", 0) // ordinal 0: the tie-break favourite
	e.register("b", 0)
	first := e.submit(obj{"command": "x", "resource_requirements": obj{"cpu_cores": 1}})
	e.schedule()
	if in := e.instance(first); *in.AssignedTo != "a" {
		t.Fatalf("before cordon, placed on %s", *in.AssignedTo)
	}
	wl := e.h.Workload()
	if err := wl.Cordon(ctx, controller.Node{Pool: "", MachineID: "a"}); err != nil {
		t.Fatal(err)
	}
	second := e.submit(obj{"command": "y", "resource_requirements": obj{"cpu_cores": 1}})
	e.schedule()
	if in := e.instance(second); in.AssignedTo == nil || *in.AssignedTo != "b" {
		t.Fatalf("after cordon of a, placed on %v", in.AssignedTo)
	}
	pinned := e.submit(obj{"command": "z", "target_worker": "a", "daemon": true, "resource_requirements": obj{"cpu_cores": 1}})
	e.schedule()
	if in := e.instance(pinned); in.Status != "PENDING" {
		t.Fatalf("instance pinned to a cordoned worker: %s", in.Status)
	}
	busy := func(w string, want bool) {
		t.Helper()
		got, err := wl.Busy(ctx, controller.Node{MachineID: w})
		if err != nil || got != want {
			t.Fatalf("Busy(%s) = %t, %v; want %t", w, got, err, want)
		}
	}
	busy("a", true) // the first instance still runs there
	e.heartbeat("a", tokA, 0, httpapi.InstanceReport{InstanceID: first, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	busy("a", false)
	busy("nobody", false)

	// The cordon is in the store: a restarted head keeps it. The first head
	// stops first: a data dir has one head at a time.
	e.srv.Close()
	e.h.Close()
	e2 := openEnv(t, Config{DataDir: e.cfg.DataDir, Clock: e.clk, ReserveAfter: -1})
	wl = e2.h.Workload()
	e2.schedule()
	if in := e2.instance(pinned); in.Status != "PENDING" {
		t.Fatalf("after restart, pinned instance %s", in.Status)
	}
	e2.drainPoke()
	if err := wl.Uncordon(ctx, controller.Node{MachineID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := e2.h.Cordon(ctx, "a", false); err != nil { // idempotent
		t.Fatal(err)
	}
	e2.schedule()
	if in := e2.instance(pinned); in.Status != "ASSIGNED" || !in.Daemon {
		t.Fatalf("after uncordon, pinned daemon %s", in.Status)
	}
	busy("a", false) // only a daemon runs there
	p := e2.h.Pressure()[""]
	var daemons int
	for _, n := range p.Nodes {
		for _, r := range n.Running {
			if r.Daemon {
				daemons++
			}
		}
	}
	if daemons != 1 || p.Inflight() != 1 {
		t.Fatalf("pressure does not carry the daemon flag: %+v", p)
	}
	e2.drainPoke()
	if err := e2.h.Cordon(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if len(e2.h.poke) != 0 {
		t.Fatal("cordoning poked the scheduler")
	}
	if err := e2.h.Cordon(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	if len(e2.h.poke) != 1 {
		t.Fatal("uncordoning did not poke the scheduler")
	}
	if _, err := wl.Busy(ctx, controller.Node{}); err == nil {
		t.Fatal("Busy of a node without a machine id succeeded")
	}
}

func TestRemoveWorker(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	keep := e.submit(obj{"command": "x", "restart_policy": "on-failure"})
	lose := e.submit(obj{"command": "y"})
	e.schedule()
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: keep, Attempt: 1, Status: "RUNNING"})
	if err := e.h.Cordon(ctx, "w", true); err != nil {
		t.Fatal(err)
	}
	if err := e.h.RemoveWorker(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if in := e.instance(keep); in.Status != "PENDING" || in.Restarts != 1 {
		t.Fatalf("restartable instance after removal: %s restarts %d", in.Status, in.Restarts)
	}
	if in := e.instance(lose); in.Status != "FAILED" || *in.FailureReason != store.ReasonWorkerDeleted {
		t.Fatalf("instance after removal: %s %v", in.Status, in.FailureReason)
	}
	if err := e.h.RemoveWorker(ctx, "w"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second removal: %v", err)
	}
	e.register("w", 0) // a new worker of that name is not cordoned
	// The removed worker's machine may still run attempt 1 (the controller
	// forgets a worker before it deletes the machine): held, as from an
	// OFFLINE worker, for removeHold or until the machine is deleted.
	if in := e.instance(keep); in.NotBefore == nil || *in.NotBefore != e.clk.Now().Add(e.h.removeHold()).UTC().Format(httpapi.TimeFormat) {
		t.Fatalf("requeued on removal: not before %v, want %s", in.NotBefore, e.clk.Now().Add(e.h.removeHold()))
	}
	if e.schedule() != 0 {
		t.Fatal("the requeued instance was placed while its old attempt may still run")
	}
	if err := e.h.Workload().(controller.DeletionObserver).MachineDeleted(ctx, controller.Node{MachineID: "w"}); err != nil {
		t.Fatal(err)
	}
	if e.schedule() != 1 {
		t.Fatal("the re-registered worker did not get the requeued instance once the machine was deleted")
	}
}

// TestRouteSetsThePoolOfUnpooledSubmits uses a fake router: GPU work by
// label, small work to "cpu", the rest unserved.
func TestRouteSetsThePoolOfUnpooledSubmits(t *testing.T) {
	type call struct {
		labels map[string]string
		req    capacity.Resources
	}
	var (
		mu    sync.Mutex
		calls []call
		route func(labels map[string]string, req capacity.Resources) string
	)
	e := newEnv(t, func(c *Config) {
		c.Route = func(labels map[string]string, req capacity.Resources, n int) []string {
			return slices.Repeat([]string{route(labels, req)}, n)
		}
		route = func(labels map[string]string, req capacity.Resources) string {
			mu.Lock()
			calls = append(calls, call{labels, req})
			mu.Unlock()
			switch {
			case labels["accelerator"] == "gpu":
				return "gpu"
			case req.MilliCPU <= 4000:
				return "cpu"
			}
			return ""
		}
	})
	e.register("t", 0)
	e.registerIn("m", "mine") // a pool named at submit must exist
	tests := []struct {
		name   string
		body   obj
		pool   string
		routed bool
		cpu    int64 // millicores Route must see
		memMB  int64
	}{
		{"by label", obj{"command": "x", "labels": obj{"accelerator": "gpu"}}, "gpu", true, 1000, 512},
		{"by fit", obj{"command": "x", "resource_requirements": obj{"cpu_cores": 2, "memory_mb": 64}}, "cpu", true, 2000, 64},
		{"no pool fits", obj{"command": "x", "resource_requirements": obj{"cpu_cores": 64}}, "", true, 64000, 512},
		{"empty pool is no pool", obj{"command": "x", "pool": ""}, "cpu", true, 1000, 512},
		{"explicit pool wins", obj{"command": "x", "pool": "mine", "labels": obj{"accelerator": "gpu"}}, "mine", false, 0, 0},
		{"target worker is not routed", obj{"command": "x", "target_worker": "t"}, "", false, 0, 0},
		{"replicas: one call", obj{"command": "x", "replicas": 3}, "cpu", true, 1000, 512},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			calls = nil
			mu.Unlock()
			var out httpapi.SubmitResponse
			if code := e.do("POST", "/instances", tc.body, &out); code != 200 {
				t.Fatalf("submit: %d", code)
			}
			ids := out.InstanceIDs
			if len(ids) == 0 {
				ids = []string{out.InstanceID}
			}
			for _, id := range ids {
				if p := e.instance(id).Pool; p != tc.pool {
					t.Fatalf("pool %q, want %q", p, tc.pool)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if (len(calls) == 1) != tc.routed || len(calls) > 1 {
				t.Fatalf("route called %d times, routed %t", len(calls), tc.routed)
			}
			if tc.routed {
				c := calls[0]
				if c.req.MilliCPU != tc.cpu || c.req.Memory != tc.memMB<<20 {
					t.Fatalf("route saw %+v, want %d millicores and %d MiB", c.req, tc.cpu, tc.memMB)
				}
				if want, _ := tc.body["labels"].(obj); len(want) != len(c.labels) {
					t.Fatalf("route saw labels %v, want %v", c.labels, want)
				}
			}
		})
	}
}

// TestEventsListAndFilters covers GET /events and its errors.
func TestEventsListAndFilters(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(c *Config) { c.Token = "tok" })
	ce := controller.Event{Time: start.Add(time.Second), Pool: "a", Type: controller.TypeWarning,
		Reason: "at-max", Message: "held at max 4"}
	if err := e.h.RecordEvent(ctx, FromController(ce)); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		pool := []string{"a", "b"}[i%2]
		if err := e.h.RecordEvent(ctx, Event{Pool: pool, Node: fmt.Sprint("n", i), Type: "Normal",
			Reason: "r", Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.h.RecordEvent(ctx, Event{Pool: "a"}); err == nil {
		t.Fatal("an event without type and reason was recorded")
	}
	tests := []struct {
		query string
		code  int
		ids   []int64
	}{
		{"", 200, []int64{1, 2, 3, 4, 5, 6}},
		{"?limit=2", 200, []int64{5, 6}},
		{"?since=4", 200, []int64{5, 6}},
		{"?since=1&limit=2", 200, []int64{2, 3}},
		{"?pool=a", 200, []int64{1, 2, 4, 6}},
		{"?pool=", 200, nil},
		{"?since=-1", 400, nil},
		{"?limit=0", 400, nil},
		{"?limit=10001", 400, nil},
		{"?follow=maybe", 400, nil},
	}
	for _, tc := range tests {
		var raw json.RawMessage
		code := e.do("GET", "/events"+tc.query, nil, &raw)
		if code != tc.code {
			t.Errorf("GET /events%s: %d %s, want %d", tc.query, code, raw, tc.code)
			continue
		}
		if code != 200 {
			continue
		}
		var evs []httpapi.EventJSON
		if err := json.Unmarshal(raw, &evs); err != nil || evs == nil {
			t.Fatalf("GET /events%s: %s: %v", tc.query, raw, err)
		}
		var ids []int64
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
		if !slices.Equal(ids, tc.ids) {
			t.Errorf("GET /events%s: ids %v, want %v", tc.query, ids, tc.ids)
		}
	}
	var evs []httpapi.EventJSON
	e.do("GET", "/events?limit=1&since=0", nil, &evs)
	want := httpapi.EventJSON{ID: 1, Time: start.Add(time.Second), Pool: "a", Type: "Warning", Reason: "at-max", Message: "held at max 4"}
	if len(evs) != 1 || evs[0] != want {
		t.Fatalf("converted controller event: %+v, want %+v", evs, want)
	}
	e.do("GET", "/events?since=1&limit=1", nil, &evs)
	if evs[0].Node != "n2" || !evs[0].Time.Equal(start) {
		t.Fatalf("event with a zero time takes the head's now and keeps its node: %+v", evs[0])
	}
	if code := e.doAuth("GET", "/events", "", nil, nil); code != 401 {
		t.Fatalf("GET /events without a token: %d", code)
	}
}

// follow opens GET /events with follow=1 and returns a line reader and a
// cancel function.
func (e *env) follow(query string) (*bufio.Scanner, *http.Response, context.CancelFunc) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events?follow=1&"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		e.t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	e.t.Cleanup(func() { cancel(); resp.Body.Close() })
	return bufio.NewScanner(resp.Body), resp, cancel
}

func next(t *testing.T, sc *bufio.Scanner) httpapi.EventJSON {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("stream ended: %v", sc.Err())
	}
	var ev httpapi.EventJSON
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
		t.Fatalf("line %q: %v", sc.Text(), err)
	}
	return ev
}

// TestEventsFollowStreams: the backlog then every new event of the pool,
// one JSON line each, as they are recorded; the stream ends at the follow
// bound, and when the client goes away the head stops following.
func TestEventsFollowStreams(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(c *Config) { c.EventFollowMax = time.Minute })
	rec := func(pool, msg string) {
		t.Helper()
		if err := e.h.RecordEvent(ctx, Event{Pool: pool, Type: "Normal", Reason: "r", Message: msg}); err != nil {
			t.Fatal(err)
		}
	}
	rec("a", "old-1")
	rec("b", "other")
	rec("a", "old-2")
	sc, _, _ := e.follow("pool=a&limit=1")
	if ev := next(t, sc); ev.Message != "old-2" {
		t.Fatalf("backlog (tail 1): %+v", ev)
	}
	// The follower is now waiting; each new event arrives as a line.
	for i := 0; i < 3; i++ {
		rec("b", "skip")
		rec("a", fmt.Sprint("new-", i))
		if ev := next(t, sc); ev.Message != fmt.Sprint("new-", i) || ev.Pool != "a" {
			t.Fatalf("streamed event %d: %+v", i, ev)
		}
	}
	// A burst larger than a read batch arrives whole and in order.
	for i := 0; i < followBatch+5; i++ {
		rec("a", fmt.Sprint("burst-", i))
	}
	for i := 0; i < followBatch+5; i++ {
		if ev := next(t, sc); ev.Message != fmt.Sprint("burst-", i) {
			t.Fatalf("burst event %d: %+v", i, ev)
		}
	}
	e.clk.Advance(time.Minute)
	if sc.Scan() {
		t.Fatalf("after the follow bound, read %q", sc.Text())
	}
	if sc.Err() != nil {
		t.Fatalf("stream did not end cleanly: %v", sc.Err())
	}

	// since= resumes after an id, across pools, in batches; a client that
	// goes away ends the follow.
	all, err := e.h.Events(ctx, store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sc, _, cancel := e.follow("since=2")
	for _, want := range all[2:] {
		if ev := next(t, sc); ev.ID != want.ID {
			t.Fatalf("resume since 2: read %d, want %d", ev.ID, want.ID)
		}
	}
	if e.clk.Waiters() != 1 {
		t.Fatalf("%d followers waiting, want 1", e.clk.Waiters())
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for e.clk.Waiters() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the head still follows for a client that went away")
		}
		runtime.Gosched()
	}
}

// TestPoolsAndNodesMergeViews: a managed pool from Config.PoolStatus merged
// with the head's workers (use, labels, cordon) and pressure (queued,
// inflight), then the pools only the head knows.
func TestPoolsAndNodesMergeViews(t *testing.T) {
	ctx := context.Background()
	var statuses []PoolStatus
	e := newEnv(t, nil)
	e.h.SetPoolStatus(func() []PoolStatus { return statuses })
	tok := e.registerIn("cpu-0-1", "cpu")
	e.registerIn("static", "")
	e.registerIn("cpu-stray", "cpu")
	if err := e.h.Cordon(ctx, "static", true); err != nil {
		t.Fatal(err)
	}
	statuses = []PoolStatus{{Name: "cpu", Provider: "local", Policy: "tide", Nodes: capacity.Elastic(0, 4), Desired: 3,
		Ready: 1, Pending: 1, Reason: "3 queued need 3 nodes", DecidedAt: start.Add(-time.Minute),
		Machines: []MachineStatus{
			{Ordinal: 0, MachineID: "cpu-0-1", Offering: "local-4", State: NodeReady, CreatedAt: start.Add(-time.Hour)},
			{Ordinal: 1, MachineID: "cpu-1-2", Offering: "local-4", Resources: capacity.Resources{MilliCPU: 4000, Memory: 8 << 30}},
			{Ordinal: 2, MachineID: "cpu-2-3", Offering: "local-4", State: NodeMarked, MarkedAt: start.Add(-30 * time.Second),
				CreatedAt: start.Add(-2 * time.Minute)},
		}}}
	run := e.submit(obj{"command": "x", "pool": "cpu", "resource_requirements": obj{"cpu_cores": 2, "memory_mb": 1024}})
	d := e.submit(obj{"command": "d", "pool": "cpu", "daemon": true, "target_worker": "cpu-0-1",
		"resource_requirements": obj{"cpu_cores": 1, "memory_mb": 512}})
	// A submit to a pool that does not exist is refused (issue 17); an
	// instance left in a pool that was since removed from the config stays
	// queued there.
	if code := e.do("POST", "/instances", obj{"command": "q", "pool": "gpu"}, nil); code != 400 {
		t.Fatalf("submit to no pool: %d", code)
	}
	if err := e.h.Store().InsertInstances(ctx, []store.Instance{{ID: "q-gpu", Name: "q", Command: "q", Pool: "gpu",
		Requests: capacity.Resources{MilliCPU: 1000}}}, start); err != nil {
		t.Fatal(err)
	}
	e.schedule()
	if in := e.instance(run); in.AssignedTo == nil || *in.AssignedTo != "cpu-0-1" {
		t.Fatalf("run placed on %v", in.AssignedTo)
	}
	e.heartbeat("cpu-0-1", tok, 0, httpapi.InstanceReport{InstanceID: d, Attempt: 1, Status: "RUNNING"})
	e.clk.Advance(10 * time.Second)

	var pools []httpapi.PoolJSON
	if code := e.do("GET", "/pools", nil, &pools); code != 200 {
		t.Fatalf("GET /pools: %d", code)
	}
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"cpu", "", "gpu"}) {
		t.Fatalf("pools %q, want managed first then by name", names)
	}
	cpu := pools[0]
	wantCPU := httpapi.PoolJSON{Name: "cpu", Managed: true, Provider: "local", Policy: "tide",
		// Counted from the nodes, one state each: the marked node has no
		// worker yet, so it is pending.
		NodeSpec: &httpapi.NodeSpecJSON{Min: 0, Desired: 0, Max: 4, Elastic: true}, Desired: 3, Ready: 1, Pending: 2, Marked: 1,
		Workers: 2, Queued: 0, Inflight: 1,
		LastDecision:   &httpapi.DecisionJSON{Reason: "3 queued need 3 nodes", Time: start.Add(-time.Minute), AgeSeconds: 70},
		TotalResources: httpapi.ResourcesOut{CPUCores: 16, MemoryMB: 32768},
		UsedResources:  httpapi.ResourcesOut{CPUCores: 3, MemoryMB: 1536}}
	if got, want := mustJSON(t, cpu), mustJSON(t, wantCPU); got != want {
		t.Fatalf("cpu pool:\n got %s\nwant %s", got, want)
	}
	if p := pools[1]; p.Managed || p.Workers != 1 || p.Ready != 0 || p.Draining != 1 || p.NodeSpec != nil {
		t.Fatalf("default pool (one cordoned worker): %+v", p)
	}
	if p := pools[2]; p.Managed || p.Workers != 0 || p.Queued != 1 {
		t.Fatalf("gpu pool (queued, no worker): %+v", p)
	}

	var nodes []httpapi.NodeJSON
	if code := e.do("GET", "/nodes?pool=cpu", nil, &nodes); code != 200 || len(nodes) != 4 {
		t.Fatalf("GET /nodes?pool=cpu: %d %+v", code, nodes)
	}
	n0, n1, n2, stray := nodes[0], nodes[1], nodes[2], nodes[3]
	if n0.ID != "cpu-0-1" || !n0.Managed || n0.State != "ready" || n0.WorkerStatus != "ONLINE" || n0.Instances != 1 ||
		n0.Daemons != 1 || n0.UsedResources.CPUCores != 3 || n0.TotalResources.CPUCores != 8 || n0.AgeSeconds != 3610 ||
		n0.Labels["zone"] != "z1" || n0.Offering != "local-4" || n0.Cordoned || !n0.MarkedAt.IsZero() {
		t.Fatalf("joined node: %+v", n0)
	}
	if n1.ID != "cpu-1-2" || n1.State != "pending" || n1.WorkerStatus != "" || n1.TotalResources.CPUCores != 4 ||
		n1.TotalResources.MemoryMB != 8192 || n1.AgeSeconds != 0 || n1.Instances != 0 {
		t.Fatalf("pending node: %+v", n1)
	}
	if n2.State != "marked" || !n2.MarkedAt.Equal(start.Add(-30*time.Second)) || n2.AgeSeconds != 130 {
		t.Fatalf("marked node: %+v", n2)
	}
	if stray.ID != "cpu-stray" || stray.Managed || stray.State != "ready" || stray.AgeSeconds != 10 {
		t.Fatalf("worker no autoscaler lists: %+v", stray)
	}
	var all []httpapi.NodeJSON
	e.do("GET", "/nodes", nil, &all)
	if len(all) != 5 || all[4].ID != "static" || all[4].State != "cordoned" || !all[4].Cordoned {
		t.Fatalf("GET /nodes: %+v", all)
	}
	if code := e.do("GET", "/nodes?pool=none", nil, &all); code != 200 || len(all) != 0 {
		t.Fatalf("GET /nodes?pool=none: %d %+v", code, all)
	}
	// Raw JSON: an unset time is left out, a list is never null.
	var raw []map[string]any
	e.do("GET", "/nodes?pool=cpu", nil, &raw)
	if _, ok := raw[1]["marked_at"]; ok {
		t.Fatalf("unmarked node has marked_at: %v", raw[1])
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gather returns the metric family name from reg.
func gather(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func labelled(mf *dto.MetricFamily, pool string) *dto.Metric {
	if mf == nil {
		return nil
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if l.GetName() == "pool" && l.GetValue() == pool {
				return m
			}
		}
	}
	return nil
}

// TestPoolMetrics: queued and inflight per pool (reset when a pool leaves
// the report), and pending-to-running latency per pool.
func TestPoolMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) {
		c.Registry = reg
		c.Route = func(_ map[string]string, _ capacity.Resources, n int) []string {
			return slices.Repeat([]string{"p"}, n)
		}
	})
	tok := e.registerIn("w", "p")
	for _, c := range []string{"a", "b", "c"} {
		e.submit(obj{"command": c, "resource_requirements": obj{"cpu_cores": 4}})
	}
	e.schedule()
	placed, err := e.h.Instances(context.Background(), store.Filter{Status: store.StatusAssigned})
	if err != nil || len(placed) != 2 {
		t.Fatalf("placed: %d %v", len(placed), err)
	}
	a, b := placed[0].ID, placed[1].ID
	gauge := func(name, pool string) float64 {
		t.Helper()
		m := labelled(gather(t, reg, name), pool)
		if m == nil {
			t.Fatalf("%s{pool=%q} missing", name, pool)
		}
		return m.GetGauge().GetValue()
	}
	if q, i := gauge("tide_head_queued_instances", "p"), gauge("tide_head_inflight_instances", "p"); q != 1 || i != 2 {
		t.Fatalf("queued %g inflight %g, want 1 and 2", q, i)
	}
	e.clk.Advance(3 * time.Second)
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: a, Attempt: 1, Status: "RUNNING"})
	e.clk.Advance(2 * time.Second)
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: a, Attempt: 1, Status: "RUNNING"},
		httpapi.InstanceReport{InstanceID: b, Attempt: 1, Status: "RUNNING"})
	h := labelled(gather(t, reg, "tide_head_pending_to_running_seconds"), "p")
	if h == nil || h.GetHistogram().GetSampleCount() != 2 || h.GetHistogram().GetSampleSum() != 8 {
		t.Fatalf("pending-to-running histogram: %v", h)
	}
	// The pool's worker goes away and its instances end: the pool leaves the
	// report and its gauges drop to zero.
	if err := e.h.RemoveWorker(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a, b} {
		if _, err := e.h.Cancel(context.Background(), id, nil); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := e.h.Instances(context.Background(), store.Filter{Status: store.StatusPending})
	for _, in := range list {
		if _, err := e.h.Cancel(context.Background(), in.ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.schedule()
	if _, ok := e.h.Pressure()["p"]; ok {
		t.Fatalf("pool p still in the report: %+v", e.h.Pressure())
	}
	if q, i := gauge("tide_head_queued_instances", "p"), gauge("tide_head_inflight_instances", "p"); q != 0 || i != 0 {
		t.Fatalf("after the pool left: queued %g inflight %g", q, i)
	}
	if !strings.Contains(fmt.Sprint(gather(t, reg, "tide_head_pending_to_running_seconds")), "pool") {
		t.Fatal("histogram lost its pool label")
	}
}

// TestServeEndsEventStreams: Serve on a caller's listener; stopping it ends
// an open event stream at once (not at the shutdown timeout) and returns
// nil.
func TestServeEndsEventStreams(t *testing.T) {
	h, err := New(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/events?follow=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := h.RecordEvent(context.Background(), Event{Pool: "p", Type: "Normal", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if ev := next(t, sc); ev.Reason != "r" {
		t.Fatalf("streamed %+v", ev)
	}
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop")
	}
	if took := time.Since(began); took >= 4*time.Second {
		t.Fatalf("Serve waited %s for the stream (the shutdown timeout)", took)
	}
	if sc.Scan() {
		t.Fatalf("stream continued: %q", sc.Text())
	}
}
