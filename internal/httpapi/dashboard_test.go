package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// fakeDash implements the dashboard's optional backend interfaces.
type fakeDash struct {
	version  int64
	gotSince int64
	pool     *string
	cordons  []string
	missing  string
}

func (f *fakeDash) Watch(ctx context.Context, since int64, maxWait time.Duration) (int64, error) {
	f.gotSince = since
	return f.version, nil
}

func (f *fakeDash) PoolHistory(ctx context.Context, pool *string, since int64) ([]PoolHistoryJSON, error) {
	f.pool, f.gotSince = pool, since
	return []PoolHistoryJSON{{Pool: "p", CostPerHour: 1.5, Samples: []PoolSample{{Seq: since + 1, Ready: 2}}}}, nil
}

func (f *fakeDash) Cordon(ctx context.Context, worker string, on bool) error {
	if worker == f.missing {
		return store.ErrNotFound
	}
	f.cordons = append(f.cordons, worker+map[bool]string{true: "+", false: "-"}[on])
	return nil
}

// TestDashboardRoutes: the dashboard's routes parse their query, answer
// with the backend's figures, and name the bad parameter.
func TestDashboardRoutes(t *testing.T) {
	f := &fakeDash{version: 7, missing: "ghost"}
	mux := http.NewServeMux()
	for pattern, h := range DashboardRoutes(f) {
		mux.Handle(pattern, h)
	}
	cases := []struct {
		method, target string
		code           int
		body           string
	}{
		{"GET", "/watch?since=3", 200, `{"version":7}`},
		{"GET", "/watch", 200, `{"version":7}`},
		{"GET", "/watch?since=x", 400, `Invalid since \"x\"`},
		{"GET", "/watch?since=-1", 400, `Invalid since \"-1\"`},
		{"GET", "/history?pool=p&since=4", 200, `"seq":5`},
		{"GET", "/history?since=1.5", 400, `Invalid since \"1.5\"`},
		{"POST", "/workers/w1/cordon", 200, `{"cordoned":true,"worker_id":"w1"}`},
		{"POST", "/workers/w1/uncordon", 200, `{"cordoned":false,"worker_id":"w1"}`},
		{"POST", "/workers/ghost/cordon", 404, `Worker not found`},
		{"GET", "/workers/w1/cordon", 405, ``},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("%s %s = %d %s, want %d containing %s", c.method, c.target, rec.Code, rec.Body.String(), c.code, c.body)
		}
	}
	if f.pool == nil || *f.pool != "p" {
		t.Errorf("history asked for pool %v, want p", f.pool)
	}
	if got := strings.Join(f.cordons, ","); got != "w1+,w1-" {
		t.Errorf("cordons = %s", got)
	}
	var hs []PoolHistoryJSON
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/history", nil))
	if err := json.Unmarshal(rec.Body.Bytes(), &hs); err != nil || len(hs) != 1 || f.pool != nil {
		t.Errorf("GET /history = %s (%v); pool %v, want every pool", rec.Body.String(), err, f.pool)
	}
}

// TestDashboardRoutesOnlyWhatTheBackendDoes: a backend without the optional
// interfaces gets no dashboard routes.
func TestDashboardRoutesOnlyWhatTheBackendDoes(t *testing.T) {
	if n := len(DashboardRoutes(struct{}{})); n != 0 {
		t.Errorf("%d routes for a backend that implements none", n)
	}
}

// FuzzWatchSince: any since parameter gets 200 or a 400 naming it, never
// a panic.
func FuzzWatchSince(f *testing.F) {
	for _, s := range []string{"0", "17", "-1", "x", "9223372036854775808", "", "%00"} {
		f.Add(s)
	}
	h := DashboardRoutes(&fakeDash{version: 2})["GET /watch"]
	f.Fuzz(func(t *testing.T, since string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/watch", nil)
		q := r.URL.Query()
		q.Set("since", since)
		r.URL.RawQuery = q.Encode()
		h.ServeHTTP(rec, r)
		if rec.Code != 200 && (rec.Code != 400 || !strings.Contains(rec.Body.String(), "Invalid since")) {
			t.Fatalf("since=%q: %d %s", since, rec.Code, rec.Body.String())
		}
	})
}
