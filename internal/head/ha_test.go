package head

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/etcdstore"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// haHead is one head of a test on etcd, serving on loopback.
type haHead struct {
	h    *Head
	url  string
	stop context.CancelFunc
	done chan error
}

func startHAHead(t *testing.T, storeURL string) *haHead {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	h, err := New(context.Background(), Config{DataDir: t.TempDir(), Store: storeURL, LeaseTTL: time.Second,
		ReserveAfter: -1, SchedulerInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hh := &haHead{h: h, url: url, stop: cancel, done: make(chan error, 1)}
	go func() { hh.done <- h.Serve(ctx, ln) }()
	t.Cleanup(func() { hh.kill(); h.Close() })
	return hh
}

// kill stops serving and leading (the lease is revoked: a clean stop).
func (hh *haHead) kill() {
	hh.stop()
	<-hh.done
	hh.done <- nil
}

func (hh *haHead) call(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = strings.NewReader(string(raw))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, hh.url+path, rd)
	resp, err := (&http.Client{Timeout: 40 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// waitLeader waits (bounded) until exactly one of hs leads and every
// other head names it; it returns the leader.
func waitLeader(t *testing.T, hs ...*haHead) *haHead {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var leader *haHead
		n := 0
		for _, h := range hs {
			if h.h.Leader().Self {
				leader = h
				n++
			}
		}
		if n == 1 {
			agree := true
			for _, h := range hs {
				if li := h.h.Leader(); li.Leader != leader.url {
					agree = false
				}
			}
			if agree {
				return leader
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no single leader after 15s")
	return nil
}

// TestHAStandbyServesAndLeaderPlaces: two heads on one (embedded, real)
// etcd. One leads; a worker registers and long-polls the standby, an
// instance submitted to the standby is placed by the leader and the
// standby's held heartbeat wakes with it. The leader stops; the standby
// takes over and places the next instance; the deposed leader's placements
// are refused by the fence.
func TestHAStandbyServesAndLeaderPlaces(t *testing.T) {
	srv := etcdtest.Start(t)
	u := "etcd://" + strings.TrimPrefix(srv.Endpoint(), "http://") + "/ha-test"
	a, b := startHAHead(t, u), startHAHead(t, u)
	leader := waitLeader(t, a, b)
	standby := a
	if leader == a {
		standby = b
	}
	var li LeaderInfo
	if code := standby.call(t, "GET", "/leader", nil, &li); code != 200 || li.Self || li.Leader != leader.url || !li.HA {
		t.Fatalf("GET /leader on the standby: %d %+v", code, li)
	}
	var reg httpapi.RegisterResponse
	if code := standby.call(t, "POST", "/workers", map[string]any{"worker_id": "w", "host": "10.0.0.9",
		"resources": map[string]any{"cpu_cores": 4, "gpu_units": 0, "memory_mb": 4096}}, &reg); code != 200 {
		t.Fatalf("register on the standby: %d", code)
	}
	beat := func(h *haHead, gen int64, reps ...httpapi.InstanceReport) httpapi.HeartbeatResponse {
		t.Helper()
		var out httpapi.HeartbeatResponse
		if code := h.call(t, "POST", "/workers/w/heartbeat", httpapi.HeartbeatRequest{WorkerToken: reg.WorkerToken,
			LastSeenGen: gen, Instances: reps}, &out); code != 200 {
			t.Fatalf("heartbeat: %d", code)
		}
		return out
	}
	first := beat(standby, 0)
	submit := func(h *haHead, name string) string {
		t.Helper()
		var out map[string]any
		if code := h.call(t, "POST", "/instances", map[string]any{"command": "true", "name": name,
			"resource_requirements": map[string]any{"cpu_cores": 1}}, &out); code != 200 {
			t.Fatalf("submit on %s: %d %v", h.url, code, out)
		}
		return out["instance_id"].(string)
	}
	id1 := submit(standby, "one")
	// The heartbeat held on the standby wakes with the leader's placement.
	got := beat(standby, first.Gen)
	if len(got.DesiredInstances) != 1 || got.DesiredInstances[0].InstanceID != id1 {
		t.Fatalf("desired after placement: %+v", got)
	}
	att := got.DesiredInstances[0].Attempt
	ec := 0
	beat(standby, got.Gen, httpapi.InstanceReport{InstanceID: id1, Attempt: att, Status: "COMPLETED", ExitCode: &ec})
	var in httpapi.InstanceJSON
	if leader.call(t, "GET", "/instances/"+id1, nil, &in); in.Status != "COMPLETED" {
		t.Fatalf("instance on the leader after the report to the standby: %s", in.Status)
	}

	// The leader stops; the standby takes over within a few lease TTLs.
	t0 := time.Now()
	leader.kill()
	if l := waitLeader(t, standby); l != standby {
		t.Fatal("standby did not take over")
	}
	t.Logf("takeover after a clean stop: %s", time.Since(t0))
	id2 := submit(standby, "two")
	var last httpapi.HeartbeatResponse
	for i := 0; i < 100; i++ {
		last = beat(standby, -1)
		if len(last.DesiredInstances) == 1 && last.DesiredInstances[0].InstanceID == id2 {
			break
		}
	}
	if len(last.DesiredInstances) != 1 || last.DesiredInstances[0].InstanceID != id2 {
		t.Fatalf("new leader did not place the instance: %+v", last)
	}
	// The deposed leader's store is fenced: an instance no worker fits
	// stays pending, and the old leader's placement of it is refused.
	var out map[string]any
	if code := standby.call(t, "POST", "/instances", map[string]any{"command": "true", "name": "big",
		"resource_requirements": map[string]any{"cpu_cores": 1000}}, &out); code != 200 {
		t.Fatalf("submit big: %d", code)
	}
	big := out["instance_id"].(string)
	_, err := leader.h.Store().Assign(context.Background(), []store.Assignment{{InstanceID: big, Worker: "w"}}, time.Now())
	if !errors.Is(err, etcdstore.ErrNotLeader) {
		t.Fatalf("deposed leader's assign: %v, want ErrNotLeader", err)
	}
	if got, _ := standby.h.Store().GetInstance(context.Background(), big); got.Status != store.StatusPending {
		t.Fatalf("fenced assign changed the instance: %s", got.Status)
	}
}

func TestParseStoreURL(t *testing.T) {
	tests := []struct {
		in      string
		eps     []string
		prefix  string
		wantErr string
	}{
		{"", nil, "", ""},
		{"sqlite", nil, "", ""},
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}, "/tide/", ""},
		{"etcd://a:1,b:2,c:3/team-x", []string{"a:1", "b:2", "c:3"}, "/team-x/", ""},
		{"etcd://[::1]:2379//deep/er/", []string{"[::1]:2379"}, "/deep/er/", ""},
		{"etcd://a", nil, "", `endpoint "a": want host:port`},
		{"etcd://a:1,,b:2", nil, "", `endpoint "": want host:port`},
		{"postgres://x", nil, "", "want sqlite or etcd://"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			eps, prefix, err := ParseStoreURL(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || strings.Join(eps, " ") != strings.Join(tc.eps, " ") || prefix != tc.prefix {
				t.Fatalf("= %v %q %v, want %v %q", eps, prefix, err, tc.eps, tc.prefix)
			}
		})
	}
	if _, err := New(context.Background(), Config{DataDir: t.TempDir(), Store: "etcd://nohost"}); err == nil ||
		!strings.HasPrefix(err.Error(), "head config: store") {
		t.Fatalf("New with a bad store: %v, want a head config error naming the store", err)
	}
}
