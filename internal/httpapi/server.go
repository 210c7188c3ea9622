// Package api is the head's HTTP surface: PyLet's paths, JSON field names,
// status codes and {"detail": ...} errors, so existing PyLet clients work
// unchanged, plus tide's documented extensions (delete instances and
// workers, replicas, several label filters, restart policies, pressure,
// pools, nodes and events).
//
// Routes (Go 1.22 mux patterns):
//
//	POST   /instances                       submit (200 {"instance_id"})
//	GET    /instances                       ?status=S&label=k=v&label=k2=v2&pool=P&limit=N (newest N; X-Total-Count)
//	DELETE /instances                       ?status=S (terminal only)
//	GET    /instances/{id}                  and /instances/by-name/{name}
//	GET    /instances/{id}/endpoint         and /instances/by-name/{name}/endpoint
//	GET    /instances/{id}/result           202 while unfinished
//	POST   /instances/{id}/cancel           ?grace_period_seconds=N
//	GET    /instances/{id}/logs             ?offset=&limit= (proxied to the worker)
//	GET    /instances/{id}/attempts         the attempt history (tide's extension)
//	DELETE /instances/{id}                  and /instances/by-name/{name}
//	POST   /workers                         register (join token)
//	GET    /workers, /workers/{id}
//	DELETE /workers/{id}, /workers?status=OFFLINE
//	POST   /workers/{id}/heartbeat          long-poll (worker token in the body)
//	GET    /pressure                        the scheduler's report per pool
//	GET    /pools                           every pool: autoscaler and head views merged
//	GET    /nodes                           ?pool=P: nodes with their workers, use, marks, ages
//	GET    /events                          ?pool=P&since=ID&limit=N (JSON list, oldest first);
//	                                        &follow=1 streams newline-delimited JSON
//	GET    /health
//
// Auth: with an admin token, every route but /health, worker registration
// and heartbeats needs "Authorization: Bearer <token>", or HTTP Basic
// credentials whose password is the token (any user name; PyLet's client
// sends those for "http://:TOKEN@head:8000"); 401 otherwise.
// Registration needs the join token (or the admin token) when one is set,
// or a machine credential (Options.MachineAuth) minted for exactly the
// worker id and pool it registers; heartbeats carry the per-worker token
// PyLet issues at registration. The head mounts POST /bootstrap (mint a
// machine's bootstrap blob) under the admin token through Options.Extra.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/store"
	"github.com/tide-project/tide/internal/submit"
)

// Backend is what the HTTP layer needs from the head.
type Backend interface {
	// Submit validates and stores the request; it returns the new ids.
	Submit(ctx context.Context, req *SubmitRequest) ([]string, error)
	Instance(ctx context.Context, id string) (*store.Instance, error)
	InstanceByName(ctx context.Context, name string) (*store.Instance, error)
	Instances(ctx context.Context, f store.Filter) ([]*store.Instance, error)
	// Cancel cancels one instance; grace nil means the default.
	Cancel(ctx context.Context, id string, grace *time.Duration) (store.CancelResult, error)
	DeleteInstance(ctx context.Context, id string) error
	DeleteInstances(ctx context.Context, status store.Status) ([]string, error)
	// RegisterWorker returns the new worker token.
	RegisterWorker(ctx context.Context, req *RegisterRequest) (string, error)
	Workers(ctx context.Context) ([]WorkerView, error)
	Worker(ctx context.Context, id string) (WorkerView, error)
	DeleteWorker(ctx context.Context, id string) error
	DeleteOfflineWorkers(ctx context.Context) ([]string, error)
	// Heartbeat applies reports and long-polls for a desired-state change.
	Heartbeat(ctx context.Context, worker string, req *HeartbeatRequest) (*HeartbeatResponse, error)
	// Logs fetches a log chunk from the instance's worker.
	Logs(ctx context.Context, id string, offset, limit int64) (*LogChunk, error)
	Pressure() map[string]capacity.Pressure
	// Events lists events in ID order.
	Events(ctx context.Context, f store.EventFilter) ([]store.Event, error)
	// FollowEvents emits the selected events, then each new one, until ctx
	// is done, emit fails or the head's bound passes.
	FollowEvents(ctx context.Context, f store.EventFilter, emit func(store.Event) error) error
	// Pools lists every pool the head or its autoscalers know.
	Pools(ctx context.Context) ([]PoolJSON, error)
	// Nodes lists the nodes of one pool (every pool when pool is nil).
	Nodes(ctx context.Context, pool *string) ([]NodeJSON, error)
}

// Error is an error with an HTTP status and a PyLet-style detail.
type Error struct {
	Code   int
	Detail string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Detail) }

// Errorf returns an *Error with a formatted detail.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Options configures the handler.
type Options struct {
	// AdminToken guards the API when set.
	AdminToken string
	// JoinToken guards worker registration when set (the admin token is
	// accepted too).
	JoinToken string
	// MachineAuth, when set, accepts a registration whose bearer is neither
	// token: it reports whether token is a machine credential minted for
	// exactly this worker id and pool (and marks it used).
	MachineAuth func(ctx context.Context, token, workerID, pool string) bool
	// MaxBodyBytes bounds request bodies; 4 MiB when zero.
	MaxBodyBytes int64
	Logger       *slog.Logger
	// Extra is mounted under the same auth, e.g. "GET /metrics".
	Extra map[string]http.Handler
	// BodyTimeout bounds how long a request body may take to arrive;
	// DefaultBodyTimeout when zero.
	BodyTimeout time.Duration
}

type server struct {
	b    Backend
	opts Options
	log  *slog.Logger
}

// NewHandler returns the head's HTTP handler.
func NewHandler(b Backend, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{b: b, opts: opts, log: opts.Logger}
	mux := http.NewServeMux()
	admin := s.requireAdmin
	mux.Handle("POST /instances", admin(s.submit))
	mux.Handle("GET /instances", admin(s.list))
	mux.Handle("DELETE /instances", admin(s.deleteInstances))
	mux.Handle("GET /instances/{id}", admin(s.byID(s.get)))
	// "/instances/by-name/{name}" and "/instances/{id}/result" overlap as
	// mux patterns, so one route dispatches on the second segment.
	mux.Handle("GET /instances/{a}/{b}", admin(s.instanceSub))
	mux.Handle("GET /instances/by-name/{name}/endpoint", admin(s.byName(s.endpoint)))
	mux.Handle("POST /instances/{id}/cancel", admin(s.cancel))
	mux.Handle("DELETE /instances/{id}", admin(s.byID(s.deleteInstance)))
	mux.Handle("DELETE /instances/by-name/{name}", admin(s.byName(s.deleteInstance)))
	mux.Handle("POST /workers", http.HandlerFunc(s.register))
	mux.Handle("GET /workers", admin(s.workers))
	mux.Handle("GET /workers/{id}", admin(s.worker))
	mux.Handle("DELETE /workers", admin(s.deleteWorkers))
	mux.Handle("DELETE /workers/{id}", admin(s.deleteWorker))
	mux.Handle("POST /workers/{id}/heartbeat", http.HandlerFunc(s.heartbeat))
	mux.Handle("GET /pressure", admin(s.pressure))
	mux.Handle("GET /pools", admin(s.pools))
	mux.Handle("GET /nodes", admin(s.nodes))
	mux.Handle("GET /events", admin(s.events))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	for pattern, h := range opts.Extra {
		mux.Handle(pattern, s.requireAdmin(h.ServeHTTP))
	}
	return bodyDeadline(http.MaxBytesHandler(mux, opts.MaxBodyBytes), opts.BodyTimeout)
}

// bearer returns the token a request presents: "Authorization: Bearer
// <token>", or the password of HTTP Basic credentials with any user name,
// which is how PyLet's Python client sends a token it was given as the
// head address's userinfo (pylet.init("http://:TOKEN@head:8000")). The
// header is never logged.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	if _, pass, ok := r.BasicAuth(); ok {
		return pass
	}
	return ""
}

func tokenEqual(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s *server) requireAdmin(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AdminToken != "" && !tokenEqual(bearer(r), s.opts.AdminToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tide"`)
			writeDetail(w, http.StatusUnauthorized, "Invalid or missing token")
			return
		}
		h(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return // the client went away; nothing else to do
	}
}

func writeDetail(w http.ResponseWriter, code int, detail string) {
	writeJSON(w, code, map[string]string{"detail": detail})
}

// fail maps an error to PyLet's status codes; notFound is the 404 detail.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error, notFound string) {
	var ae *Error
	var se *submit.Error
	var nt *store.NameTakenError
	switch {
	case errors.As(err, &ae):
		writeDetail(w, ae.Code, ae.Detail)
	case errors.As(err, &se):
		writeDetail(w, se.Code, se.Detail)
	case errors.As(err, &nt):
		writeDetail(w, http.StatusBadRequest, fmt.Sprintf("An instance with name '%s' already exists.", nt.Name))
	case errors.Is(err, store.ErrNotFound):
		writeDetail(w, http.StatusNotFound, notFound)
	case errors.Is(err, store.ErrUnavailable):
		s.log.Warn("request failed: state store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		writeDetail(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		writeDetail(w, http.StatusServiceUnavailable, "Request cancelled")
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeDetail(w, http.StatusInternalServerError, "Internal server error")
	}
}

// read reads a request body; on failure it writes the answer (413 past
// Options.MaxBodyBytes, 408 past the body timeout, 400 otherwise) and
// returns false.
func (s *server) read(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		return body, true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeDetail(w, http.StatusRequestEntityTooLarge, "Request body too large")
		return nil, false
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		writeDetail(w, http.StatusRequestTimeout, "Request body too slow")
		return nil, false
	}
	writeDetail(w, http.StatusBadRequest, "Could not read request body")
	return nil, false
}

// decode reads a JSON body; on failure it writes FastAPI's 422 (see
// submit.Unmarshal) or read's answer and returns false.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := s.read(w, r)
	if !ok {
		return false
	}
	if ve := submit.Unmarshal(body, v); ve != nil {
		writeJSON(w, http.StatusUnprocessableEntity, ve)
		return false
	}
	return true
}

func missingField(w http.ResponseWriter, field string, body any) {
	writeJSON(w, http.StatusUnprocessableEntity, submit.MissingField(field, body))
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	body, ok := s.read(w, r)
	if !ok {
		return
	}
	req, err := submit.Decode(body)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, err)
		return
	}
	ids, err := s.b.Submit(r.Context(), req)
	if err != nil {
		s.fail(w, r, err, "Instance not found")
		return
	}
	resp := SubmitResponse{InstanceID: ids[0]}
	if len(ids) > 1 {
		resp.InstanceIDs = ids
	}
	writeJSON(w, http.StatusOK, resp)
}

// parseLabels reads repeated label=k=v query parameters.
func parseLabels(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, Errorf(http.StatusBadRequest, "Invalid label filter %q: expected key=value", v)
		}
		if prev, dup := out[k]; dup && prev != val {
			return nil, Errorf(http.StatusBadRequest, "Conflicting label filters for key %q", k)
		}
		out[k] = val
	}
	return out, nil
}

func parseStatus(v string) (store.Status, error) {
	if v == "" {
		return "", nil
	}
	st := store.Status(strings.ToUpper(v))
	if !st.Valid() {
		return "", Errorf(http.StatusBadRequest, "Invalid status %q", v)
	}
	return st, nil
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := parseStatus(q.Get("status"))
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	labels, err := parseLabels(q["label"])
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	f := store.Filter{Status: st, Labels: labels}
	if q.Has("pool") {
		p := q.Get("pool")
		f.Pool = &p
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxListLimit {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid limit %q: want 1 to %d", q.Get("limit"), MaxListLimit))
			return
		}
		f.Limit = n
		if c, ok := s.b.(InstanceCounter); ok {
			total, err := c.CountInstances(r.Context(), f)
			if err != nil {
				s.fail(w, r, err, "")
				return
			}
			w.Header().Set("X-Total-Count", strconv.Itoa(total))
		}
	}
	ins, err := s.b.Instances(r.Context(), f)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	out := make([]InstanceJSON, 0, len(ins))
	for _, in := range ins {
		out = append(out, InstanceFrom(in))
	}
	s.addWaitingReasons(r.Context(), ins, func(i int, why string) { out[i].WaitingReason = why })
	writeJSON(w, http.StatusOK, out)
}

func (s *server) instanceSub(w http.ResponseWriter, r *http.Request) {
	a, b := r.PathValue("a"), r.PathValue("b")
	if a == "by-name" {
		r.SetPathValue("name", b)
		s.byName(s.get)(w, r)
		return
	}
	r.SetPathValue("id", a)
	switch b {
	case "endpoint":
		s.byID(s.endpoint)(w, r)
	case "result":
		s.byID(s.result)(w, r)
	case "logs":
		s.logs(w, r)
	case "attempts":
		s.byID(s.attempts)(w, r)
	default:
		writeDetail(w, http.StatusNotFound, "Not Found")
	}
}

type instanceHandler func(w http.ResponseWriter, r *http.Request, in *store.Instance)

func (s *server) byID(h instanceHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		in, err := s.b.Instance(r.Context(), r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err, "Instance not found")
			return
		}
		h(w, r, in)
	}
}

func (s *server) byName(h instanceHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		in, err := s.b.InstanceByName(r.Context(), r.PathValue("name"))
		if err != nil {
			s.fail(w, r, err, "Instance not found")
			return
		}
		h(w, r, in)
	}
}

func (s *server) get(w http.ResponseWriter, r *http.Request, in *store.Instance) {
	out := InstanceFrom(in)
	s.addWaitingReasons(r.Context(), []*store.Instance{in}, func(i int, why string) {
		out.WaitingReason = why
	})
	writeJSON(w, http.StatusOK, out)
}

// waitingReasoner is a Backend that says why pending instances wait.
type waitingReasoner interface {
	// WaitingReasons returns one reason per instance ("" when none).
	WaitingReasons(ctx context.Context, ins []*store.Instance) []string
}

// addWaitingReasons sets the waiting_reason of each pending instance when
// the backend knows it.
func (s *server) addWaitingReasons(ctx context.Context, ins []*store.Instance, set func(int, string)) {
	wr, ok := s.b.(waitingReasoner)
	if !ok {
		return
	}
	for i, why := range wr.WaitingReasons(ctx, ins) {
		if why != "" {
			set(i, why)
		}
	}
}

func (s *server) endpoint(w http.ResponseWriter, r *http.Request, in *store.Instance) {
	if in.Endpoint == "" {
		writeDetail(w, http.StatusNotFound, "Instance endpoint not available yet")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"endpoint": in.Endpoint})
}

func (s *server) result(w http.ResponseWriter, r *http.Request, in *store.Instance) {
	switch in.Status {
	case store.StatusCompleted:
		writeJSON(w, http.StatusOK, map[string]any{"result": map[string]any{"exit_code": in.ExitCode}})
	case store.StatusFailed:
		writeJSON(w, http.StatusOK, map[string]any{"error": map[string]any{"exit_code": in.ExitCode,
			"failure_reason": strPtr(in.FailureReason)}})
	case store.StatusCancelled:
		writeJSON(w, http.StatusOK, map[string]any{"cancelled": true})
	default:
		writeDetail(w, http.StatusAccepted, "Instance not yet completed")
	}
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var grace *time.Duration
	if v := r.URL.Query().Get("grace_period_seconds"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f != f {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid grace_period_seconds %q", v))
			return
		}
		d := time.Duration(f * float64(time.Second))
		grace = &d
	}
	res, err := s.b.Cancel(r.Context(), id, grace)
	if err != nil {
		s.fail(w, r, err, "Instance not found")
		return
	}
	switch res.Outcome {
	case store.CancelTerminal:
		writeDetail(w, http.StatusBadRequest, "Instance already in terminal state: "+string(res.Status))
	case store.CancelAlreadyRequested:
		writeJSON(w, http.StatusOK, map[string]string{"status": "already_cancelling", "instance_id": id})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "cancelling", "instance_id": id})
	}
}

func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit := int64(0), int64(1<<20)
	var err error
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid offset %q", v))
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.ParseInt(v, 10, 64); err != nil || limit < 0 {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Invalid limit %q", v))
			return
		}
	}
	chunk, err := s.b.Logs(r.Context(), r.PathValue("id"), offset, limit)
	if err != nil {
		s.fail(w, r, err, "Instance not found")
		return
	}
	writeJSON(w, http.StatusOK, chunk)
}

func (s *server) deleteInstance(w http.ResponseWriter, r *http.Request, in *store.Instance) {
	if err := s.b.DeleteInstance(r.Context(), in.ID); err != nil {
		if errors.Is(err, store.ErrNotTerminal) {
			writeDetail(w, http.StatusBadRequest, fmt.Sprintf("Instance is not in a terminal state: %s; cancel it first", in.Status))
			return
		}
		s.fail(w, r, err, "Instance not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": []string{in.ID}})
}

func (s *server) deleteInstances(w http.ResponseWriter, r *http.Request) {
	st, err := parseStatus(r.URL.Query().Get("status"))
	if err == nil && st != "" && !st.Terminal() {
		err = Errorf(http.StatusBadRequest, "Only terminal instances can be deleted, not %s", st)
	}
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	ids, err := s.b.DeleteInstances(r.Context(), st)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	if ids == nil {
		ids = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": ids})
}

func (s *server) register(w http.ResponseWriter, r *http.Request) {
	got := bearer(r)
	machine := false // the bearer must be a machine credential for the worker
	if want := s.opts.JoinToken; want != "" || s.opts.AdminToken != "" {
		ok := (want != "" && tokenEqual(got, want)) || (s.opts.AdminToken != "" && tokenEqual(got, s.opts.AdminToken))
		if !ok && (s.opts.MachineAuth == nil || got == "") {
			writeDetail(w, http.StatusUnauthorized, "Invalid or missing join token")
			return
		}
		machine = !ok
	}
	var req RegisterRequest
	if !s.decode(w, r, &req) {
		return
	}
	if machine && !s.opts.MachineAuth(r.Context(), got, req.WorkerID, req.Pool) {
		writeDetail(w, http.StatusUnauthorized, "Invalid or missing join token")
		return
	}
	if req.WorkerID == "" {
		missingField(w, "worker_id", req)
		return
	}
	if req.Host == "" {
		missingField(w, "host", req)
		return
	}
	tok, err := s.b.RegisterWorker(r.Context(), &req)
	if err != nil {
		s.fail(w, r, err, "Worker not found")
		return
	}
	writeJSON(w, http.StatusOK, RegisterResponse{WorkerToken: tok, Message: "Worker registered successfully"})
}

func (s *server) workers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.b.Workers(r.Context())
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	out := make([]WorkerJSON, 0, len(ws))
	for _, v := range ws {
		out = append(out, WorkerFrom(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) worker(w http.ResponseWriter, r *http.Request) {
	v, err := s.b.Worker(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, "Worker not found")
		return
	}
	writeJSON(w, http.StatusOK, WorkerFrom(v))
}

func (s *server) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.b.DeleteWorker(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrWorkerOnline) {
			writeDetail(w, http.StatusBadRequest, "Worker is not OFFLINE; only offline workers can be deleted")
			return
		}
		s.fail(w, r, err, "Worker not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": []string{id}})
}

func (s *server) deleteWorkers(w http.ResponseWriter, r *http.Request) {
	if st := strings.ToUpper(r.URL.Query().Get("status")); st != string(store.WorkerOffline) {
		writeDetail(w, http.StatusBadRequest, "Only offline workers can be deleted: use ?status=OFFLINE")
		return
	}
	ids, err := s.b.DeleteOfflineWorkers(r.Context())
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	if ids == nil {
		ids = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": ids})
}

func (s *server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req HeartbeatRequest
	if r.ContentLength == 0 {
		writeDetail(w, http.StatusBadRequest, "Missing heartbeat body")
		return
	}
	if !s.decode(w, r, &req) {
		return
	}
	if req.WorkerToken == "" {
		writeDetail(w, http.StatusBadRequest, "Missing worker_token")
		return
	}
	resp, err := s.b.Heartbeat(r.Context(), r.PathValue("id"), &req)
	if err != nil {
		s.fail(w, r, err, "Worker not registered")
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) pressure(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.b.Pressure())
}
