package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
)

var fenceStart = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// testTerms: the lease adds 1 + 10 + 1 + 2 = 14 s to the last successful
// heartbeat's send time.
var testTerms = &httpapi.WorkerLease{PollTimeoutSeconds: 1, OfflineAfterSeconds: 10, LivenessIntervalSeconds: 1,
	MarginSeconds: 2, GracePeriodSeconds: 0.5}

func TestPlanFence(t *testing.T) {
	l := lease{terms: testTerms, sent: time.Minute, ok: true}
	dl := time.Minute + 14*time.Second
	desired := []httpapi.DesiredInstance{
		{InstanceID: "rerun", Attempt: 2, RequeuedIfLost: true, RestartPolicy: "on-failure"},
		{InstanceID: "keep", Attempt: 1, RestartPolicy: "never"},
		{InstanceID: "stopping", Attempt: 1, RequeuedIfLost: true},
		{InstanceID: "gone", Attempt: 1, RequeuedIfLost: true},
	}
	local := []localView{
		{Key: key{"keep", 1}, Phase: phaseRunning},
		{Key: key{"rerun", 1}, Phase: phaseRunning}, // a stale attempt: not the desired key
		{Key: key{"rerun", 2}, Phase: phaseRunning},
		{Key: key{"stopping", 1}, Phase: phaseStopping},
		{Key: key{"gone", 1}, Phase: phaseExited},
	}
	tests := []struct {
		name string
		l    lease
		now  time.Duration
		want []key
	}{
		{"just before the deadline", l, dl - time.Nanosecond, nil},
		{"at the deadline", l, dl, []key{{"rerun", 2}}},
		{"long after (a SIGSTOP)", l, dl + time.Hour, []key{{"rerun", 2}}},
		{"no terms (an older head)", lease{sent: time.Minute, ok: true}, dl + time.Hour, nil},
		{"no successful heartbeat yet", lease{terms: testTerms}, dl + time.Hour, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := planFence(tc.l, tc.now, desired, local); !slices.Equal(got, tc.want) {
				t.Fatalf("planFence = %v, want %v", got, tc.want)
			}
		})
	}
	if g := l.grace(); g != 500*time.Millisecond {
		t.Fatalf("grace %s", g)
	}
}

func TestCapRequeuedGrace(t *testing.T) {
	l := lease{terms: testTerms, ok: true}
	prev := []httpapi.DesiredInstance{{InstanceID: "a", Attempt: 1, RequeuedIfLost: true}, {InstanceID: "b", Attempt: 1},
		{InstanceID: "c", Attempt: 1, RequeuedIfLost: true}}
	stops := []stopAction{{Key: key{"a", 1}, Grace: 30 * time.Second}, {Key: key{"b", 1}, Grace: 30 * time.Second},
		{Key: key{"c", 1}, Grace: 20 * time.Second}}
	got := capRequeuedGrace(slices.Clone(stops), prev, []httpapi.StoppingInstance{{InstanceID: "c", Attempt: 1}}, l)
	want := []stopAction{{Key: key{"a", 1}, Grace: 500 * time.Millisecond}, stops[1], stops[2]}
	if !slices.Equal(got, want) {
		t.Fatalf("capped %v, want %v", got, want)
	}
	if got := capRequeuedGrace(slices.Clone(stops), prev, nil, lease{}); !slices.Equal(got, stops) {
		t.Fatalf("without a lease: %v", got)
	}
}

// fakeHead answers a worker as a head would, in one of three modes: "up"
// answers with the desired set after holding the poll briefly (real time),
// "down" answers 502 at once (the head unreachable: no successful
// heartbeat), "hold" keeps the poll until release is closed and then
// answers with the desired set as it was when the poll arrived.
type fakeHead struct {
	mu      sync.Mutex
	mode    string
	desired []httpapi.DesiredInstance
	release chan struct{}
	// reports is the last report per instance key, from any heartbeat.
	reports map[key]httpapi.InstanceReport
	beats   int
}

func (f *fakeHead) set(mode string, desired []httpapi.DesiredInstance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = mode
	if desired != nil {
		f.desired = desired
	}
	if mode == "hold" {
		f.release = make(chan struct{})
	}
}

func (f *fakeHead) report(k key) (httpapi.InstanceReport, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reports[k], f.beats
}

func (f *fakeHead) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/workers" {
		json.NewEncoder(w).Encode(httpapi.RegisterResponse{WorkerToken: "tok", Message: "Worker registered successfully"})
		return
	}
	var req httpapi.HeartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.beats++
	for _, rep := range req.Instances {
		f.reports[key{rep.InstanceID, rep.Attempt}] = rep
	}
	mode, desired, release := f.mode, slices.Clone(f.desired), f.release
	f.mu.Unlock()
	switch mode {
	case "down":
		http.Error(w, `{"detail":"cut off"}`, http.StatusBadGateway)
		return
	case "hold":
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	default:
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	json.NewEncoder(w).Encode(httpapi.HeartbeatResponse{Gen: 1, DesiredInstances: desired, Lease: testTerms})
}

// startFenceWorker runs a worker on a fake clock against a fakeHead that
// asks for two sleeping instances: "rerun" (on-failure, requeued if lost)
// and "keep" (restart never).
func startFenceWorker(t *testing.T) (*fakeHead, *clock.Fake, Config) {
	t.Helper()
	fh := &fakeHead{mode: "up", reports: map[key]httpapi.InstanceReport{}, desired: []httpapi.DesiredInstance{
		{InstanceID: "rerun", Attempt: 1, Command: "exec sleep 300", ExpectedStatus: "ASSIGNED", RestartPolicy: "on-failure",
			RequeuedIfLost: true},
		{InstanceID: "keep", Attempt: 1, Command: "exec sleep 300", ExpectedStatus: "ASSIGNED", RestartPolicy: "never"},
	}}
	srv := httptest.NewServer(fh)
	t.Cleanup(srv.Close)
	clk := clock.NewFake(fenceStart)
	cfg := workerConfig(t, &testHead{srv: srv}, "w1")
	cfg.Clock = clk
	cfg.DefaultGracePeriod = 30 * time.Second // longer than the lease's: the fence must use the lease's
	startWorker(t, cfg)                       // stops every process at cleanup, even on failure
	running(t, fh, key{"rerun", 1}, key{"keep", 1})
	return fh, clk, cfg
}

// running waits until the worker reports every key RUNNING.
func running(t *testing.T, fh *fakeHead, keys ...key) {
	t.Helper()
	eventually(t, 10*time.Second, "instances reported running", func() bool {
		for _, k := range keys {
			if r, _ := fh.report(k); r.Status != "RUNNING" {
				return false
			}
		}
		return true
	})
}

// beats waits until the fake head has seen n more heartbeats, advancing
// the fake clock by step between looks (0 when the worker is "up" and
// needs no timer to move).
func beats(t *testing.T, fh *fakeHead, clk *clock.Fake, n int, step time.Duration) {
	t.Helper()
	_, from := fh.report(key{})
	eventually(t, 10*time.Second, "more heartbeats", func() bool {
		if _, m := fh.report(key{}); m >= from+n {
			return true
		}
		clk.Advance(step)
		return false
	})
}

// alive checks, after giving the worker a moment (real time) to act on the
// last Advance, that the instance was not asked to stop and still runs.
func alive(t *testing.T, dataDir, id string, when string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // a negative check: give a wrong fence the time to show
	rec := readRecord(t, dataDir, id, 1)
	if rec.Stopped || rec.Fenced != "" || rec.PID <= 0 || syscall.Kill(rec.PID, 0) != nil {
		t.Fatalf("%s: %s was stopped: %+v", when, id, rec)
	}
}

// TestFenceWaitsForTheLease: a partition that heals just before the lease
// runs out stops nothing; one that outlasts it stops the restart-on-failure
// instance (with the lease's grace period, its reason in its log and in the
// report) and keeps the restart-never one running.
func TestFenceWaitsForTheLease(t *testing.T) {
	fh, clk, cfg := startFenceWorker(t)
	// Every heartbeat so far was sent at fenceStart (the clock is fake):
	// the deadline is fenceStart + 14 s.
	fh.set("down", nil)
	clk.Advance(13*time.Second + 500*time.Millisecond)
	fh.set("up", nil)
	clk.Advance(200 * time.Millisecond) // the retry (RetryMax): sent at +13.7 s, it succeeds
	beats(t, fh, clk, 2, 0)
	clk.Advance(time.Second) // +14.7 s: past the first deadline, not the new one (≥ +27.7 s)
	alive(t, cfg.DataDir, "rerun", "healed 0.3 s before the lease ran out")
	alive(t, cfg.DataDir, "keep", "healed in time")

	// Cut again, for longer than the lease. The last successful heartbeat
	// was sent between +13.7 s and +14.7 s: the deadline is 14 s later.
	beats(t, fh, clk, 2, 0)
	fh.set("down", nil)
	beats(t, fh, clk, 1, 0)                            // the poll in flight when cut is answered
	clk.Advance(12*time.Second + 900*time.Millisecond) // +27.6 s
	alive(t, cfg.DataDir, "rerun", "0.1 s before the earliest deadline")
	clk.Advance(1*time.Second + 200*time.Millisecond) // +28.8 s: past the latest one
	eventually(t, 10*time.Second, "rerun fenced and reported", func() bool {
		clk.Advance(100 * time.Millisecond) // retries; the 0.5 s grace
		r, _ := fh.report(key{"rerun", 1})
		return r.Status == "FAILED"
	})
	r, _ := fh.report(key{"rerun", 1})
	if !strings.HasPrefix(r.FailureReason, "FENCED: worker w1") || !strings.Contains(r.FailureReason, "offline-after 10s") {
		t.Fatalf("fenced report reason %q", r.FailureReason)
	}
	if k, _ := fh.report(key{"keep", 1}); k.Status != "RUNNING" {
		t.Fatalf("restart-never instance: %s, want RUNNING", k.Status)
	}
	alive(t, cfg.DataDir, "keep", "after the fence")
	rec := readRecord(t, cfg.DataDir, "rerun", 1)
	if !rec.Stopped || !strings.HasPrefix(rec.Fenced, "FENCED") || rec.PID <= 0 || syscall.Kill(rec.PID, 0) == nil {
		t.Fatalf("run record of the fenced attempt: %+v (or its process still runs)", rec)
	}
	log := readAllLog(t, filepath.Join(cfg.DataDir, "logs", "rerun"))
	if !strings.Contains(log, "[tide worker w1: attempt 1 stopped at") || !strings.Contains(log, "FENCED") {
		t.Fatalf("instance log does not say it was fenced: %q", log)
	}
}

// TestFenceDropsAStaleAnswer: an answer to a poll sent so long ago that
// the lease has run out since (what a worker stopped with SIGSTOP finds
// when it resumes) is not acted on: it starts nothing, and the generation
// and desired set stay those of the last answer acted on. A fresh answer
// is acted on and carries the lease's new terms.
func TestFenceDropsAStaleAnswer(t *testing.T) {
	clk := clock.NewFake(fenceStart)
	a := &Agent{cfg: Config{DefaultGracePeriod: time.Second}, log: testLogger(t), clk: clk, mono: monoFor(clk),
		workerID: "w1", procs: map[key]*proc{}, lease: lease{terms: testTerms, ok: true, sentWall: fenceStart}, lastSeenGen: 7}
	t.Cleanup(a.stopFenceTimer)
	stale := &httpapi.HeartbeatResponse{Gen: 8, Lease: testTerms, DesiredInstances: []httpapi.DesiredInstance{
		{InstanceID: "late", Attempt: 1, Command: "exec sleep 300", ExpectedStatus: "ASSIGNED", RequeuedIfLost: true}}}
	// Sent at +1 s, its own lease runs out at +15 s: at +15 s the head
	// has surely declared the worker lost since it gave this answer.
	clk.Advance(15 * time.Second)
	a.handleResult(headResult{beat: stale, sent: time.Second, sentWall: fenceStart.Add(time.Second)})
	if a.lastSeenGen != 7 || len(a.lastDesired) != 0 || len(a.procs) != 0 {
		t.Fatalf("a stale answer was acted on: gen %d, desired %v, procs %d", a.lastSeenGen, a.lastDesired, len(a.procs))
	}
	fresh := &httpapi.HeartbeatResponse{Gen: 9, Lease: testTerms}
	a.handleResult(headResult{beat: fresh, sent: a.mono(), sentWall: clk.Now()})
	if a.lastSeenGen != 9 || a.lease.sent != 15*time.Second || a.fenceTimer == nil || a.fenceAt != 29*time.Second {
		t.Fatalf("fresh answer: gen %d, lease sent %v, fence at %v", a.lastSeenGen, a.lease.sent, a.fenceAt)
	}
}

func readAllLog(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range segs {
		data, err := os.ReadFile(filepath.Join(dir, segmentName(s.Base)))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// wallStepClock is a fake clock whose wall time the test can step without
// moving its monotonic time (Elapsed), as NTP stepping a machine's clock.
type wallStepClock struct {
	*clock.Fake
	off time.Duration
}

func (c *wallStepClock) Now() time.Time         { return c.Fake.Now().Add(c.off) }
func (c *wallStepClock) Elapsed() time.Duration { return c.Fake.Now().Sub(fenceStart) }

// TestFenceIgnoresWallClockSteps: the lease is measured on the monotonic
// clock, so stepping the worker's wall clock by an hour neither ends it
// early nor stretches it.
func TestFenceIgnoresWallClockSteps(t *testing.T) {
	clk := &wallStepClock{Fake: clock.NewFake(fenceStart)}
	mono := monoFor(clk)
	l := lease{terms: testTerms, sent: mono(), ok: true}
	desired := []httpapi.DesiredInstance{{InstanceID: "rerun", Attempt: 1, RequeuedIfLost: true}}
	local := []localView{{Key: key{"rerun", 1}, Phase: phaseRunning}}
	clk.off = time.Hour
	if got := planFence(l, mono(), desired, local); got != nil {
		t.Fatalf("a +1 h step of the wall clock fenced %v", got)
	}
	clk.off = -time.Hour
	clk.Advance(14 * time.Second)
	if got := planFence(l, mono(), desired, local); len(got) != 1 {
		t.Fatalf("a −1 h step of the wall clock stretched the lease: %v", got)
	}
}
