// Package head composes the cluster runtime's head: the SQLite store, the
// scheduling loop around the pure scheduler, the liveness loop, the
// long-poll heartbeat fan-in, and the HTTP API.
//
// Goroutines: one scheduling loop (woken by a 1-slot poke channel or a
// ticker) is the only writer of assignments; one liveness loop; one
// goroutine per held heartbeat. Every state change is a store transaction;
// the head keeps no state that a restart would lose except wake-ups, and
// wire generations are scoped by a head epoch bumped at each start, so a
// worker polling across a head restart is answered at once.
package head

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tide-project/tide/internal/buildinfo"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/scheduler"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/webui"
)

// genBits is how many low bits of a wire generation hold the worker's
// generation; the bits above hold the head epoch.
const genBits = 32

// Head is a running head. Its methods are safe for concurrent use.
type Head struct {
	cfg    Config
	st     Store
	clk    clock.Clock
	live   *liveness // worker silence on the monotonic clock
	log    *slog.Logger
	epoch  int64
	notify *notifier
	// evWake wakes event followers (key "") after each recorded event.
	evWake *notifier
	poke   chan struct{}
	// inserts group-commits concurrent submits.
	inserts *groupCommit
	// changes is bumped by every visible change (GET /watch); history keeps
	// the pools' recent status samples (GET /history).
	changes *changes
	history *history

	// lock holds the data dir (see lockDataDir); noPlacing is StopPlacing's.
	lock      *os.File
	noPlacing atomic.Bool

	mu       sync.Mutex
	pressure map[string]capacity.Pressure
	// finished keeps the reports' Finished counters (one scheduling loop
	// updates it).
	finished finishedCounter
	// waiting is the last scheduling pass's reason per unplaced instance.
	waiting map[string]string
	// evicting are the instances chosen to be preempted, by id
	// (priority.go); gangEnv the rendezvous variables of each placed
	// instance of a gang, by id (gang.go).
	evicting map[string]eviction
	gangEnv  map[string]map[string]string
	// prefer maps an instance moved by consolidation to the worker its
	// move planned for it (MoveOff), until it is placed or no longer
	// pending.
	prefer map[string]string
	// checked holds the pending instances already checked for fitting no
	// pool (each that fits none gets one event), under checkMu.
	checkMu sync.Mutex
	checked map[string]bool
	// poolStatus is Config.PoolStatus, replaced by SetPoolStatus.
	poolStatus atomic.Pointer[func() []PoolStatus]
	// cert is what the TLS listener presents (AddTLSHosts reissues it).
	cert serverCert

	// ha is set when the store is etcd (ha.go); onLeadLocal holds
	// WhileLeading's functions of a head on SQLite, under haMu.
	ha          *ha
	haMu        sync.Mutex
	onLeadLocal []func(context.Context)

	m metrics
}

type metrics struct {
	submitted  prometheus.Counter
	placed     prometheus.Counter
	heartbeats prometheus.Counter
	cycle      prometheus.Histogram
	queued     *prometheus.GaugeVec
	inflight   *prometheus.GaugeVec
	toRunning  *prometheus.HistogramVec
	offline    prometheus.Counter
	// released counts instances whose fence hold ended early (fence.go).
	released prometheus.Counter
	// late counts late completions accepted (fence.go).
	late prometheus.Counter
}

func newMetrics(reg Registry) metrics {
	var r prometheus.Registerer
	if reg != nil {
		r = reg
		// Every /metrics tide serves says which build it is; Register
		// keeps the one gauge when the assembly registered it already.
		_ = buildinfo.Register(reg)
	}
	f := promauto.With(r)
	return metrics{
		submitted:  f.NewCounter(prometheus.CounterOpts{Name: "tide_head_instances_submitted_total", Help: "Instances submitted."}),
		placed:     f.NewCounter(prometheus.CounterOpts{Name: "tide_head_placements_total", Help: "Instances assigned to workers."}),
		heartbeats: f.NewCounter(prometheus.CounterOpts{Name: "tide_head_heartbeats_total", Help: "Worker heartbeats received."}),
		cycle: f.NewHistogram(prometheus.HistogramOpts{Name: "tide_head_schedule_cycle_seconds",
			Help: "Duration of a scheduling pass.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		queued: f.NewGaugeVec(prometheus.GaugeOpts{Name: "tide_head_queued_instances",
			Help: "Pending instances per pool after the last scheduling pass."}, []string{"pool"}),
		inflight: f.NewGaugeVec(prometheus.GaugeOpts{Name: "tide_head_inflight_instances",
			Help: "Non-daemon instances placed on the pool's live workers after the last scheduling pass."}, []string{"pool"}),
		toRunning: f.NewHistogramVec(prometheus.HistogramOpts{Name: "tide_head_pending_to_running_seconds",
			Help:    "Time from an instance becoming pending (its creation, or its requeue) to its first RUNNING report.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 17)}, []string{"pool"}),
		offline: f.NewCounter(prometheus.CounterOpts{Name: "tide_head_workers_offline_total", Help: "Workers marked OFFLINE."}),
		released: f.NewCounter(prometheus.CounterOpts{Name: "tide_head_fence_holds_released_total",
			Help: "Instances whose fence hold was released before its end: their lost worker's machine was confirmed deleted."}),
		late: f.NewCounter(prometheus.CounterOpts{Name: "tide_head_late_completions_total",
			Help: "Instances ended COMPLETED by a late report from the lost worker they were requeued from, before any new attempt began: not run again."}),
	}
}

// New opens the store under cfg.DataDir, starts a new head epoch and
// returns a head whose loops are not yet running (see RunLoops and Run).
func New(ctx context.Context, cfg Config) (*Head, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.TLSAuto {
		// Only the holder of the data dir writes its certificates.
		if cfg, err = cfg.autoTLS(cfg.Clock.Now()); err != nil {
			lock.Close()
			return nil, err
		}
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("start head: %w", err)
	}
	epoch, err := st.StartEpoch(ctx)
	if err != nil {
		st.Close()
		lock.Close()
		return nil, fmt.Errorf("start head: %w", err)
	}
	if epoch >= 1<<(63-genBits) {
		st.Close()
		lock.Close()
		return nil, fmt.Errorf("start head: epoch %d overflows the wire generation", epoch)
	}
	h := &Head{cfg: cfg, st: st, lock: lock, clk: cfg.Clock, log: cfg.Logger, epoch: epoch, notify: newNotifier(),
		evWake: newNotifier(), poke: make(chan struct{}, 1), inserts: newGroupCommit(st), m: newMetrics(cfg.Registry),
		changes: newChanges(), history: newHistory(), live: newLiveness(cfg.Clock)}
	h.ha = newHA(st)
	h.SetPoolStatus(cfg.PoolStatus)
	h.log.Info("head started", "epoch", epoch, "db", cfg.dbPath())
	return h, nil
}

// Close closes the store and releases the data dir.
func (h *Head) Close() error { return errors.Join(h.st.Close(), h.lock.Close()) }

// Store returns the head's store (for tests and tools in this module).
func (h *Head) Store() Store { return h.st }

// Epoch returns this head's epoch.
func (h *Head) Epoch() int64 { return h.epoch }

// Scheme is "https" when the head serves TLS, else "http".
func (h *Head) Scheme() string {
	if h.cfg.TLSCertFile != "" {
		return "https"
	}
	return "http"
}

// Handler returns the HTTP API.
func (h *Head) Handler() http.Handler {
	opts := httpapi.Options{AdminToken: h.cfg.Token, JoinToken: h.cfg.JoinToken, Logger: h.log, MachineAuth: h.authMachine,
		BodyTimeout: h.cfg.BodyTimeout}
	opts.Extra = httpapi.DashboardRoutes(h)
	opts.Extra["POST /bootstrap"] = http.HandlerFunc(h.serveBootstrap)
	opts.Extra["GET /leader"] = http.HandlerFunc(h.serveLeader)
	opts.Extra["GET /version"] = http.HandlerFunc(serveVersion)
	if h.cfg.Registry != nil {
		opts.Extra["GET /metrics"] = promhttp.HandlerFor(h.cfg.Registry, promhttp.HandlerOpts{})
	}
	return httpapi.BodyTimeoutHandler(webui.Mount(httpapi.NewHandler(h, opts)), h.cfg.BodyTimeout)
}

// serveVersion answers GET /version with this head's build.
func serveVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(buildinfo.Get())
}

// Poke wakes the scheduling loop (coalesced).
func (h *Head) Poke() {
	h.changes.bump()
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// RunLoops runs the scheduling and liveness loops until ctx is done.
func (h *Head) RunLoops(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.runLeaderLoops(ctx) }() // ha.go
	go func() { defer wg.Done(); h.historyLoop(ctx) }()
	wg.Wait()
}

func (h *Head) scheduleLoop(ctx context.Context) {
	t := h.clk.NewTicker(h.cfg.SchedulerInterval)
	defer t.Stop()
	for {
		if _, err := h.ScheduleOnce(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("scheduling pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-h.poke:
		case <-t.C():
		}
	}
}

func (h *Head) livenessLoop(ctx context.Context) {
	t := h.clk.NewTicker(h.cfg.LivenessInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := h.CheckLiveness(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("liveness check failed", "err", err)
		}
		if _, err := h.ExpireWaiting(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("max_wait sweep failed", "err", err)
		}
	}
}

// ScheduleOnce runs one scheduling pass and returns how many instances it
// assigned. It publishes the pressure report when it changed.
func (h *Head) ScheduleOnce(ctx context.Context) (int, error) {
	if h.noPlacing.Load() {
		return 0, nil
	}
	start := time.Now()
	now := h.clk.Now()
	h.mu.Lock()
	prefer := maps.Clone(h.prefer) // taken before the state: entries added later are kept below
	h.mu.Unlock()
	st, err := h.st.SchedulingState(ctx)
	if err != nil {
		return 0, err
	}
	workers := make([]scheduler.Worker, 0, len(st.Workers))
	for _, w := range st.Workers {
		workers = append(workers, scheduler.Worker{Name: w.ID, Pool: w.Pool, Ordinal: w.Ordinal, Capacity: w.Capacity,
			Schedulable: w.Status == store.WorkerOnline, Offline: w.Status == store.WorkerOffline, Cordoned: w.Cordoned(),
			JoinedAt: w.RegisteredAt})
	}
	conv := func(in []store.SchedInstance) []scheduler.Instance {
		out := make([]scheduler.Instance, len(in))
		for i, s := range in {
			gpus := s.GPUIndices
			if s.Status == store.StatusPending {
				gpus = s.RequestedGPUIndices
			}
			out[i] = scheduler.Instance{ID: s.ID, Attempt: s.Attempt, Pool: s.Pool, Requests: s.Requests,
				Exclusive: s.Exclusive, Daemon: s.Daemon, TargetWorker: s.TargetWorker, GPUIndices: gpus,
				Worker: s.Worker, QueuedAt: s.QueuedAt, Priority: s.Priority, Restartable: s.Restartable,
				Gang: s.GangID, GangSize: s.GangSize, GangRank: s.GangRank}
			if s.Status == store.StatusPending {
				out[i].NotBefore = s.NotBefore
				out[i].Held = heldReason(s.NotBefore, s.HeldBy, s.Attempt, now)
			}
			if s.Status == store.StatusPending && len(prefer) > 0 {
				out[i].PreferWorker = prefer[s.ID]
			}
		}
		return out
	}
	reserve := h.cfg.ReserveAfter
	if reserve < 0 {
		reserve = 0
	}
	res := scheduler.Place(workers, conv(st.Active), conv(st.Pending), scheduler.Config{ReserveAfter: reserve,
		Preemptible: h.preemptible(), Evicting: h.evictingSet()}, now)
	as := make([]store.Assignment, len(res.Assignments))
	for i, a := range res.Assignments {
		as[i] = store.Assignment{InstanceID: a.InstanceID, Attempt: a.Attempt, Worker: a.Worker,
			GPUIndices: a.GPUIndices, Exclusive: a.Exclusive}
	}
	applied, err := h.st.Assign(ctx, as, now)
	if err != nil {
		return 0, err
	}
	h.setGangEnv(gangEnvs(st, applied)) // before the workers hear of their new instances
	woken := map[string]bool{}
	for _, a := range applied {
		if !woken[a.Worker] {
			woken[a.Worker] = true
			h.notify.wake(a.Worker)
		}
	}
	if len(applied) != len(as) {
		h.Poke() // something raced the pass; look again
	}
	h.m.placed.Add(float64(len(applied)))
	h.m.cycle.Observe(time.Since(start).Seconds())
	h.mu.Lock()
	h.waiting = res.Waiting
	h.finished.observe(st)
	h.finished.stamp(res.Pressure)
	if len(prefer) > 0 {
		// A planned destination serves one placement: drop those placed
		// now and those no longer pending (of the entries this pass saw).
		still := make(map[string]bool, len(st.Pending))
		for _, s := range st.Pending {
			still[s.ID] = true
		}
		for _, a := range applied {
			delete(still, a.InstanceID)
		}
		for id := range prefer {
			if !still[id] && h.prefer[id] == prefer[id] {
				delete(h.prefer, id)
			}
		}
	}
	h.mu.Unlock()
	h.reportUnfit(ctx, st, res.Waiting)
	h.publish(res.Pressure)
	if err := h.preempt(ctx, res.Preemptions, poolOf(st), now); err != nil {
		return len(applied), err
	}
	if err := h.expireGangs(ctx, st, applied, res.Waiting, now); err != nil {
		return len(applied), err
	}
	return len(applied), nil
}

func (h *Head) publish(p map[string]capacity.Pressure) {
	h.mu.Lock()
	old := h.pressure
	changed := !reflect.DeepEqual(old, p)
	if changed {
		h.pressure = p
	}
	h.mu.Unlock()
	if !changed {
		return
	}
	h.changes.bump()
	for pool, pr := range p {
		h.m.queued.WithLabelValues(pool).Set(float64(pr.Queued()))
		h.m.inflight.WithLabelValues(pool).Set(float64(pr.Inflight()))
	}
	for pool := range old {
		if _, ok := p[pool]; !ok { // the pool left the report: nothing queued or placed
			h.m.queued.WithLabelValues(pool).Set(0)
			h.m.inflight.WithLabelValues(pool).Set(0)
		}
	}
	if h.cfg.OnPressure != nil {
		h.cfg.OnPressure(p)
	}
}

// Pressure returns the last published pressure report per pool.
func (h *Head) Pressure() map[string]capacity.Pressure {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]capacity.Pressure, len(h.pressure))
	for k, v := range h.pressure {
		out[k] = v
	}
	return out
}

// Run starts a head from cfg and serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	full, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := full.checkExposure(); err != nil {
		return err
	}
	h, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	ln, err := net.Listen("tcp", full.Addr)
	if err != nil {
		return fmt.Errorf("head: listen on %s: %w", full.Addr, err)
	}
	if full.OnListen != nil {
		full.OnListen(ln.Addr())
	}
	return h.Serve(ctx, ln)
}

// Serve serves the HTTP API on ln (HTTPS when Config.TLSCertFile is set)
// and runs the scheduling and liveness loops until ctx is done; then it
// shuts the server down (held requests and event streams end with ctx),
// waits for the loops, closes ln and returns nil. It returns the server's
// error if serving fails first. It does not close the head.
func (h *Head) Serve(ctx context.Context, ln net.Listener) error {
	headerTimeout, idleTimeout := h.cfg.HeaderTimeout, h.cfg.IdleTimeout
	if headerTimeout <= 0 {
		headerTimeout = 10 * time.Second
	}
	if idleTimeout <= 0 {
		idleTimeout = 2 * time.Minute
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if h.cfg.TLSCertFile != "" && h.cert.cur.Load() == nil {
		if err := h.cert.load(h.cfg.TLSCertFile, h.cfg.TLSKeyFile); err != nil {
			ln.Close()
			return err
		}
	}
	h.setListenAddr(ln.Addr())
	loopCtx, stopLoops := context.WithCancel(ctx)
	loopsDone := make(chan struct{})
	go func() { h.RunLoops(loopCtx); close(loopsDone) }()
	serveErr := make(chan error, 1)
	go func() {
		h.log.Info("head listening", "addr", ln.Addr().String(), "tls", h.cfg.TLSCertFile != "")
		if h.cfg.TLSCertFile != "" {
			srv.TLSConfig = h.cert.tlsConfig()
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("head: serve: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		srv.Close()
	}
	stopLoops()
	<-loopsDone
	return runErr
}

// newToken returns a URL-safe random token (PyLet's token_urlsafe(32)).
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func hashToken(t string) string {
	s := sha256.Sum256([]byte(t))
	return hex.EncodeToString(s[:])
}
