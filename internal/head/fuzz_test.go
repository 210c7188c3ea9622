package head

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/submit"
)

// submitSeeds seed FuzzSubmitBody; TestSubmitAnswersMatchLeaf replays them.
var submitSeeds = []string{
	`{"command":"echo"}`, `{"command":"x","replicas":3,"name":"a"}`, `{"command":5}`, `{`, `null`, `[]`,
	`{"command":"x","gpu_indices":[0],"target_worker":"w"}`, `{"command":"x","resource_requirements":{"cpu_cores":1e308}}`,
	`{"command":"x","labels":{"k":"v"},"env":{"PORT":"1"},"venv":"/v"}`, `{"command":"x","restart_policy":"always","max_restarts":-1}`,
}

// FuzzSubmitBody: any body gets 200, 400 or 422 with a {"detail": ...}
// error, never a panic or a 500.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add([]byte(s))
	}
	h, err := New(context.Background(), Config{DataDir: f.TempDir(), Clock: clock.NewFake(start)})
	if err != nil {
		f.Fatal(err)
	}
	defer h.Close()
	handler := h.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/instances", bytes.NewReader(body)))
		switch rec.Code {
		case 200, 400, 413, 422:
		default:
			t.Fatalf("body %q: status %d: %s", body, rec.Code, rec.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("body %q: answer is not a JSON object: %q", body, rec.Body)
		}
		if _, ok := out["detail"]; rec.Code != 200 && !ok {
			t.Fatalf("body %q: error without detail: %q", body, rec.Body)
		}
	})
}

// TestSubmitAnswersMatchLeaf replays the seeds and committed corpora of both
// FuzzSubmitBody targets (this package's and internal/submit's) through the
// API and checks that each answer is the one submit.Parse predicts: its 422
// byte for byte, its 400 detail, and for a body it accepts a 200 unless one
// of the head's own checks refuses it (target worker, pool, a name taken).
// So the leaf target fuzzes what the API answers.
func TestSubmitAnswersMatchLeaf(t *testing.T) {
	e := newEnv(t, nil)
	handler := e.h.Handler()
	var files []string
	for _, dir := range []string{"testdata/fuzz/FuzzSubmitBody", "../submit/testdata/fuzz/FuzzSubmitBody"} {
		fs, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	if len(files) < 40 {
		t.Fatalf("only %d corpus files", len(files))
	}
	bodies := map[string][]byte{}
	for i, s := range submitSeeds {
		bodies[fmt.Sprintf("seed#%d", i)] = []byte(s)
	}
	for _, f := range files {
		bodies[f] = corpusBytes(t, f)
	}
	accepted := 0
	for f, body := range bodies {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/instances", bytes.NewReader(body)))
		var out struct {
			Detail any `json:"detail"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: answer %q is not JSON", f, rec.Body)
		}
		detail, _ := out.Detail.(string)
		spec, err := submit.Parse(body)
		var ve *submit.ValidationError
		var se *submit.Error
		switch {
		case errors.As(err, &ve):
			want, _ := json.Marshal(ve)
			if got := bytes.TrimSpace(rec.Body.Bytes()); rec.Code != 422 || !bytes.Equal(got, want) {
				t.Errorf("%s: %d %s, want 422 %s", f, rec.Code, got, want)
			}
		case errors.As(err, &se):
			if rec.Code != se.Code || detail != se.Detail {
				t.Errorf("%s: %d %q, want %d %q", f, rec.Code, detail, se.Code, se.Detail)
			}
		case err != nil:
			t.Fatalf("%s: submit.Parse: %T %v", f, err, err)
		case rec.Code == 200:
			accepted++
		case rec.Code == 400 && (spec.TargetWorker != "" && strings.HasPrefix(detail, "Target worker '") ||
			spec.Pool != "" && strings.HasPrefix(detail, "pool ") ||
			spec.Name != "" && strings.HasPrefix(detail, "An instance with name '")):
		default:
			t.Errorf("%s: the leaf accepts %q, the API answers %d %q", f, body, rec.Code, rec.Body)
		}
	}
	t.Logf("%d bodies, %d accepted by the leaf and the API", len(bodies), accepted)
	if accepted == 0 {
		t.Fatal("no body was accepted: the comparison saw only refusals")
	}
}

// corpusBytes reads a `go test fuzz v1` file holding one []byte value.
func corpusBytes(t *testing.T, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	header, value, _ := strings.Cut(string(raw), "\n")
	quoted, ok := strings.CutPrefix(strings.TrimSpace(value), "[]byte(")
	if header != "go test fuzz v1" || !ok {
		t.Fatalf("%s: not a []byte corpus file: %q", file, raw)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return []byte(s)
}

// TestTrailingBracketRefused: a closing bracket after the body's object is
// trailing data (422), for a submit and a registration alike; the API's
// decoder once took it for the end of the body and stored the instance.
func TestTrailingBracketRefused(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ path, body string }{
		{"/instances", `{"command":"x"}}`},
		{"/instances", `{"command":"x"} ]`},
		{"/workers", `{"worker_id":"w","host":"127.0.0.1"}}`},
	} {
		var out map[string]any
		if code := e.do("POST", c.path, c.body, &out); code != 422 {
			t.Errorf("POST %s %s: %d %v, want 422", c.path, c.body, code, out)
		}
	}
	var list []map[string]any
	if code := e.do("GET", "/instances", nil, &list); code != 200 || len(list) != 0 {
		t.Fatalf("instances after refused submits: %d %v", code, list)
	}
}

// BenchmarkSubmitHTTP measures durable submits through the HTTP API on
// 127.0.0.1 (each answered only after its SQLite commit).
func BenchmarkSubmitHTTP(b *testing.B) {
	h, err := New(context.Background(), Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	body := []byte(`{"command":"echo hi","resource_requirements":{"cpu_cores":1,"memory_mb":256},"labels":{"app":"bench"}}`)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(srv.URL+"/instances", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body) // drained, so the connection is reused
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}
