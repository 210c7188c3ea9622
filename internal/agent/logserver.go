package agent

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxLogResponse caps one log response (PyLet's LOG_MAX_RESPONSE_SIZE).
const MaxLogResponse = 10 << 20

// validInstanceID is what the worker accepts as an instance id in a path:
// the head's uuids and anything else without path separators.
var validInstanceID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// logResponse is PyLet's worker log answer: offsets in the instance's
// stream, base64 content and its decoded size.
type logResponse struct {
	AvailableOffset int64  `json:"available_offset"`
	TotalSize       int64  `json:"total_size"`
	Content         string `json:"content"`
	Size            int64  `json:"size"`
}

// logHandler serves GET /logs/{id}?offset=&limit= and GET /health, as
// PyLet's worker does, and as the head's log proxy calls it. With a token,
// /logs needs "Authorization: Bearer <t>" where t is one of tokens (the
// head sends the worker's log token, provider.LogToken); PyLet's log server
// has no auth at all (A14.12). Empty tokens are ignored.
func logHandler(logs *logSet, tokens []string, log *slog.Logger) http.Handler {
	tokens = slices.DeleteFunc(slices.Clone(tokens), func(t string) bool { return t == "" })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /logs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if len(tokens) > 0 {
			got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			ok := false
			for _, t := range tokens {
				ok = subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(t)) == 1 || ok
			}
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tide-worker"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"detail": "Invalid or missing token"})
				return
			}
		}
		id := r.PathValue("id")
		if !validInstanceID.MatchString(id) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("Invalid instance id %q", id)})
			return
		}
		q := r.URL.Query()
		offset, limit := int64(0), int64(MaxLogResponse)
		var err error
		if v := q.Get("offset"); v != "" {
			if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("Invalid offset %q", v)})
				return
			}
		}
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.ParseInt(v, 10, 64); err != nil || limit < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("Invalid limit %q", v)})
				return
			}
		}
		limit = min(limit, MaxLogResponse)
		c, err := readLog(logs.dir(id), offset, limit)
		if errors.Is(err, fs.ErrNotExist) {
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Logs not found for instance " + id})
			return
		}
		if err != nil {
			log.Error("read log failed", "instance", id, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "Failed to read logs"})
			return
		}
		writeJSON(w, http.StatusOK, logResponse{AvailableOffset: c.AvailableOffset, TotalSize: c.TotalSize,
			Content: base64.StdEncoding.EncodeToString(c.Content), Size: int64(len(c.Content))})
	})
	return mux
}

// logServerTimeout bounds reading a request (headers and body) and
// writing an answer on the worker's log server; a variable for tests.
var logServerTimeout = 30 * time.Second

// newLogServer is the worker's log server. It has no long-polls, so whole
// request and response timeouts are safe: a client trickling headers or a
// body byte by byte (slowloris) is cut after logServerTimeout instead of
// holding a goroutine and a connection for ever.
func newLogServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, logServerTimeout),
		ReadTimeout: logServerTimeout, WriteTimeout: logServerTimeout + MaxLogResponse/(1<<20)*time.Second}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
