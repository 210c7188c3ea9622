package head

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/submit"
)

var (
	_ httpapi.Backend         = (*Head)(nil)
	_ httpapi.AttemptSource   = (*Head)(nil)
	_ httpapi.InstanceCounter = (*Head)(nil)
)

// Limits on reported fields (submitted ones are internal/submit's).
const (
	// maxFailureReason bounds a worker's failure reason.
	maxFailureReason = 512
	// DefaultLogPort is the worker log server's port when a worker names none.
	DefaultLogPort = 15599
)

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func bad(format string, args ...any) error {
	return httpapi.Errorf(http.StatusBadRequest, format, args...)
}

// Submit validates a submit request and stores its instances (one per
// replica) in one transaction. submit.Check runs the checks that need no
// state; Submit adds the target worker's (it must exist, be online and
// have the GPU indices asked for) and the pool's. A request that names no
// pool and no target_worker goes to the pool Config.Route picks.
func (h *Head) Submit(ctx context.Context, req *httpapi.SubmitRequest) ([]string, error) {
	spec, err := submit.Check(req)
	if err != nil {
		return nil, err
	}
	var target *store.Worker
	if spec.TargetWorker != "" {
		w, err := h.st.GetWorker(ctx, spec.TargetWorker)
		if errors.Is(err, store.ErrNotFound) {
			return nil, bad("Target worker '%s' not found", spec.TargetWorker)
		}
		if err != nil {
			return nil, err
		}
		if w.Status == store.WorkerOffline {
			return nil, bad("Target worker '%s' is not online (status: %s)", w.ID, w.Status)
		}
		for _, g := range spec.GPUIndices {
			if int64(g) >= w.Capacity.GPUs {
				return nil, bad("gpu index %d does not exist on worker '%s' (%d GPUs)", g, w.ID, w.Capacity.GPUs)
			}
		}
		target = w
	}
	for _, k := range []string{"PORT", "CUDA_VISIBLE_DEVICES"} {
		if _, ok := spec.Env[k]; ok {
			h.log.Warn("env variable is overridden by the worker", "var", k)
		}
	}
	pool := spec.Pool
	if pool != "" {
		// A pool no autoscaler runs and no worker joined would make the
		// instance wait forever. A head that knows no pool yet (workers
		// still to join) accepts any name.
		known, names, err := h.knownPool(ctx, pool)
		if err != nil {
			return nil, err
		}
		if !known && len(names) > 0 {
			for i, n := range names {
				if n == "" {
					names[i] = "(default)"
				}
			}
			return nil, bad("pool %q does not exist; pools: %s", pool, strings.Join(names, ", "))
		}
	}
	pools := slices.Repeat([]string{pool}, spec.Replicas)
	if pool == "" && target == nil && h.cfg.Route != nil {
		if got := h.cfg.Route(spec.Labels, spec.Resources, spec.Replicas); len(got) == spec.Replicas {
			pools = got
		}
	}
	perPool := map[string]int{}
	for _, p := range pools {
		perPool[p]++
	}
	for _, p := range slices.Sorted(maps.Keys(perPool)) {
		if err := h.checkQueue(ctx, p, perPool[p]); err != nil {
			return nil, err
		}
	}
	ins := make([]store.Instance, spec.Replicas)
	ids := make([]string, spec.Replicas)
	now := h.clk.Now()
	for i := range ins {
		id := uuid.NewString()
		n := spec.Name
		switch {
		case n == "":
			n = store.UnnamedName(id) // reads back null, as PyLet's does
		case spec.Replicas > 1:
			n = fmt.Sprintf("%s-%d", spec.Name, i)
		}
		ids[i] = id
		ins[i] = store.Instance{ID: id, Name: n, Command: spec.Command, Pool: pools[i], Requests: spec.Resources,
			Exclusive: spec.Exclusive, Daemon: spec.Daemon, Restartable: spec.Restartable, Labels: spec.Labels,
			Env: spec.Env, Venv: spec.Venv, RequestedGPUIndices: spec.GPUIndices, RestartPolicy: spec.RestartPolicy,
			MaxRestarts: spec.MaxRestarts, MaxWait: spec.MaxWait, CreatedAt: now, QueuedAt: now}
		if target != nil {
			ins[i].TargetWorker = target.ID
		}
		ins[i].Priority = spec.Priority
		if g := spec.Gang; g != nil {
			ins[i].GangID, ins[i].GangName, ins[i].GangSize, ins[i].GangRank = ids[0], g.Name, g.Size, i
			if g.Name == "" {
				ins[i].GangName = ids[0]
			}
			ins[i].GangMaxWait = g.MaxWait
		}
	}
	if err := h.inserts.insert(ctx, ins, now); err != nil {
		return nil, err
	}
	h.m.submitted.Add(float64(spec.Replicas))
	h.Poke()
	return ids, nil
}

// checkQueue refuses, with 429 and a reason, a submit of n instances that
// would take pool past its max_queued waiting instances (seed 002: ECS
// caps its provisioning queue). The count is read before the insert, so
// concurrent submits may pass the cap by at most their own replicas.
func (h *Head) checkQueue(ctx context.Context, pool string, n int) error {
	if h.cfg.MaxQueued == nil || pool == "" {
		return nil
	}
	max := h.cfg.MaxQueued(pool)
	if max <= 0 {
		return nil
	}
	waiting, err := h.st.CountInstances(ctx, store.Filter{Status: store.StatusPending, Pool: &pool})
	if err != nil {
		return err
	}
	if waiting+n > max {
		return httpapi.Errorf(http.StatusTooManyRequests, "pool %q has %d instances waiting; %d more would pass its max_queued of %d",
			pool, waiting, n, max)
	}
	return nil
}

// Instance returns one instance.
func (h *Head) Instance(ctx context.Context, id string) (*store.Instance, error) {
	return h.st.GetInstance(ctx, id)
}

// CountInstances counts the instances f matches.
func (h *Head) CountInstances(ctx context.Context, f store.Filter) (int, error) {
	return h.st.CountInstances(ctx, f)
}

// Attempts returns an instance's recorded attempts, oldest first.
func (h *Head) Attempts(ctx context.Context, id string) ([]store.AttemptRecord, error) {
	return h.st.Attempts(ctx, id)
}

// InstanceByName returns one instance by name.
func (h *Head) InstanceByName(ctx context.Context, name string) (*store.Instance, error) {
	if strings.HasPrefix(name, "/") {
		return nil, store.ErrNotFound // an unnamed instance has no name to find it by
	}
	return h.st.GetInstanceByName(ctx, name)
}

// Instances lists instances.
func (h *Head) Instances(ctx context.Context, f store.Filter) ([]*store.Instance, error) {
	return h.st.ListInstances(ctx, f)
}

// Cancel cancels an instance with a grace period (default, capped).
func (h *Head) Cancel(ctx context.Context, id string, grace *time.Duration) (store.CancelResult, error) {
	g := h.cfg.DefaultGracePeriod
	if grace != nil {
		g = min(*grace, h.cfg.MaxGracePeriod)
	}
	res, err := h.st.RequestCancel(ctx, id, g, h.clk.Now())
	if err != nil {
		return res, err
	}
	if res.Worker != "" {
		h.notify.wake(res.Worker)
	}
	if res.Outcome == store.CancelDone {
		h.Poke()
		if h.cfg.OnWithdraw != nil {
			// Waiting work given up on: nodes booting for it may go.
			if in, err := h.st.GetInstance(ctx, id); err == nil {
				h.withdraw([]string{in.Pool})
			}
		}
	}
	return res, nil
}

// DeleteInstance deletes a terminal instance.
func (h *Head) DeleteInstance(ctx context.Context, id string) error {
	return h.st.DeleteInstance(ctx, id)
}

// DeleteInstances deletes terminal instances (of one status when set).
func (h *Head) DeleteInstances(ctx context.Context, status store.Status) ([]string, error) {
	return h.st.DeleteTerminalInstances(ctx, status)
}

// RegisterWorker registers or reconnects a worker and returns its token.
func (h *Head) RegisterWorker(ctx context.Context, req *httpapi.RegisterRequest) (string, error) {
	if len(req.WorkerID) > submit.MaxNameLen || strings.ContainsAny(req.WorkerID, "/?#%") {
		return "", bad("worker_id %q must be at most %d characters without '/', '?', '#' or '%%'", req.WorkerID, submit.MaxNameLen)
	}
	if err := req.Resources.Validate("resources"); err != nil {
		return "", bad("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	res := req.Resources.ToResources(4, 0, 4096)
	logPort := req.LogPort
	if logPort == 0 {
		logPort = DefaultLogPort
	}
	if logPort < 1 || logPort > 65535 {
		return "", bad("log_port %d is out of range", logPort)
	}
	tok, err := newToken()
	if err != nil {
		return "", err
	}
	w, err := h.st.RegisterWorker(ctx, store.Registration{ID: req.WorkerID, Host: req.Host, Pool: req.Pool,
		Capacity: res, Labels: req.Labels, LogPort: logPort, BootID: req.BootID, TokenHash: hashToken(tok)}, h.clk.Now())
	if err != nil {
		return "", err
	}
	h.log.Info("worker registered", "worker", w.ID, "host", w.Host, "pool", w.Pool, "resources", w.Capacity.String())
	h.notify.wake(w.ID)
	h.Poke()
	return tok, nil
}

// Workers lists workers with what is still available on each.
func (h *Head) Workers(ctx context.Context) ([]httpapi.WorkerView, error) {
	st, err := h.st.SchedulingState(ctx)
	if err != nil {
		return nil, err
	}
	return views(st.Workers, st.Active), nil
}

// Worker returns one worker with its availability.
func (h *Head) Worker(ctx context.Context, id string) (httpapi.WorkerView, error) {
	if _, err := h.st.GetWorker(ctx, id); err != nil {
		return httpapi.WorkerView{}, err
	}
	st, err := h.st.SchedulingState(ctx)
	if err != nil {
		return httpapi.WorkerView{}, err
	}
	for _, v := range views(st.Workers, st.Active) {
		if v.Worker.ID == id {
			return v, nil
		}
	}
	return httpapi.WorkerView{}, fmt.Errorf("worker %s: %w", id, store.ErrNotFound)
}

func views(ws []*store.Worker, active []store.SchedInstance) []httpapi.WorkerView {
	type use struct {
		cpu, mem int64
		excl     map[int]bool
	}
	used := map[string]*use{}
	for _, a := range active {
		u := used[a.Worker]
		if u == nil {
			u = &use{excl: map[int]bool{}}
			used[a.Worker] = u
		}
		u.cpu += a.Requests.MilliCPU
		u.mem += a.Requests.Memory
		if a.Exclusive {
			for _, g := range a.GPUIndices {
				u.excl[g] = true
			}
		}
	}
	out := make([]httpapi.WorkerView, 0, len(ws))
	for _, w := range ws {
		v := httpapi.WorkerView{Worker: w, Available: w.Capacity.Clone()}
		u := used[w.ID]
		for g := 0; g < int(w.Capacity.GPUs); g++ {
			if u == nil || !u.excl[g] {
				v.AvailableGPUIndices = append(v.AvailableGPUIndices, g)
			}
		}
		if u != nil {
			v.Available.MilliCPU -= u.cpu
			v.Available.Memory -= u.mem
		}
		v.Available.GPUs = int64(len(v.AvailableGPUIndices))
		out = append(out, v)
	}
	return out
}

// DeleteWorker deletes an OFFLINE worker.
func (h *Head) DeleteWorker(ctx context.Context, id string) error {
	if err := h.st.DeleteWorker(ctx, id, h.clk.Now()); err != nil {
		return err
	}
	h.Poke()
	return nil
}

// DeleteOfflineWorkers deletes every OFFLINE worker.
func (h *Head) DeleteOfflineWorkers(ctx context.Context) ([]string, error) {
	ids, err := h.st.DeleteOfflineWorkers(ctx, h.clk.Now())
	if err != nil {
		return nil, err
	}
	h.Poke()
	return ids, nil
}

// WireGen encodes a worker generation for this head's epoch.
func (h *Head) WireGen(gen int64) int64 { return h.epoch<<genBits | gen }

// Heartbeat authenticates a worker, applies its reports with attempt
// fencing, then holds the request until the worker's desired set changes
// (or PollTimeout). A generation from another head epoch, or one ahead of
// the store, is answered at once.
func (h *Head) Heartbeat(ctx context.Context, worker string, req *httpapi.HeartbeatRequest) (*httpapi.HeartbeatResponse, error) {
	h.m.heartbeats.Inc()
	w, err := h.st.GetWorker(ctx, worker)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(hashToken(req.WorkerToken)), []byte(w.TokenHash)) != 1 {
		return nil, httpapi.Errorf(http.StatusUnauthorized, "Invalid worker token")
	}
	if w.BootID != "" && req.BootID != w.BootID {
		h.log.Info("worker boot id changed", "worker", worker, "old", w.BootID, "new", req.BootID)
	}
	seen := int64(-1)
	if req.LastSeenGen>>genBits == h.epoch {
		seen = req.LastSeenGen & (1<<genBits - 1)
	}
	wake := h.notify.wait(worker)
	reports := make([]store.Report, 0, len(req.Instances))
	for _, r := range req.Instances {
		reports = append(reports, store.Report{InstanceID: r.InstanceID, Attempt: r.Attempt,
			Status: store.ReportStatus(r.Status), Port: r.Port, ExitCode: r.ExitCode,
			FailureReason: truncate(r.FailureReason, maxFailureReason)})
	}
	at := h.clk.Now()
	res, err := h.st.ApplyHeartbeat(ctx, store.HeartbeatInput{WorkerID: worker, BootID: req.BootID, SeenGen: seen,
		Reports: reports}, at)
	if err != nil {
		return nil, err
	}
	h.live.heard(worker, at)
	if len(res.Late) > 0 {
		h.lateCompleted(ctx, worker, res.Late)
	}
	if res.Freed > 0 || res.Requeued > 0 || w.Status != store.WorkerOnline {
		h.Poke()
	} else if len(res.Started) > 0 {
		h.changes.bump()
	}
	for _, s := range res.Started {
		h.m.toRunning.WithLabelValues(s.Pool).Observe(s.Wait.Seconds())
	}
	var timer clock.Timer
	for {
		ds, err := h.st.DesiredFor(ctx, worker)
		if err != nil {
			return nil, err
		}
		if err := h.withGangEnv(ctx, &ds); err != nil {
			return nil, err
		}
		if seen < 0 || ds.Generation != seen {
			return h.desiredResponse(ds), nil
		}
		if timer == nil {
			timer = h.clk.NewTimer(h.cfg.PollTimeout)
			defer timer.Stop()
		}
		select {
		case <-wake:
			wake = h.notify.wait(worker)
		case <-timer.C():
			return h.desiredResponse(ds), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (h *Head) desiredResponse(ds store.DesiredState) *httpapi.HeartbeatResponse {
	out := &httpapi.HeartbeatResponse{Gen: h.WireGen(ds.Generation), DesiredInstances: make([]httpapi.DesiredInstance, 0, len(ds.Instances))}
	for _, d := range ds.Instances {
		di := httpapi.DesiredInstance{InstanceID: d.InstanceID, Attempt: d.Attempt, Command: d.Command,
			GPUIndices: d.GPUIndices, Env: d.Env, ExpectedStatus: string(d.ExpectedStatus),
			RestartPolicy: string(d.RestartPolicy), RequeuedIfLost: d.RequeuedIfLost && h.leaseOn()}
		if di.GPUIndices == nil {
			di.GPUIndices = []int{}
		}
		if di.Env == nil {
			di.Env = map[string]string{}
		}
		if d.Venv != "" {
			v := d.Venv
			di.Venv = &v
		}
		out.DesiredInstances = append(out.DesiredInstances, di)
	}
	for _, s := range ds.Stopping {
		out.Stopping = append(out.Stopping, httpapi.StoppingInstance{InstanceID: s.InstanceID, Attempt: s.Attempt,
			GracePeriodSeconds: s.GracePeriod.Seconds()})
	}
	out.Lease = h.lease()
	return out
}

func unavailable(format string, args ...any) error {
	return httpapi.Errorf(http.StatusServiceUnavailable, format, args...)
}

// Logs fetches a chunk of an instance's log from its worker's log server.
func (h *Head) Logs(ctx context.Context, id string, offset, limit int64) (*httpapi.LogChunk, error) {
	in, err := h.st.GetInstance(ctx, id)
	if err != nil {
		return nil, err
	}
	if in.AssignedWorker == "" {
		return nil, httpapi.Errorf(http.StatusNotFound, "Instance not assigned to any worker")
	}
	w, err := h.st.GetWorker(ctx, in.AssignedWorker)
	if errors.Is(err, store.ErrNotFound) {
		return nil, unavailable("Worker %s not found", in.AssignedWorker)
	}
	if err != nil {
		return nil, err
	}
	if w.Status == store.WorkerOffline {
		return nil, unavailable("Worker %s is offline", w.ID)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(w.Host, strconv.Itoa(w.LogPort)), Path: "/logs/" + id,
		RawQuery: url.Values{"offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}.Encode()}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.LogProxyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, unavailable("Failed to build log request: %v", err)
	}
	// The worker's own log token, derived from the head's secret: a
	// machine that joined with a bootstrap blob knows only its own.
	if t := provider.LogToken(h.joinToken(), w.ID); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := h.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, unavailable("Failed to connect to worker %s: %v", w.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, unavailable("Failed to read logs from worker %s: %v", w.ID, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, httpapi.Errorf(http.StatusNotFound, "Logs not found for instance %s", id)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, unavailable("Worker %s returned status %d for logs", w.ID, resp.StatusCode)
	}
	var chunk httpapi.LogChunk
	if err := json.Unmarshal(body, &chunk); err != nil {
		return nil, unavailable("Worker %s returned invalid log data: %v", w.ID, err)
	}
	return &chunk, nil
}

// joinToken is the secret the tokens workers' log servers accept from the
// head derive from (provider.LogToken).
func (h *Head) joinToken() string {
	if h.cfg.JoinToken != "" {
		return h.cfg.JoinToken
	}
	return h.cfg.Token
}
