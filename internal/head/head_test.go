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
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
)

var start = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type env struct {
	t     *testing.T
	h     *Head
	srv   *httptest.Server
	clk   *clock.Fake
	cfg   Config
	token string // admin token sent with requests
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	clk := clock.NewFake(start)
	cfg := Config{DataDir: t.TempDir(), Clock: clk, ReserveAfter: -1}
	if mod != nil {
		mod(&cfg)
	}
	return openEnv(t, cfg)
}

func openEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler()) // binds 127.0.0.1
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &env{t: t, h: h, srv: srv, clk: cfg.Clock.(*clock.Fake), cfg: cfg, token: cfg.Token}
}

// do sends a request and decodes the JSON answer into out (if non-nil).
func (e *env) do(method, path string, body any, out any) int {
	e.t.Helper()
	return e.doAuth(method, path, e.token, body, out)
}

func (e *env) doAuth(method, path, token string, body any, out any) int {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

type obj = map[string]any

func (e *env) submit(body obj) string {
	e.t.Helper()
	var out obj
	if code := e.do("POST", "/instances", body, &out); code != 200 {
		e.t.Fatalf("submit %v: %d %v", body, code, out)
	}
	return out["instance_id"].(string)
}

func (e *env) register(id string, gpus int) string {
	e.t.Helper()
	var out httpapi.RegisterResponse
	code := e.do("POST", "/workers", obj{"worker_id": id, "host": "10.1.1." + fmt.Sprint(len(id)),
		"resources": obj{"cpu_cores": 8, "gpu_units": gpus, "memory_mb": 16384}, "boot_id": "boot"}, &out)
	if code != 200 || out.WorkerToken == "" || out.Message != "Worker registered successfully" {
		e.t.Fatalf("register %s: %d %+v", id, code, out)
	}
	return out.WorkerToken
}

// heartbeat sends a heartbeat that must be answered without waiting (a
// generation from another epoch, or one the head has moved past).
func (e *env) heartbeat(id, tok string, gen int64, reps ...httpapi.InstanceReport) httpapi.HeartbeatResponse {
	e.t.Helper()
	var out httpapi.HeartbeatResponse
	code := e.do("POST", "/workers/"+id+"/heartbeat", httpapi.HeartbeatRequest{WorkerToken: tok, BootID: "boot",
		LastSeenGen: gen, Instances: reps}, &out)
	if code != 200 {
		e.t.Fatalf("heartbeat %s: %d", id, code)
	}
	return out
}

func (e *env) instance(id string) httpapi.InstanceJSON {
	e.t.Helper()
	var out httpapi.InstanceJSON
	if code := e.do("GET", "/instances/"+id, nil, &out); code != 200 {
		e.t.Fatalf("get %s: %d", id, code)
	}
	return out
}

func (e *env) schedule() int {
	e.t.Helper()
	n, err := e.h.ScheduleOnce(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func ip(n int) *int { return &n }

func TestSubmitAndGetShapes(t *testing.T) {
	e := newEnv(t, nil)
	id := e.submit(obj{"command": "echo hi", "labels": obj{"app": "x"}})
	var raw obj
	if code := e.do("GET", "/instances/"+id, nil, &raw); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	for _, k := range []string{"instance_id", "name", "command", "status", "display_status", "attempt", "assigned_to",
		"endpoint", "port", "exit_code", "failure_reason", "created_at", "assigned_at", "started_at", "ended_at",
		"cancellation_requested_at", "gpu_indices", "exclusive", "labels", "env", "target_worker", "venv"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("instance JSON lacks PyLet field %q", k)
		}
	}
	in := e.instance(id)
	if in.Status != "PENDING" || in.DisplayStatus != "PENDING" || in.Attempt != 0 || in.Name != nil ||
		!in.Exclusive || in.Labels["app"] != "x" || in.GPUIndices != nil || in.AssignedTo != nil ||
		*in.CreatedAt != start.Format(httpapi.TimeFormat) || in.ResourceRequirements.CPUCores != 1 ||
		in.ResourceRequirements.MemoryMB != 512 {
		t.Fatalf("instance: %+v", in)
	}
	// PyLet's name is "user-provided name, or None": null, not a made-up
	// name that a later submit could collide with (issue 19).
	if raw["name"] != nil {
		t.Fatalf("name of an unnamed instance = %#v, want null", raw["name"])
	}
	for _, n := range []string{id[:8], "%2F" + id} {
		if code := e.do("GET", "/instances/by-name/"+n, nil, nil); code != 404 {
			t.Fatalf("by-name %s of an unnamed instance: %d, want 404", n, code)
		}
	}
	named := e.submit(obj{"command": "echo hi", "name": id[:8]})
	var byName httpapi.InstanceJSON
	if code := e.do("GET", "/instances/by-name/"+id[:8], nil, &byName); code != 200 || byName.InstanceID != named ||
		byName.Name == nil || *byName.Name != id[:8] {
		t.Fatalf("by-name: %d %+v", code, byName)
	}
	var nf obj
	if code := e.do("GET", "/instances/nope", nil, &nf); code != 404 || nf["detail"] != "Instance not found" {
		t.Fatalf("missing: %d %v", code, nf)
	}
}

func TestSubmitValidation(t *testing.T) {
	e := newEnv(t, nil)
	e.register("w", 2)
	e.submit(obj{"command": "x", "name": "taken"})
	tests := []struct {
		name   string
		body   any
		code   int
		detail string // substring; "" for 422 lists
	}{
		{"missing command", obj{"name": "a"}, 422, ""},
		{"command of wrong type", obj{"command": 5}, 422, ""},
		{"malformed json", `{"command":`, 422, ""},
		{"null body", `null`, 422, ""},
		{"empty command", obj{"command": "  "}, 400, "command must not be empty"},
		{"gpu_indices without target", obj{"command": "x", "gpu_indices": []int{0}}, 400, "requires target_worker"},
		{"unknown target", obj{"command": "x", "target_worker": "zz"}, 400, "Target worker 'zz' not found"},
		{"gpu index out of range", obj{"command": "x", "target_worker": "w", "gpu_indices": []int{2}}, 400, "does not exist"},
		{"duplicate gpu index", obj{"command": "x", "target_worker": "w", "gpu_indices": []int{1, 1}}, 400, "unique"},
		{"label key too long", obj{"command": "x", "labels": obj{strings.Repeat("k", 64): "v"}}, 400, "label key"},
		{"label value too long", obj{"command": "x", "labels": obj{"k": strings.Repeat("v", 256)}}, 400, "label value"},
		{"relative venv", obj{"command": "x", "venv": "venv"}, 400, "absolute"},
		{"venv with ..", obj{"command": "x", "venv": "/a/../b"}, 400, "'..'"},
		{"duplicate name", obj{"command": "x", "name": "taken"}, 400, "An instance with name 'taken' already exists."},
		{"slash in name", obj{"command": "x", "name": "a/b"}, 400, "must not contain"},
		{"zero replicas", obj{"command": "x", "replicas": 0}, 400, "replicas"},
		{"bad restart policy", obj{"command": "x", "restart_policy": "sometimes"}, 400, "restart_policy"},
		{"negative cpu", obj{"command": "x", "resource_requirements": obj{"cpu_cores": -1}}, 400, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out obj
			code := e.do("POST", "/instances", tc.body, &out)
			if code != tc.code {
				t.Fatalf("code %d (%v), want %d", code, out, tc.code)
			}
			if tc.code == 422 {
				if _, ok := out["detail"].([]any); !ok {
					t.Fatalf("422 detail is not a list: %v", out)
				}
				if _, ok := out["body"]; !ok {
					t.Fatalf("422 lacks body: %v", out)
				}
				return
			}
			if d, _ := out["detail"].(string); !strings.Contains(d, tc.detail) {
				t.Fatalf("detail %q, want it to contain %q", d, tc.detail)
			}
		})
	}
}

func TestReplicasAndMultiLabelFilter(t *testing.T) {
	e := newEnv(t, nil)
	var out httpapi.SubmitResponse
	if code := e.do("POST", "/instances", obj{"command": "x", "name": "svc", "replicas": 3,
		"labels": obj{"model": "m", "type": "serve"}}, &out); code != 200 || len(out.InstanceIDs) != 3 || out.InstanceID != out.InstanceIDs[0] {
		t.Fatalf("replicas: %d %+v", code, out)
	}
	for i, id := range out.InstanceIDs {
		if n := e.instance(id).Name; n == nil || *n != fmt.Sprintf("svc-%d", i) {
			t.Fatalf("replica %d name %v", i, n)
		}
	}
	e.submit(obj{"command": "x", "labels": obj{"model": "m", "type": "store"}})
	e.submit(obj{"command": "x", "labels": obj{"model": "other", "type": "serve"}})
	tests := []struct {
		query string
		want  int
		code  int
	}{
		{"", 5, 200},
		{"?label=model=m", 4, 200},
		{"?label=model=m&label=type=serve", 3, 200},
		{"?label=model=m&label=type=serve&status=PENDING", 3, 200},
		{"?label=model=m&status=RUNNING", 0, 200},
		{"?label=model')%20OR%201=1--=x", 0, 200}, // A14.9: the key is data, not a JSON path
		{"?status=BOGUS", 0, 400},
		{"?label=nokey", 0, 400},
	}
	for _, tc := range tests {
		var raw json.RawMessage
		var list []httpapi.InstanceJSON
		code := e.do("GET", "/instances"+tc.query, nil, &raw)
		if code == 200 {
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatal(err)
			}
		}
		if code != tc.code || (code == 200 && len(list) != tc.want) {
			t.Errorf("GET /instances%s: %d with %d items, want %d with %d", tc.query, code, len(list), tc.code, tc.want)
		}
	}
}

func TestLifecycleEndpointResultAndWorkers(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 2)
	a := e.submit(obj{"command": "serve", "name": "svc", "resource_requirements": obj{"cpu_cores": 2, "gpu_units": 1, "memory_mb": 1024}})
	b := e.submit(obj{"command": "fail"})
	var res obj
	if code := e.do("GET", "/instances/"+a+"/result", nil, &res); code != 202 || res["detail"] != "Instance not yet completed" {
		t.Fatalf("result while pending: %d %v", code, res)
	}
	if code := e.do("GET", "/instances/"+a+"/endpoint", nil, &res); code != 404 || res["detail"] != "Instance endpoint not available yet" {
		t.Fatalf("endpoint while pending: %d %v", code, res)
	}
	if n := e.schedule(); n != 2 {
		t.Fatalf("scheduled %d, want 2", n)
	}
	hb := e.heartbeat("w", tok, 0)
	if len(hb.DesiredInstances) != 2 || hb.Gen>>genBits != e.h.Epoch() {
		t.Fatalf("desired: %+v", hb)
	}
	for _, d := range hb.DesiredInstances {
		if d.ExpectedStatus != "ASSIGNED" || d.Attempt != 1 {
			t.Fatalf("desired entry %+v", d)
		}
	}
	var ws []httpapi.WorkerJSON
	e.do("GET", "/workers", nil, &ws)
	if len(ws) != 1 || ws[0].AvailableResources.CPUCores != 5 || ws[0].AvailableResources.GPUUnits != 1 ||
		len(ws[0].AvailableGPUIndices) != 1 || ws[0].TotalResources.CPUCores != 8 || ws[0].Status != "ONLINE" {
		t.Fatalf("workers: %+v", ws)
	}
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: a, Attempt: 1, Status: "RUNNING", Port: ip(15600)},
		httpapi.InstanceReport{InstanceID: b, Attempt: 1, Status: "FAILED", ExitCode: ip(2)})
	for _, p := range []string{"/instances/" + a + "/endpoint", "/instances/by-name/svc/endpoint"} {
		if code := e.do("GET", p, nil, &res); code != 200 || res["endpoint"] != "10.1.1.1:15600" {
			t.Fatalf("%s: %d %v", p, code, res)
		}
	}
	if code := e.do("GET", "/instances/"+b+"/result", nil, &res); code != 200 ||
		res["error"].(obj)["exit_code"] != 2.0 {
		t.Fatalf("failed result: %d %v", code, res)
	}
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: a, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	if code := e.do("GET", "/instances/"+a+"/result", nil, &res); code != 200 || res["result"].(obj)["exit_code"] != 0.0 {
		t.Fatalf("completed result: %d %v", code, res)
	}
	var w httpapi.WorkerJSON
	if code := e.do("GET", "/workers/w", nil, &w); code != 200 || w.AvailableResources.CPUCores != 8 {
		t.Fatalf("worker after completion: %d %+v", code, w)
	}
	if code := e.do("GET", "/workers/none", nil, &res); code != 404 || res["detail"] != "Worker not found" {
		t.Fatalf("missing worker: %d %v", code, res)
	}
}

// TestPyLetA14_3_FastExitCompletesFromAssigned is A14.3: a command that
// exits before its RUNNING report reaches the head reports COMPLETED while
// the instance is still ASSIGNED. PyLet accepts COMPLETED only from RUNNING
// or UNKNOWN, so the instance stays ASSIGNED, stays desired, and the worker
// never drops it. Here it completes with its exit code and leaves the
// worker's desired set.
func TestPyLetA14_3_FastExitCompletesFromAssigned(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	id := e.submit(obj{"command": "echo"})
	e.schedule()
	hb := e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: id, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	if in := e.instance(id); in.Status != "COMPLETED" || in.ExitCode == nil || *in.ExitCode != 0 {
		t.Fatalf("status %s exit %v, want COMPLETED 0", in.Status, in.ExitCode)
	}
	if len(hb.DesiredInstances) != 0 {
		t.Fatalf("completed instance still desired: %+v", hb.DesiredInstances)
	}
}

func TestCancelEveryState(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	pending := e.submit(obj{"command": "p", "target_worker": "w", "resource_requirements": obj{"cpu_cores": 100}})
	assigned := e.submit(obj{"command": "a"})
	running := e.submit(obj{"command": "r"})
	e.schedule()
	hb := e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: running, Attempt: 1, Status: "RUNNING", Port: ip(1)})
	var res obj
	if code := e.do("POST", "/instances/"+pending+"/cancel", nil, &res); code != 200 || res["status"] != "cancelling" {
		t.Fatalf("cancel pending: %d %v", code, res)
	}
	if st := e.instance(pending).Status; st != "CANCELLED" {
		t.Fatalf("pending after cancel: %s", st)
	}
	if code := e.do("POST", "/instances/"+running+"/cancel?grace_period_seconds=1000", nil, &res); code != 200 || res["status"] != "cancelling" {
		t.Fatalf("cancel running: %d %v", code, res)
	}
	if code := e.do("POST", "/instances/"+running+"/cancel", nil, &res); code != 200 || res["status"] != "already_cancelling" {
		t.Fatalf("cancel running again: %d %v", code, res)
	}
	if in := e.instance(running); in.DisplayStatus != "CANCELLING" || in.Status != "RUNNING" || in.CancellationRequestedAt == nil {
		t.Fatalf("running while cancelling: %+v", in)
	}
	e.do("POST", "/instances/"+assigned+"/cancel?grace_period_seconds=2", nil, &res)
	// The worker learns of both cancels (its old generation is behind).
	hb = e.heartbeat("w", tok, hb.Gen, httpapi.InstanceReport{InstanceID: running, Attempt: 1, Status: "RUNNING", Port: ip(1)})
	if len(hb.DesiredInstances) != 0 || len(hb.Stopping) != 2 {
		t.Fatalf("heartbeat after cancels: %+v", hb)
	}
	for _, s := range hb.Stopping {
		want := 2.0
		if s.InstanceID == running {
			want = 300 // capped at MaxGracePeriod
		}
		if s.GracePeriodSeconds != want {
			t.Fatalf("grace of %s = %v, want %v", s.InstanceID, s.GracePeriodSeconds, want)
		}
	}
	// A14.2: having seen that generation, the worker reports only the one it
	// is stopping, so the never-started one completes its cancel.
	hb = e.heartbeat("w", tok, hb.Gen, httpapi.InstanceReport{InstanceID: running, Attempt: 1, Status: "STOPPING"})
	if st := e.instance(assigned).Status; st != "CANCELLED" {
		t.Fatalf("never-started instance after ack: %s, want CANCELLED", st)
	}
	e.heartbeat("w", tok, hb.Gen, httpapi.InstanceReport{InstanceID: running, Attempt: 1, Status: "CANCELLED", ExitCode: ip(-15)})
	in := e.instance(running)
	if in.Status != "CANCELLED" || in.ExitCode == nil || *in.ExitCode != -15 {
		t.Fatalf("running after stop: %+v", in)
	}
	if code := e.do("POST", "/instances/"+running+"/cancel", nil, &res); code != 400 ||
		res["detail"] != "Instance already in terminal state: CANCELLED" {
		t.Fatalf("cancel terminal: %d %v", code, res)
	}
	if code := e.do("POST", "/instances/nope/cancel", nil, &res); code != 404 {
		t.Fatalf("cancel missing: %d", code)
	}
	if code := e.do("POST", "/instances/"+running+"/cancel?grace_period_seconds=-1", nil, &res); code != 400 {
		t.Fatalf("negative grace: %d", code)
	}
	if code := e.do("GET", "/instances/"+running+"/result", nil, &res); code != 200 || res["cancelled"] != true {
		t.Fatalf("cancelled result: %d %v", code, res)
	}
}

// TestOfflineRescheduleAndFencing: liveness does not flap while a worker
// long-polls (A14.1); a dead worker's instances go UNKNOWN, or PENDING with
// a restart policy and then attempt 2 elsewhere; the old attempt's late
// reports change nothing; cancel of an UNKNOWN instance completes (A14.2).
func TestOfflineRescheduleAndFencing(t *testing.T) {
	e := newEnv(t, nil)
	tok1 := e.register("w1", 0)
	retry := e.submit(obj{"command": "r", "restart_policy": "on-failure", "target_worker": "w1"})
	plain := e.submit(obj{"command": "p", "target_worker": "w1"})
	e.schedule()
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: retry, Attempt: 1, Status: "RUNNING", Port: ip(1)},
		httpapi.InstanceReport{InstanceID: plain, Attempt: 1, Status: "RUNNING", Port: ip(2)})
	// An idle worker re-polls every PollTimeout: never SUSPECT.
	for i := 0; i < 4; i++ {
		e.clk.Advance(e.h.cfg.PollTimeout + 500*time.Millisecond)
		if err := e.h.CheckLiveness(context.Background()); err != nil {
			t.Fatal(err)
		}
		var w httpapi.WorkerJSON
		e.do("GET", "/workers/w1", nil, &w)
		if w.Status != "ONLINE" {
			t.Fatalf("idle long-polling worker became %s", w.Status)
		}
		e.heartbeat("w1", tok1, 0)
	}
	tok2 := e.register("w2", 0)
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.heartbeat("w2", tok2, 0)
	if err := e.h.CheckLiveness(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in := e.instance(plain); in.Status != "UNKNOWN" {
		t.Fatalf("plain on offline worker: %s", in.Status)
	}
	in := e.instance(retry)
	if in.Status != "PENDING" || in.Restarts != 1 {
		t.Fatalf("retry on offline worker: %+v", in)
	}
	// Re-target is by name; the instance was pinned to w1, so re-submit
	// style placement needs w1 back. Move the pin: w1 re-registers.
	tok1 = e.register("w1", 0)
	// Held while w1's fence may still be stopping attempt 1 (fence_test.go).
	e.clk.Advance(e.h.fenceHold())
	e.schedule()
	if in := e.instance(retry); in.Status != "ASSIGNED" || in.Attempt != 2 {
		t.Fatalf("rescheduled: %+v", in)
	}
	e.heartbeat("w1", tok1, 0, httpapi.InstanceReport{InstanceID: retry, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	if in := e.instance(retry); in.Status != "ASSIGNED" || in.Attempt != 2 {
		t.Fatalf("stale attempt changed state: %+v", in)
	}
	var res obj
	if code := e.do("POST", "/instances/"+plain+"/cancel", nil, &res); code != 200 {
		t.Fatalf("cancel unknown: %d", code)
	}
	if st := e.instance(plain).Status; st != "CANCELLED" {
		t.Fatalf("unknown after cancel: %s", st)
	}
}

// waitForTimers spins until the fake clock has n armed timers (bounded).
func waitForTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Waiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d timers (have %d)", n, clk.Waiters())
		}
		runtime.Gosched()
	}
}

func TestHeartbeatLongPoll(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	hb := e.heartbeat("w", tok, 0) // another epoch's generation: immediate
	type result struct {
		hb   httpapi.HeartbeatResponse
		code int
	}
	poll := func(gen int64) chan result {
		ch := make(chan result, 1)
		go func() {
			var out httpapi.HeartbeatResponse
			code := e.do("POST", "/workers/w/heartbeat", httpapi.HeartbeatRequest{WorkerToken: tok, BootID: "boot", LastSeenGen: gen}, &out)
			ch <- result{out, code}
		}()
		return ch
	}
	// A change wakes the held poll.
	ch := poll(hb.Gen)
	waitForTimers(t, e.clk, 1)
	id := e.submit(obj{"command": "x"})
	e.schedule()
	r := <-ch
	if r.code != 200 || r.hb.Gen <= hb.Gen || len(r.hb.DesiredInstances) != 1 || r.hb.DesiredInstances[0].InstanceID != id {
		t.Fatalf("woken poll: %+v", r)
	}
	// Without a change, the poll returns at PollTimeout with the same gen.
	ch = poll(r.hb.Gen)
	waitForTimers(t, e.clk, 1)
	select {
	case got := <-ch:
		t.Fatalf("poll returned before its timeout: %+v", got)
	default:
	}
	e.clk.Advance(e.h.cfg.PollTimeout)
	r2 := <-ch
	if r2.code != 200 || r2.hb.Gen != r.hb.Gen || len(r2.hb.DesiredInstances) != 1 {
		t.Fatalf("timed-out poll: %+v", r2)
	}
}

// TestPyLetA14_6_HeadRestartKeepsStateAndAnswersOldEpoch is A14.6: PyLet
// keeps generations in memory, so after a head restart gen is 0 while the
// worker holds a larger last_seen_gen, and its poll is held the full 30 s
// although its desired set is waiting. Here nothing is lost and a worker
// holding the old head's generation is answered at once (the poll would
// block on the fake clock otherwise).
func TestPyLetA14_6_HeadRestartKeepsStateAndAnswersOldEpoch(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	id := e.submit(obj{"command": "x"})
	e.schedule()
	hb := e.heartbeat("w", tok, 0)
	e.srv.Close()
	e.h.Close() // the store survives an unclean stop too: see store.TestCrashSurvivesKill9
	e2 := openEnv(t, e.cfg)
	if e2.h.Epoch() != e.h.Epoch()+1 {
		t.Fatalf("epoch %d after %d", e2.h.Epoch(), e.h.Epoch())
	}
	hb2 := e2.heartbeat("w", tok, hb.Gen) // would block if the old gen were honoured
	if len(hb2.DesiredInstances) != 1 || hb2.DesiredInstances[0].InstanceID != id || hb2.Gen>>genBits != e2.h.Epoch() {
		t.Fatalf("after restart: %+v", hb2)
	}
}

func TestHeartbeatAuthAndErrors(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 0)
	var out obj
	tests := []struct {
		name string
		path string
		body any
		code int
	}{
		{"bad token", "/workers/w/heartbeat", obj{"worker_token": "nope", "boot_id": "b"}, 401},
		{"missing token", "/workers/w/heartbeat", obj{"boot_id": "b"}, 400},
		{"no body", "/workers/w/heartbeat", nil, 400},
		{"unknown worker", "/workers/zz/heartbeat", obj{"worker_token": tok, "boot_id": "b"}, 404},
		{"bad report type", "/workers/w/heartbeat", obj{"worker_token": tok, "instances": "x"}, 422},
	}
	for _, tc := range tests {
		if code := e.do("POST", tc.path, tc.body, &out); code != tc.code {
			t.Errorf("%s: %d, want %d (%v)", tc.name, code, tc.code, out)
		}
	}
	// Re-registration issues a new token; the old one stops working.
	tok2 := e.register("w", 0)
	if code := e.do("POST", "/workers/w/heartbeat", obj{"worker_token": tok, "boot_id": "b"}, &out); code != 401 {
		t.Fatalf("old token after re-register: %d", code)
	}
	e.heartbeat("w", tok2, 0)
}

func TestAdminAndJoinTokens(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Token, c.JoinToken = "admin", "join" })
	e.token = ""
	paths := []struct{ method, path string }{
		{"GET", "/instances"}, {"POST", "/instances"}, {"GET", "/instances/x"}, {"GET", "/instances/x/logs"},
		{"POST", "/instances/x/cancel"}, {"GET", "/workers"}, {"DELETE", "/workers/x"}, {"GET", "/pressure"},
	}
	for _, p := range paths {
		var out obj
		if code := e.doAuth(p.method, p.path, "", obj{"command": "x"}, &out); code != 401 {
			t.Errorf("%s %s without token: %d, want 401", p.method, p.path, code)
		}
		if code := e.doAuth(p.method, p.path, "join", obj{"command": "x"}, &out); code != 401 {
			t.Errorf("%s %s with the join token: %d, want 401", p.method, p.path, code)
		}
	}
	if code := e.doAuth("GET", "/instances", "admin", nil, nil); code != 200 {
		t.Fatalf("with admin token: %d", code)
	}
	reg := obj{"worker_id": "w", "host": "h", "resources": obj{"cpu_cores": 1}}
	if code := e.doAuth("POST", "/workers", "", reg, nil); code != 401 {
		t.Fatalf("register without join token: %d", code)
	}
	if code := e.doAuth("POST", "/workers", "join", reg, nil); code != 200 {
		t.Fatalf("register with join token: %d", code)
	}
	if code := e.doAuth("GET", "/health", "", nil, nil); code != 200 {
		t.Fatalf("health: %d", code)
	}
}

func TestExposureAndConfig(t *testing.T) {
	tests := []struct {
		cfg Config
		ok  bool
	}{
		{Config{Addr: "127.0.0.1:8000"}, true},
		{Config{Addr: "[::1]:8000"}, true},
		{Config{Addr: "localhost:8000"}, true},
		{Config{Addr: "0.0.0.0:8000"}, false},
		{Config{Addr: ":8000"}, false},
		{Config{Addr: "10.0.0.1:8000", Token: "t"}, true},
		{Config{Addr: "0.0.0.0:8000", Insecure: true}, true},
	}
	for _, tc := range tests {
		if err := tc.cfg.checkExposure(); (err == nil) != tc.ok {
			t.Errorf("checkExposure(%q token=%q insecure=%v) = %v", tc.cfg.Addr, tc.cfg.Token, tc.cfg.Insecure, err)
		}
	}
	bad := []Config{
		{},
		{DataDir: "d", PollTimeout: 30 * time.Second, SuspectAfter: 30 * time.Second}, // PyLet's flapping values
		{DataDir: "d", SuspectAfter: 60 * time.Second, OfflineAfter: 60 * time.Second},
		{DataDir: "d", TLSCertFile: "c"},
		{DataDir: "d", Port: 70000},
	}
	for i, c := range bad {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("bad config %d accepted: %+v", i, c)
		}
	}
	err := Run(context.Background(), Config{DataDir: t.TempDir(), Addr: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "requires a token") {
		t.Fatalf("Run beyond loopback without token: %v", err)
	}
}

func TestLogsProxy(t *testing.T) {
	var gotAuth, gotQuery string
	logSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotQuery = r.Header.Get("Authorization"), r.URL.RawQuery
		if !strings.HasPrefix(r.URL.Path, "/logs/") {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(httpapi.LogChunk{AvailableOffset: 10, TotalSize: 15, Content: "aGVsbG8=", Size: 5})
	}))
	defer logSrv.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(logSrv.URL, "http://"))
	e := newEnv(t, func(c *Config) { c.Token, c.JoinToken = "admin", "join" })
	var reg httpapi.RegisterResponse
	e.doAuth("POST", "/workers", "join", obj{"worker_id": "w", "host": host, "log_port": mustAtoi(t, port),
		"resources": obj{"cpu_cores": 4}}, &reg)
	id := e.submit(obj{"command": "x"})
	var out obj
	if code := e.do("GET", "/instances/"+id+"/logs", nil, &out); code != 404 || out["detail"] != "Instance not assigned to any worker" {
		t.Fatalf("logs of pending: %d %v", code, out)
	}
	e.schedule()
	var chunk httpapi.LogChunk
	if code := e.do("GET", "/instances/"+id+"/logs?offset=10&limit=5", nil, &chunk); code != 200 ||
		chunk.Content != "aGVsbG8=" || chunk.AvailableOffset != 10 || chunk.TotalSize != 15 {
		t.Fatalf("logs: %d %+v", code, chunk)
	}
	if gotAuth != "Bearer "+provider.LogToken("join", "w") || gotQuery != "limit=5&offset=10" {
		t.Fatalf("worker saw auth %q query %q", gotAuth, gotQuery)
	}
	if code := e.do("GET", "/instances/"+id+"/logs?offset=-1", nil, &out); code != 400 {
		t.Fatalf("negative offset: %d", code)
	}
	logSrv.Close()
	if code := e.do("GET", "/instances/"+id+"/logs", nil, &out); code != 503 {
		t.Fatalf("logs with worker down: %d %v", code, out)
	}
}

func mustAtoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDeleteInstancesAndWorkers(t *testing.T) {
	e := newEnv(t, nil)
	e.register("w", 0)
	id := e.submit(obj{"command": "x", "name": "one"})
	done := e.submit(obj{"command": "x", "resource_requirements": obj{"cpu_cores": 99}})
	e.do("POST", "/instances/"+done+"/cancel", nil, nil)
	var out obj
	if code := e.do("DELETE", "/instances/"+id, nil, &out); code != 400 || !strings.Contains(out["detail"].(string), "cancel it first") {
		t.Fatalf("delete pending: %d %v", code, out)
	}
	if code := e.do("DELETE", "/instances?status=RUNNING", nil, &out); code != 400 {
		t.Fatalf("bulk delete RUNNING: %d", code)
	}
	if code := e.do("DELETE", "/instances?status=CANCELLED", nil, &out); code != 200 || len(out["deleted"].([]any)) != 1 {
		t.Fatalf("bulk delete: %d %v", code, out)
	}
	e.do("POST", "/instances/"+id+"/cancel", nil, nil)
	if code := e.do("DELETE", "/instances/by-name/one", nil, &out); code != 200 {
		t.Fatalf("delete by name: %d %v", code, out)
	}
	if code := e.do("GET", "/instances/"+id, nil, nil); code != 404 {
		t.Fatalf("deleted instance still there: %d", code)
	}
	// Names are free again after delete (A14.9).
	e.submit(obj{"command": "x", "name": "one"})
	if code := e.do("DELETE", "/workers/w", nil, &out); code != 400 {
		t.Fatalf("delete online worker: %d", code)
	}
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.h.CheckLiveness(context.Background())
	if code := e.do("DELETE", "/workers?status=OFFLINE", nil, &out); code != 200 || len(out["deleted"].([]any)) != 1 {
		t.Fatalf("delete offline workers: %d %v", code, out)
	}
	if code := e.do("DELETE", "/workers/w", nil, &out); code != 404 {
		t.Fatalf("delete deleted worker: %d", code)
	}
}

func TestPressurePublishedAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var got []map[string]capacity.Pressure
	e := newEnv(t, func(c *Config) {
		c.Registry = reg
		c.OnPressure = func(p map[string]capacity.Pressure) { got = append(got, p) }
	})
	tok := e.register("w", 0)
	x := e.submit(obj{"command": "x", "resource_requirements": obj{"cpu_cores": 2}})
	e.submit(obj{"command": "big", "resource_requirements": obj{"cpu_cores": 64}})
	e.schedule()
	e.schedule() // unchanged: not published again
	if len(got) != 1 {
		t.Fatalf("published %d reports, want 1", len(got))
	}
	p := got[0][""]
	if len(p.Nodes) != 1 || len(p.Nodes[0].Running) != 1 || p.Queued() != 1 || p.Pending[0].Requests.MilliCPU != 64000 || p.Finished != 0 {
		t.Fatalf("pressure: %+v", p)
	}
	// x finishes: the next report counts it (the tide policy's prefer
	// reads how fast work finishes from these counters).
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: x, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	e.schedule()
	if p := got[len(got)-1][""]; p.Finished != 1 || p.FinishedRequests.MilliCPU != 2000 {
		t.Fatalf("after x completed: finished %d (%v), want 1 (2 cores)", p.Finished, p.FinishedRequests)
	}
	var viaAPI map[string]capacity.Pressure
	code := e.do("GET", "/pressure", nil, &viaAPI)
	if pp := viaAPI[""]; code != 200 || pp.Queued() != 1 {
		t.Fatalf("GET /pressure: %d %+v", code, viaAPI)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tide_head_placements_total 1") || !strings.Contains(string(body), "tide_head_instances_submitted_total 2") {
		t.Fatalf("metrics:\n%s", body)
	}
}

// TestRunServesAndStops runs the real entry point on 127.0.0.1:0.
func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", OnListen: func(a net.Addr) { addrCh <- a }})
	}()
	var addr net.Addr
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen")
	}
	resp, err := http.Post("http://"+addr.String()+"/instances", "application/json", strings.NewReader(`{"command":"echo"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("submit through Run: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// TestAttemptsRoute: GET /instances/{id}/attempts lists every attempt with
// its worker and outcome, by id or answering 404 for an unknown one.
func TestAttemptsRoute(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w1", 0)
	id := e.submit(obj{"command": "x", "restart_policy": "on-failure", "max_restarts": 1})
	e.schedule()
	e.heartbeat("w1", tok, -1, httpapi.InstanceReport{InstanceID: id, Attempt: 1, Status: "FAILED", ExitCode: ip(2),
		FailureReason: "exit status 2"})
	e.schedule()
	e.heartbeat("w1", tok, -1, httpapi.InstanceReport{InstanceID: id, Attempt: 2, Status: "RUNNING"})
	var as []httpapi.AttemptJSON
	if code := e.do("GET", "/instances/"+id+"/attempts", nil, &as); code != 200 {
		t.Fatalf("GET attempts: %d", code)
	}
	if len(as) != 2 || as[0].Status != "FAILED" || as[0].Reason != "exit status 2" || as[0].ExitCode == nil ||
		*as[0].ExitCode != 2 || as[0].EndedAt == nil || as[1].Status != "RUNNING" || as[1].Worker != "w1" ||
		as[1].StartedAt == nil || as[1].EndedAt != nil {
		t.Fatalf("attempts = %+v", as)
	}
	var out obj
	if code := e.do("GET", "/instances/nope/attempts", nil, &out); code != 404 {
		t.Fatalf("attempts of unknown: %d %v", code, out)
	}
}

// TestListLimit: GET /instances?limit=N answers the newest N matching
// instances with X-Total-Count saying how many match; a bad limit is a 400
// naming it.
func TestListLimit(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	for i := range 5 {
		ids = append(ids, e.submit(obj{"command": "x", "labels": obj{"odd": fmt.Sprint(i%2 == 1)}}))
		e.clk.Advance(time.Second)
	}
	get := func(query string) ([]httpapi.InstanceJSON, string) {
		t.Helper()
		resp, err := e.srv.Client().Get(e.srv.URL + "/instances?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []httpapi.InstanceJSON
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /instances?%s: %d %v", query, resp.StatusCode, err)
		}
		return out, resp.Header.Get("X-Total-Count")
	}
	got, total := get("limit=2")
	if len(got) != 2 || total != "5" || got[0].InstanceID != ids[4] || got[1].InstanceID != ids[3] {
		t.Fatalf("limit=2: %d instances, total %q; want the newest 2 of 5", len(got), total)
	}
	if got, total = get("limit=1&label=odd=true"); len(got) != 1 || total != "2" || got[0].InstanceID != ids[3] {
		t.Fatalf("limit=1 odd: %d, total %q", len(got), total)
	}
	if got, total = get(""); len(got) != 5 || total != "" {
		t.Fatalf("no limit: %d, total %q; want all, no count", len(got), total)
	}
	for _, bad := range []string{"0", "-1", "x", "100001"} {
		var out obj
		if code := e.do("GET", "/instances?limit="+bad, nil, &out); code != 400 || !strings.Contains(fmt.Sprint(out["detail"]), "limit") {
			t.Errorf("limit=%s: %d %v, want 400 naming limit", bad, code, out)
		}
	}
}

// TestSubmitBounds: what one submission carries is bounded at the API; a
// body with 100,000 labels, or a name holding NUL and a newline, is
// refused with 400 naming the field and nothing is stored.
func TestSubmitBounds(t *testing.T) {
	e := newEnv(t, nil)
	labels := make(obj, 100000)
	for i := range 100000 {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, c := range []struct {
		body obj
		want string
	}{
		{obj{"command": "x", "labels": labels}, "labels: at most 64, got 100000"},
		{obj{"command": "x", "name": "a\x00b\nc"}, `name "a\x00b\nc" must be UTF-8 without control characters`},
		{obj{"command": "x", "labels": obj{"k": "line\nbreak"}}, `label value for "k" must be UTF-8 without control characters`},
		{obj{"command": "x", "env": obj{"A": strings.Repeat("v", 600<<10)}}, "env: at most 524288 bytes"},
		{obj{"command": strings.Repeat("x", 200<<10)}, "command must be at most 131072 bytes"},
	} {
		var out struct{ Detail string }
		if code := e.do("POST", "/instances", c.body, &out); code != 400 || !strings.HasPrefix(out.Detail, c.want) {
			t.Errorf("submit: %d %q, want 400 %q", code, out.Detail, c.want)
		}
	}
	var list []httpapi.InstanceJSON
	if code := e.do("GET", "/instances", nil, &list); code != 200 || len(list) != 0 {
		t.Fatalf("stored after refusals: %d %d instances", code, len(list))
	}
}

// TestMaxQueuedRefusesWith429: a pool's cap on waiting instances refuses
// a submit that would pass it with 429 and a reason; another pool, and the
// same pool once an instance stops waiting, still accept.
func TestMaxQueuedRefusesWith429(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxQueued = func(pool string) int {
			if pool == "capped" {
				return 2
			}
			return 0
		}
	})
	first := e.submit(obj{"command": "x", "pool": "capped"})
	e.submit(obj{"command": "x", "pool": "capped"})
	for _, body := range []obj{{"command": "x", "pool": "capped"}, {"command": "x", "pool": "capped", "replicas": 5}} {
		var out struct{ Detail string }
		code := e.do("POST", "/instances", body, &out)
		if code != http.StatusTooManyRequests || !strings.Contains(out.Detail, `pool "capped" has 2 instances waiting;`) ||
			!strings.Contains(out.Detail, "would pass its max_queued of 2") {
			t.Fatalf("submit past the cap: %d %q", code, out.Detail)
		}
	}
	for range 3 {
		e.submit(obj{"command": "x", "pool": "free"})
	}
	if code := e.do("POST", "/instances/"+first+"/cancel", nil, nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	e.submit(obj{"command": "x", "pool": "capped"})
}
