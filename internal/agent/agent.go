package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
)

// Agent is a running worker. Its fields are owned by the goroutine running
// loop, except where noted.
type Agent struct {
	cfg Config
	log *slog.Logger
	clk clock.Clock

	// head indexes cfg.heads: the head this worker talks to (heads.go).
	head atomic.Int32

	id       identity
	workerID string
	// bootID is new at every start of the worker (PyLet's boot_id); boot
	// is the kernel's, which tells whether recorded processes can be alive.
	bootID string
	boot   string
	host   string
	// logPort is the bound port of the log server, sent at registration.
	logPort int

	logs  *logSet
	ports *portPool
	procs map[key]*proc

	// events carries process exits and kill deadlines to the loop.
	events chan any
	// quit is closed when Run returns; goroutines blocked on the loop leave.
	quit chan struct{}
	// results carries head responses to the loop.
	results chan headResult

	token       string
	registered  bool
	lastSeenGen int64
	lastDesired []httpapi.DesiredInstance

	// lease is the fencing lease (fence.go); fenceTimer wakes the loop at
	// its deadline, fenceAt.
	lease      lease
	fenceTimer clock.Timer
	fenceAt    time.Duration
	// mono is the monotonic clock the lease is measured on (monoFor).
	mono func() time.Duration

	inflight       context.CancelFunc
	inflightSeq    uint64
	inflightIsBeat bool
	failures       int
	retry          clock.Timer
	// fatal ends the loop: every process is stopped and Run returns it.
	fatal error

	wg sync.WaitGroup // head requests
}

// headResult is the outcome of one request to the head.
type headResult struct {
	seq      uint64
	register bool
	token    string
	beat     *httpapi.HeartbeatResponse
	status   int
	err      error
	// sent and sentWall are when the request was written to the head
	// (when it was issued, if the write was not seen), on the monotonic
	// and on the wall clock.
	sent     time.Duration
	sentWall time.Time
}

// Run starts a worker from cfg and runs it until ctx is done: it adopts or
// cleans what a previous start left, serves logs, registers with the head
// (retrying for as long as it takes) and long-polls for its desired state.
// It returns nil when ctx ends, or an error if the worker cannot start, or
// if another worker takes its name at the head (then every local process
// is stopped first: the other worker now runs them).
func Run(ctx context.Context, cfg Config) (err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("worker: create data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer lock.Close()
	id, err := loadIdentity(cfg.DataDir, cfg.Name)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	host, err := resolveAdvertise(cfg.AdvertiseAddr, cfg.HeadURL)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	logAddr, err := logListenAddr(cfg, host)
	if err != nil {
		return err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("worker", id.Name), clk: cfg.Clock, id: id, workerID: id.Name,
		bootID: uuid.NewString(), boot: machineBootID(), host: host,
		logs:  newLogSet(filepath.Join(cfg.DataDir, "logs"), cfg.LogSegmentBytes, cfg.LogMaxFiles),
		ports: newPortPool(cfg.PortMin, cfg.PortMax, cfg.PortLockDir),
		procs: map[key]*proc{}, events: make(chan any, 64), quit: make(chan struct{}),
		results: make(chan headResult, 1), mono: monoFor(cfg.Clock)}
	if err := a.recover(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	ln, err := net.Listen("tcp", logAddr)
	if err != nil {
		a.abandon()
		return fmt.Errorf("worker: log server: listen on %s: %w", logAddr, err)
	}
	a.logPort = ln.Addr().(*net.TCPAddr).Port
	srv := newLogServer(logHandler(a.logs, []string{cfg.JoinToken, provider.LogToken(cfg.JoinToken, id.Name), cfg.LogToken}, a.log))
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("log server stopped", "err", err)
		}
	}()
	a.log.Info("worker starting", "head", cfg.HeadURL, "host", host, "logs", ln.Addr().String(),
		"resources", cfg.Resources.String(), "adopted", len(a.procs))
	a.loop(ctx, ln.Addr())
	defer a.ports.releaseAll()
	defer func() { err = errors.Join(err, a.fatal) }()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	<-serveDone
	return nil
}

// abandon ends the goroutines of adopted processes when Run fails early.
func (a *Agent) abandon() {
	close(a.quit)
	a.ports.releaseAll()
	for _, p := range a.procs {
		if p.reader != nil {
			p.reader.Close()
		}
	}
}

// loop owns the agent's state: it keeps one request to the head in flight,
// reconciles on every heartbeat answer, and turns local changes into an
// immediate new heartbeat (cancel-and-reissue).
func (a *Agent) loop(ctx context.Context, logAddr net.Addr) {
	for _, p := range a.procs {
		if p.adopted {
			p.quit = a.quit
			go a.watchAdopted(p)
			if p.phase == phaseStopping {
				a.armKill(p, a.cfg.DefaultGracePeriod)
			}
		}
	}
	var gcC <-chan time.Time
	if a.cfg.LogRetention > 0 {
		a.collectLogs()
		t := a.clk.NewTicker(min(a.cfg.LogRetention/4, time.Hour))
		defer t.Stop()
		gcC = t.C()
	}
	ready := false
	defer a.stopFenceTimer()
	for {
		a.fenceFirst()
		if a.inflight == nil && a.retry == nil {
			a.issue(ctx)
		}
		var retryC, fenceC <-chan time.Time
		if a.retry != nil {
			retryC = a.retry.C()
		}
		if a.fenceTimer != nil {
			fenceC = a.fenceTimer.C()
		}
		select {
		case <-ctx.Done():
			a.shutdown()
			return
		case r := <-a.results:
			// Fence before anything else: after a SIGSTOP past the
			// deadline, this answer may be one the head gave before it
			// declared this worker lost.
			a.fenceFirst()
			if r.seq != a.inflightSeq {
				continue // answer to a request cancelled by a local change
			}
			a.inflight = nil
			a.handleResult(r)
			if a.fatal != nil {
				a.log.Error("worker stopping", "err", a.fatal)
				a.cfg.StopOnExit = true
				a.shutdown()
				return
			}
			if a.registered && !ready && r.beat != nil {
				ready = true
				if a.cfg.OnReady != nil {
					a.cfg.OnReady(Info{WorkerID: a.workerID, LogAddr: logAddr, Host: a.host, Resources: a.cfg.Resources})
				}
			}
		case ev := <-a.events:
			a.fenceFirst()
			changed := a.handleEvent(ev)
			for more := true; more; {
				select {
				case ev := <-a.events:
					changed = a.handleEvent(ev) || changed
				default:
					more = false
				}
			}
			if changed && a.inflight != nil && a.inflightIsBeat {
				a.inflight() // cancel-and-reissue with the new reports
				a.inflight = nil
			}
		case <-retryC:
			a.fenceFirst()
			a.retry = nil
		case <-fenceC:
			a.fenceTimer = nil
			a.fenceFirst()
		case <-gcC:
			a.fenceFirst()
			a.collectLogs()
		}
	}
}

// fenceFirst runs the fence when its deadline has passed; when it stopped
// anything, a heartbeat in flight is cancelled and reissued with the new
// reports (STOPPING), as for any local change.
func (a *Agent) fenceFirst() {
	if a.fenceIfDue() && a.inflight != nil && a.inflightIsBeat {
		a.inflight()
		a.inflight = nil
	}
}

// collectLogs removes logs kept longer than LogRetention for instances that
// no longer run here.
func (a *Agent) collectLogs() {
	local := map[string]bool{}
	for k := range a.procs {
		local[k.ID] = true
	}
	removed, err := gcLogs(a.logs.root, a.clk.Now().Add(-a.cfg.LogRetention), local)
	if err != nil {
		a.log.Warn("log cleanup", "err", err)
	}
	if len(removed) > 0 {
		a.log.Info("removed old instance logs", "count", len(removed))
	}
}

// issue sends the next request to the head: registration when not
// registered, else a heartbeat with every local process reported.
func (a *Agent) issue(ctx context.Context) {
	rctx, cancel := context.WithCancel(ctx)
	a.inflightSeq++
	seq := a.inflightSeq
	a.inflight = cancel
	a.wg.Add(1)
	issued, issuedWall := a.mono(), a.clk.Now()
	var (
		wroteOnce sync.Once
		wrote     time.Duration
		wroteWall time.Time
		wroteSeen atomic.Bool
	)
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wroteOnce.Do(func() { wrote, wroteWall = a.mono(), a.clk.Now(); wroteSeen.Store(true) })
		}
	}})
	sentAt := func(r headResult) headResult {
		r.sent, r.sentWall = issued, issuedWall
		if wroteSeen.Load() {
			r.sent, r.sentWall = wrote, wroteWall
		}
		return r
	}
	if !a.registered {
		a.inflightIsBeat = false
		go func() {
			defer a.wg.Done()
			defer cancel()
			tok, status, err := a.register(rctx)
			a.deliver(sentAt(headResult{seq: seq, register: true, token: tok, status: status, err: err}))
		}()
		return
	}
	a.inflightIsBeat = true
	req := httpapi.HeartbeatRequest{WorkerToken: a.token, BootID: a.bootID, LastSeenGen: a.lastSeenGen,
		Instances: buildReports(a.reportViews(), a.lastDesired)}
	go func() {
		defer a.wg.Done()
		defer cancel()
		resp, status, err := a.heartbeat(rctx, &req)
		a.deliver(sentAt(headResult{seq: seq, beat: resp, status: status, err: err}))
	}()
}

func (a *Agent) deliver(r headResult) {
	select {
	case a.results <- r:
	case <-a.quit:
	}
}

func (a *Agent) reportViews() []reportView {
	out := make([]reportView, 0, len(a.procs))
	for _, p := range a.procs {
		out = append(out, reportView{Key: p.key, Phase: p.phase, Port: p.port, Outcome: p.outcome})
	}
	return out
}

func (a *Agent) handleResult(r headResult) {
	switch {
	case r.err == nil && r.register:
		a.token, a.registered, a.failures = r.token, true, 0
		a.log.Info("registered with head", "head", a.cfg.HeadURL, "worker_id", a.workerID)
	case r.err == nil:
		a.failures = 0
		if !a.lease.ok || r.sent > a.lease.sent {
			a.lease.sent, a.lease.sentWall, a.lease.ok = r.sent, r.sentWall, true
		}
		if dl, ok := a.lease.deadline(); ok && a.mono() >= dl {
			// Sent so long ago that the head has surely declared this
			// worker lost since (the worker was stopped, or the answer
			// was held up): the answer may list work the head has
			// requeued. The fence has run; ask again.
			a.fenceFirst()
			a.log.Warn("dropping a heartbeat answer that arrived after the fencing lease ran out", "sent", r.sentWall,
				"late", a.mono()-dl)
			return
		}
		a.lease.terms = r.beat.Lease
		prev := a.lastDesired
		a.lastSeenGen = r.beat.Gen
		a.lastDesired = r.beat.DesiredInstances
		a.reconcile(r.beat, prev)
		a.armFence()
	case errors.Is(r.err, context.Canceled):
		// cancelled by a local change or by shutdown: reissue at once
	case !r.register && r.status == 0 && errors.Is(r.err, context.DeadlineExceeded):
		// The head held the poll longer than HeartbeatTimeout (its poll
		// timeout is longer than ours): poll again at once, as PyLet does.
		a.log.Debug("heartbeat held past heartbeat timeout; polling again", "timeout", a.cfg.HeartbeatTimeout)
	case !r.register && r.status == http.StatusUnauthorized:
		// Only a registration changes a worker's token: another worker has
		// registered under this name. Its desired set is now the other
		// worker's, so this one must not run it too.
		a.fatal = fmt.Errorf("worker %s: the head gave this name to another worker (two workers named %q?); "+
			"stopping this one and its processes", a.workerID, a.workerID)
	case !r.register && r.status == http.StatusNotFound:
		// The head forgot this worker (deleted, or a new database): register
		// again.
		a.log.Warn("head does not know this worker; registering again", "status", r.status, "err", r.err)
		a.registered = false
		a.failures++
		if a.failures > 1 {
			a.backoff()
		}
	default:
		a.failures++
		a.log.Warn("request to head failed", "register", r.register, "status", r.status, "err", r.err,
			"failures", a.failures)
		a.backoff()
	}
}

// backoff waits before the next request: exponential from RetryMin to
// RetryMax, with jitter so workers do not return to a restarted head in step.
func (a *Agent) backoff() {
	d := a.cfg.RetryMin
	for i := 1; i < a.failures && d < a.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, a.cfg.RetryMax)
	d = d/2 + rand.N(d/2+1)
	a.retry = a.clk.NewTimer(d)
}

// reconcile applies one heartbeat answer to the local processes. prev is
// the desired set of the answer before: a process it marked RequeuedIfLost
// that is no longer desired (the head requeued it) stops within the
// lease's grace period, which the head's hold counts on.
func (a *Agent) reconcile(resp *httpapi.HeartbeatResponse, prev []httpapi.DesiredInstance) {
	plan := planReconcile(resp.DesiredInstances, resp.Stopping, a.localViews(), a.cfg.DefaultGracePeriod)
	plan.Stop = capRequeuedGrace(plan.Stop, prev, resp.Stopping, a.lease)
	for _, s := range plan.Stop {
		a.stop(a.procs[s.Key], s.Grace)
	}
	for _, k := range plan.Drop {
		if err := os.RemoveAll(a.runDir(k)); err != nil {
			a.log.Warn("remove run record", "instance", k.ID, "err", err)
		}
		delete(a.procs, k)
	}
	for _, d := range plan.Start {
		p := a.start(d)
		a.procs[p.key] = p
	}
}

// stop sends SIGTERM to a process group and arms SIGKILL after grace.
func (a *Agent) stop(p *proc, grace time.Duration) {
	p.phase = phaseStopping
	p.rec.Stopped = true
	if err := a.writeRecord(p.key, &p.rec); err != nil {
		a.log.Warn("record stop", "err", err)
	}
	a.log.Info("stopping instance", "instance", p.key.ID, "attempt", p.key.Attempt, "grace", grace)
	if grace <= 0 {
		a.signalGroup(p, syscall.SIGKILL)
		return
	}
	a.signalGroup(p, syscall.SIGTERM)
	a.armKill(p, grace)
}

func (a *Agent) armKill(p *proc, grace time.Duration) {
	stopC := make(chan struct{})
	p.stopTimer = stopC
	t := a.clk.NewTimer(grace)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			select {
			case a.events <- killEvent{key: p.key}:
			case <-a.quit:
			}
		case <-stopC:
		case <-a.quit:
		}
	}()
}

// handleEvent applies a process event; it reports whether reports changed.
func (a *Agent) handleEvent(ev any) bool {
	switch ev := ev.(type) {
	case killEvent:
		p := a.procs[ev.key]
		if p != nil && p.phase == phaseStopping {
			a.log.Warn("grace period over; killing instance", "instance", p.key.ID, "attempt", p.key.Attempt)
			a.signalGroup(p, syscall.SIGKILL)
		}
		return false
	case exitEvent:
		p := a.procs[ev.key]
		if p == nil || p.phase == phaseExited {
			return false
		}
		if p.stopTimer != nil {
			close(p.stopTimer)
			p.stopTimer = nil
		}
		p.phase = phaseExited
		p.outcome = outcome{Code: ev.code, Stopped: p.rec.Stopped, Fenced: p.rec.Fenced}
		if p.port > 0 {
			a.ports.release(p.port)
			p.port = 0
		}
		code := ev.code
		p.rec.Phase, p.rec.ExitCode = recordExited, &code
		if err := a.writeRecord(p.key, &p.rec); err != nil {
			a.log.Warn("record exit", "err", err)
		}
		a.log.Info("instance exited", "instance", p.key.ID, "attempt", p.key.Attempt, "exit_code", ev.code,
			"stopped", p.rec.Stopped)
		return true
	}
	return false
}

// shutdown ends the loop: with StopOnExit every process is stopped (SIGTERM,
// grace, SIGKILL) and waited for; otherwise they are left running, with
// their records, for the next start to adopt.
func (a *Agent) shutdown() {
	if a.inflight != nil {
		a.inflight()
	}
	if a.cfg.StopOnExit {
		pending := 0
		for _, p := range a.procs {
			switch p.phase {
			case phaseRunning:
				a.stop(p, a.cfg.DefaultGracePeriod)
				pending++
			case phaseStopping:
				pending++
			}
		}
		for pending > 0 {
			ev := <-a.events
			if e, ok := ev.(exitEvent); ok {
				if p := a.procs[e.key]; p != nil && p.phase != phaseExited {
					pending--
				}
			}
			a.handleEvent(ev)
		}
	}
	close(a.quit)
	for _, p := range a.procs {
		if p.phase != phaseExited && p.reader != nil {
			p.reader.Close() // stop copying; the process keeps its pipe
		}
	}
	a.wg.Wait()
	a.log.Info("worker stopped", "left_running", a.countRunning())
}

func (a *Agent) countRunning() int {
	n := 0
	for _, p := range a.procs {
		if p.phase != phaseExited {
			n++
		}
	}
	return n
}

// register sends PyLet's registration with tide's extensions.
func (a *Agent) register(ctx context.Context) (string, int, error) {
	res := a.cfg.Resources
	cpu := float64(res.MilliCPU) / 1000
	gpus := res.GPUs
	mem := res.Memory >> 20
	req := httpapi.RegisterRequest{WorkerID: a.workerID, Host: a.host, BootID: a.bootID, Pool: a.cfg.Pool,
		Labels: a.cfg.Labels, Resources: &httpapi.ResourceSpec{CPUCores: &cpu, GPUUnits: &gpus, MemoryMB: &mem}}
	req.LogPort = a.logPort
	var out httpapi.RegisterResponse
	ctx, cancel := context.WithTimeout(ctx, a.cfg.HeartbeatTimeout)
	defer cancel()
	status, err := a.post(ctx, "/workers", a.cfg.JoinToken, req, &out)
	if err != nil {
		return "", status, fmt.Errorf("register: %w", err)
	}
	if out.WorkerToken == "" {
		return "", status, errors.New("register: head returned no worker_token")
	}
	return out.WorkerToken, status, nil
}

// heartbeat sends one heartbeat and waits for the head's answer.
func (a *Agent) heartbeat(ctx context.Context, req *httpapi.HeartbeatRequest) (*httpapi.HeartbeatResponse, int, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.HeartbeatTimeout)
	defer cancel()
	var out httpapi.HeartbeatResponse
	status, err := a.post(ctx, "/workers/"+a.workerID+"/heartbeat", "", req, &out)
	if err != nil {
		return nil, status, fmt.Errorf("heartbeat: %w", err)
	}
	return &out, status, nil
}

// post sends a JSON request and decodes a 200 answer into out.
func (a *Agent) post(ctx context.Context, path, bearer string, body, out any) (int, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encode request: %w", err)
	}
	base := a.headURL()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			a.nextHead(base, err)
		}
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		a.nextHead(base, errors.New("head answered 503"))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Detail any `json:"detail"`
		}
		_ = json.Unmarshal(data, &e)
		return resp.StatusCode, fmt.Errorf("head answered %d: %v", resp.StatusCode, e.Detail)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode answer: %w", err)
	}
	return resp.StatusCode, nil
}
