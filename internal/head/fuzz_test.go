package head

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tide-project/tide/internal/clock"
)

// FuzzSubmitBody: any body gets 200, 400 or 422 with a {"detail": ...}
// error, never a panic or a 500.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range []string{
		`{"command":"echo"}`, `{"command":"x","replicas":3,"name":"a"}`, `{"command":5}`, `{`, `null`, `[]`,
		`{"command":"x","gpu_indices":[0],"target_worker":"w"}`, `{"command":"x","resource_requirements":{"cpu_cores":1e308}}`,
		`{"command":"x","labels":{"k":"v"},"env":{"PORT":"1"},"venv":"/v"}`, `{"command":"x","restart_policy":"always","max_restarts":-1}`,
	} {
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
