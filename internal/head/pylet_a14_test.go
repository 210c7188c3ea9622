package head

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

type pollResult struct {
	hb   httpapi.HeartbeatResponse
	code int
	err  error
}

// pollAsync sends a heartbeat that the head may hold; the answer arrives on
// the returned channel. It never calls t.Fatal off the test goroutine.
func (e *env) pollAsync(id, tok string, gen int64, reps ...httpapi.InstanceReport) <-chan pollResult {
	ch := make(chan pollResult, 1)
	body, err := json.Marshal(httpapi.HeartbeatRequest{WorkerToken: tok, BootID: "boot", LastSeenGen: gen, Instances: reps})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		var r pollResult
		resp, err := e.srv.Client().Post(e.srv.URL+"/workers/"+id+"/heartbeat", "application/json", bytes.NewReader(body))
		if err != nil {
			r.err = err
			ch <- r
			return
		}
		defer resp.Body.Close()
		r.code = resp.StatusCode
		r.err = json.NewDecoder(resp.Body).Decode(&r.hb)
		ch <- r
	}()
	return ch
}

// heartbeatNow sends a heartbeat that the head must answer without holding
// it, because it changed the worker's desired set or the worker is behind.
// If the head holds it instead, the test fails (after releasing the poll).
func (e *env) heartbeatNow(id, tok string, gen int64, reps ...httpapi.InstanceReport) httpapi.HeartbeatResponse {
	e.t.Helper()
	ch := e.pollAsync(id, tok, gen, reps...)
	select {
	case r := <-ch:
		if r.err != nil || r.code != 200 {
			e.t.Fatalf("heartbeat %s: %d %v", id, r.code, r.err)
		}
		return r.hb
	case <-time.After(5 * time.Second):
		e.clk.Advance(e.h.cfg.PollTimeout) // release the held poll before failing
		<-ch
		e.t.Fatalf("heartbeat %s at gen %d was held: the head saw no change", id, gen)
		return httpapi.HeartbeatResponse{}
	}
}

func (e *env) workerStatus(id string) httpapi.WorkerJSON {
	e.t.Helper()
	var w httpapi.WorkerJSON
	if code := e.do("GET", "/workers/"+id, nil, &w); code != 200 {
		e.t.Fatalf("GET /workers/%s: %d", id, code)
	}
	return w
}

func (e *env) liveness() {
	e.t.Helper()
	if err := e.h.CheckLiveness(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cancel(id string) {
	e.t.Helper()
	var out obj
	if code := e.do("POST", "/instances/"+id+"/cancel", nil, &out); code != 200 || out["status"] != "cancelling" {
		e.t.Fatalf("cancel %s: %d %v", id, code, out)
	}
}

func running(id string, port int) httpapi.InstanceReport {
	return httpapi.InstanceReport{InstanceID: id, Attempt: 1, Status: "RUNNING", Port: ip(port)}
}

// TestPyLetA14_1_IdleLongPollingWorkerNeverFlaps is A14.1. PyLet's SUSPECT
// threshold (30 s) equals its long-poll hold (30 s) and the heartbeat is
// stamped when it arrives, so an idle worker is ≈30 s old whenever its next
// poll is a moment late; the 5 s liveness tick then marks it SUSPECT and the
// scheduler skips it. Here an idle worker long-polls through several full
// holds, re-polling a second late each time (PyLet's whole-second stamps
// make that window up to 1 s), with a liveness check every
// LivenessInterval: it must stay ONLINE and keep getting work. The last step
// replays the same moment with PyLet's threshold to show the window is hit.
func TestPyLetA14_1_IdleLongPollingWorkerNeverFlaps(t *testing.T) {
	if _, err := (Config{DataDir: "d", PollTimeout: 30 * time.Second, SuspectAfter: 30 * time.Second}).withDefaults(); err == nil {
		t.Fatal("PyLet's thresholds (suspect == poll timeout) were accepted")
	}
	e := newEnv(t, nil)
	cfg := e.h.cfg
	tok := e.register("w", 0)
	hb := e.heartbeat("w", tok, 0)
	for cycle := range 4 {
		ch := e.pollAsync("w", tok, hb.Gen)
		waitForTimers(t, e.clk, 1) // the poll is held
		for held := time.Duration(0); held < cfg.PollTimeout; held += cfg.LivenessInterval {
			e.clk.Advance(cfg.LivenessInterval)
			e.liveness()
			if st := e.workerStatus("w").Status; st != "ONLINE" {
				t.Fatalf("cycle %d: worker %s after %s of a held poll", cycle, st, held+cfg.LivenessInterval)
			}
		}
		r := <-ch
		if r.err != nil || r.code != 200 || r.hb.Gen != hb.Gen {
			t.Fatalf("cycle %d: held poll answered %d %v gen %d, want 200 at gen %d", cycle, r.code, r.err, r.hb.Gen, hb.Gen)
		}
		// The next poll arrives a second late; a liveness tick lands first.
		e.clk.Advance(time.Second)
		e.liveness()
		if st := e.workerStatus("w").Status; st != "ONLINE" {
			t.Fatalf("cycle %d: worker %s between two polls", cycle, st)
		}
		hb = r.hb
	}
	// Still placeable: a SUSPECT worker would get nothing.
	e.submit(obj{"command": "x"})
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d instances on the idle worker, want 1", n)
	}
	// Control: PyLet's threshold at this very moment marks the worker SUSPECT.
	if n, err := e.h.Store().MarkSuspect(context.Background(), e.clk.Now().Add(-cfg.PollTimeout)); err != nil || n != 1 {
		t.Fatalf("PyLet's threshold marked %d workers suspect (%v); the test missed the flapping window", n, err)
	}
}

// TestPyLetA14_2_CancelCompletesWithoutAWorkerReport is A14.2. PyLet drops a
// cancelled instance from the worker's desired set and waits for the worker
// to report it CANCELLED; an ASSIGNED instance the worker never started, and
// an UNKNOWN one on a dead worker, are never reported, so they show
// CANCELLING forever and keep their GPUs (UNKNOWN counts as used). Here
// every cancel ends CANCELLED and frees its GPU: the never-started one once
// the worker acknowledges the generation without reporting it, the UNKNOWN
// one at once, and one whose worker died mid-stop when it goes offline.
func TestPyLetA14_2_CancelCompletesWithoutAWorkerReport(t *testing.T) {
	e := newEnv(t, nil)
	gpu := obj{"cpu_cores": 1, "memory_mb": 64, "gpu_units": 1}

	// Assigned, then cancelled before the worker started it.
	tokG := e.register("g", 1)
	a := e.submit(obj{"command": "a", "target_worker": "g", "resource_requirements": gpu})
	e.schedule()
	hb := e.heartbeat("g", tokG, 0) // the worker is told to start a...
	if len(hb.DesiredInstances) != 1 {
		t.Fatalf("desired: %+v", hb)
	}
	e.cancel(a) // ...but it is cancelled first
	if in := e.instance(a); in.DisplayStatus != "CANCELLING" {
		t.Fatalf("a after cancel: %s", in.DisplayStatus)
	}
	hb = e.heartbeatNow("g", tokG, hb.Gen) // learns of the cancel
	if len(hb.DesiredInstances) != 0 || len(hb.Stopping) != 1 {
		t.Fatalf("heartbeat after cancel: %+v", hb)
	}
	e.heartbeatNow("g", tokG, hb.Gen) // has seen it and reports nothing: a never ran
	if in := e.instance(a); in.Status != "CANCELLED" || in.DisplayStatus != "CANCELLED" || in.EndedAt == nil {
		t.Fatalf("never-started instance after the acknowledgement: %+v", in)
	}
	if w := e.workerStatus("g"); !slices.Equal(w.AvailableGPUIndices, []int{0}) || w.AvailableResources.GPUUnits != 1 {
		t.Fatalf("GPU of the cancelled instance still held: %+v", w)
	}
	b := e.submit(obj{"command": "b", "target_worker": "g", "resource_requirements": gpu})
	if n := e.schedule(); n != 1 || !slices.Equal(e.instance(b).GPUIndices, []int{0}) {
		t.Fatalf("next GPU instance: placed %d, %+v", n, e.instance(b))
	}

	// A worker dies with one instance running and one being stopped.
	tokD := e.register("d", 2)
	c := e.submit(obj{"command": "c", "target_worker": "d", "resource_requirements": gpu})
	f := e.submit(obj{"command": "f", "target_worker": "d", "resource_requirements": gpu})
	e.schedule()
	e.heartbeat("d", tokD, 0, running(c, 1), running(f, 2))
	e.cancel(f)
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.heartbeat("g", tokG, 0)
	e.liveness()
	if st := e.workerStatus("d").Status; st != "OFFLINE" {
		t.Fatalf("d is %s", st)
	}
	if in := e.instance(f); in.Status != "CANCELLED" {
		t.Fatalf("instance being stopped on a dead worker: %s, want CANCELLED", in.Status)
	}
	if in := e.instance(c); in.Status != "UNKNOWN" {
		t.Fatalf("running instance on a dead worker: %s, want UNKNOWN", in.Status)
	}
	e.cancel(c)
	if in := e.instance(c); in.Status != "CANCELLED" || in.DisplayStatus != "CANCELLED" {
		t.Fatalf("cancel of UNKNOWN: %+v", in)
	}
	// d returns under its name: nothing to run, both GPUs free, and its late
	// reports revive nothing.
	tokD = e.register("d", 2)
	hb = e.heartbeat("d", tokD, 0, running(c, 1), running(f, 2))
	if len(hb.DesiredInstances) != 0 || len(hb.Stopping) != 0 {
		t.Fatalf("returning worker told to run %+v", hb)
	}
	for _, id := range []string{c, f} {
		if st := e.instance(id).Status; st != "CANCELLED" {
			t.Fatalf("late RUNNING report revived %s: %s", id, st)
		}
	}
	if w := e.workerStatus("d"); !slices.Equal(w.AvailableGPUIndices, []int{0, 1}) {
		t.Fatalf("GPUs of cancelled instances still held on d: %v", w.AvailableGPUIndices)
	}
}

// TestPyLetA14_4_LostInstancesRecoverAndOfflineWorkersAreDeleted is A14.4.
// PyLet never reschedules: an instance on a dead worker stays UNKNOWN until
// the same worker_id returns, which never happens because a restarted
// worker draws a new uuid; OFFLINE workers are never collected and there is
// no delete route. Here an instance with a restart policy moves to another
// worker at attempt 2 (the lost attempt's late report is fenced off), a
// worker that returns under its stable name (the agent persists it, see
// agent.TestIdentityPersistsAndDataDirIsLocked) resumes its UNKNOWN
// instance, and an OFFLINE worker can be deleted, failing what it held.
func TestPyLetA14_4_LostInstancesRecoverAndOfflineWorkersAreDeleted(t *testing.T) {
	e := newEnv(t, nil)
	tok1 := e.register("w1", 0)
	retry := e.submit(obj{"command": "r", "restart_policy": "on-failure", "max_restarts": 2})
	plain := e.submit(obj{"command": "p"})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d, want 2", n)
	}
	e.heartbeat("w1", tok1, 0, running(retry, 1), running(plain, 2))
	tok2 := e.register("w2", 0)
	tok3 := e.register("w3", 0)
	doomed := e.submit(obj{"command": "d", "target_worker": "w3"})
	e.schedule()
	e.heartbeat("w3", tok3, 0, running(doomed, 3))

	// w1 and w3 fall silent; w2 keeps polling.
	e.clk.Advance(e.h.cfg.OfflineAfter + time.Second)
	e.heartbeat("w2", tok2, 0)
	e.liveness()
	for id, want := range map[string]string{retry: "PENDING", plain: "UNKNOWN", doomed: "UNKNOWN"} {
		if st := e.instance(id).Status; st != want {
			t.Fatalf("%s after its worker went offline: %s, want %s", e.instance(id).Command, st, want)
		}
	}
	// The requeued instance waits for w1's fence (fence_test.go).
	e.clk.Advance(e.h.fenceHold())
	e.heartbeat("w2", tok2, 0)
	if n := e.schedule(); n != 1 {
		t.Fatalf("rescheduled %d, want 1", n)
	}
	if in := e.instance(retry); in.Status != "ASSIGNED" || in.Attempt != 2 || *in.AssignedTo != "w2" || in.Restarts != 1 {
		t.Fatalf("retry after reschedule: %+v", in)
	}

	// w1 restarts under the same name: its UNKNOWN instance resumes, and its
	// report for the lost attempt of retry changes nothing.
	tok1 = e.register("w1", 0)
	e.heartbeat("w1", tok1, 0, running(plain, 2),
		httpapi.InstanceReport{InstanceID: retry, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	if in := e.instance(plain); in.Status != "RUNNING" || in.Attempt != 1 {
		t.Fatalf("UNKNOWN instance after its worker returned: %+v", in)
	}
	if in := e.instance(retry); in.Status != "ASSIGNED" || in.Attempt != 2 || *in.AssignedTo != "w2" {
		t.Fatalf("stale attempt changed the rescheduled instance: %+v", in)
	}

	// w3 never returns: it can be deleted, and its instance fails.
	var out struct{ Deleted []string }
	if code := e.do("DELETE", "/workers?status=OFFLINE", nil, &out); code != 200 || !slices.Equal(out.Deleted, []string{"w3"}) {
		t.Fatalf("DELETE /workers?status=OFFLINE: %d %+v", code, out)
	}
	var ws []httpapi.WorkerJSON
	e.do("GET", "/workers", nil, &ws)
	var names []string
	for _, w := range ws {
		names = append(names, w.WorkerID)
	}
	if !slices.Equal(names, []string{"w1", "w2"}) {
		t.Fatalf("workers after GC: %v", names)
	}
	if in := e.instance(doomed); in.Status != "FAILED" || in.FailureReason == nil || *in.FailureReason != "WORKER_DELETED" {
		t.Fatalf("instance of the deleted worker: %+v", in)
	}
}

// TestPyLetA14_7_WorkersReportWhatIsLeft is A14.7 on the wire. PyLet sets
// available_resources to the totals at registration and never decrements
// them (ServerlessLLM reads gpu_available from there), ignores CPU and
// memory when placing, and gives a shared instance GPUs 0..n-1 even when an
// exclusive one holds GPU 0. Here the worker view shrinks with every
// placement and grows back when an instance ends, an instance that does not
// fit the CPU left waits, and the shared instance gets GPU 1.
func TestPyLetA14_7_WorkersReportWhatIsLeft(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.register("w", 2) // 8 cores, 16384 MB, 2 GPUs
	// Submits a millisecond apart, so FIFO order is submit order.
	ex := e.submit(obj{"command": "ex", "resource_requirements": obj{"cpu_cores": 2, "memory_mb": 4096, "gpu_units": 1}})
	e.clk.Advance(time.Millisecond)
	sh := e.submit(obj{"command": "sh", "target_worker": "w", "exclusive": false,
		"resource_requirements": obj{"cpu_cores": 1, "memory_mb": 1024, "gpu_units": 1}})
	e.clk.Advance(time.Millisecond)
	big := e.submit(obj{"command": "big", "resource_requirements": obj{"cpu_cores": 6, "memory_mb": 1024}})
	if n := e.schedule(); n != 2 {
		t.Fatalf("placed %d, want 2 (big does not fit the CPU left)", n)
	}
	if g := e.instance(ex).GPUIndices; !slices.Equal(g, []int{0}) {
		t.Fatalf("exclusive instance GPUs %v", g)
	}
	if g := e.instance(sh).GPUIndices; !slices.Equal(g, []int{1}) {
		t.Fatalf("shared instance GPUs %v, want [1] (GPU 0 is held exclusively)", g)
	}
	if st := e.instance(big).Status; st != "PENDING" {
		t.Fatalf("big is %s, want PENDING", st)
	}
	w := e.workerStatus("w")
	want := httpapi.ResourcesOut{CPUCores: 5, MemoryMB: 16384 - 4096 - 1024, GPUUnits: 1}
	if w.AvailableResources != want || !slices.Equal(w.AvailableGPUIndices, []int{1}) ||
		w.TotalResources != (httpapi.ResourcesOut{CPUCores: 8, MemoryMB: 16384, GPUUnits: 2}) {
		t.Fatalf("worker view %+v, want available %+v and GPU indices [1]", w, want)
	}
	e.heartbeat("w", tok, 0, httpapi.InstanceReport{InstanceID: ex, Attempt: 1, Status: "COMPLETED", ExitCode: ip(0)})
	w = e.workerStatus("w")
	want = httpapi.ResourcesOut{CPUCores: 7, MemoryMB: 16384 - 1024, GPUUnits: 2}
	if w.AvailableResources != want || !slices.Equal(w.AvailableGPUIndices, []int{0, 1}) {
		t.Fatalf("after ex ended: %+v, want available %+v", w.AvailableResources, want)
	}
	if n := e.schedule(); n != 1 || e.instance(big).Status != "ASSIGNED" {
		t.Fatalf("big after CPU was freed: placed %d, %s", n, e.instance(big).Status)
	}
}

// TestPyLetA14_9_LabelFiltersAndNames is A14.9. PyLet filters on one label
// only (its client filters the rest locally) and splices the key into a
// SQLite JSON path, so a key with a '.' or a quote never matches or breaks
// the query; names are any string, so one with '/' cannot be fetched by
// name, and they stay taken forever because nothing deletes instances.
// Here several labels are ANDed by the head, keys are data, names that
// would break the by-name routes are refused, and a deleted instance's name
// is free again.
func TestPyLetA14_9_LabelFiltersAndNames(t *testing.T) {
	e := newEnv(t, nil)
	a := e.submit(obj{"command": "a", "labels": obj{"app": "x", "tier": "gpu"}})
	b := e.submit(obj{"command": "b", "labels": obj{"app": "x"}})
	c := e.submit(obj{"command": "c", "labels": obj{"k.y": "v", `q"'`: "1"}})
	label := func(k, v string) string { return "label=" + url.QueryEscape(k+"="+v) }
	tests := []struct {
		query string
		want  []string
	}{
		{label("app", "x") + "&" + label("tier", "gpu"), []string{a}},
		{label("app", "x"), []string{a, b}},
		{label("k.y", "v"), []string{c}},
		{label(`q"'`, "1"), []string{c}},
		{label("app') OR 1=1 --", "x"), nil},
		{label("$.app", "x"), nil},
	}
	for _, tc := range tests {
		var list []httpapi.InstanceJSON
		if code := e.do("GET", "/instances?"+tc.query, nil, &list); code != 200 {
			t.Fatalf("GET /instances?%s: %d", tc.query, code)
		}
		var got []string
		for _, in := range list {
			got = append(got, in.InstanceID)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("GET /instances?%s = %v, want %v", tc.query, got, want)
		}
	}

	var out obj
	if code := e.do("POST", "/instances", obj{"command": "x", "name": "team/job"}, &out); code != 400 {
		t.Fatalf("name with '/': %d %v, want 400", code, out)
	}
	first := e.submit(obj{"command": "x", "name": "svc"})
	if code := e.do("POST", "/instances", obj{"command": "x", "name": "svc"}, &out); code != 400 {
		t.Fatalf("duplicate name: %d", code)
	}
	e.cancel(first)
	if code := e.do("DELETE", "/instances/by-name/svc", nil, &out); code != 200 {
		t.Fatalf("delete by name: %d %v", code, out)
	}
	second := e.submit(obj{"command": "x", "name": "svc"})
	var byName httpapi.InstanceJSON
	if code := e.do("GET", "/instances/by-name/svc", nil, &byName); code != 200 || byName.InstanceID != second || second == first {
		t.Fatalf("reused name resolves to %q (%d), want %q", byName.InstanceID, code, second)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tide test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestPyLetA14_12_ServesTLSWithToken is the TLS half of A14.12: PyLet's head
// speaks plain HTTP only and has no auth. Here the real entry point serves
// HTTPS with the admin token enforced, and refuses plain HTTP on that port.
// (Auth on heartbeats and the worker log server: TestHeartbeatAuthAndErrors,
// TestAdminAndJoinTokens and agent.TestPyLetA14_12_AuthOnHeadAndLogServer.)
func TestPyLetA14_12_ServesTLSWithToken(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Token: "adm", TLSCertFile: certFile,
			TLSKeyFile: keyFile, OnListen: func(a net.Addr) { addrCh <- a }})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop")
		}
	}()
	var addr string
	select {
	case a := <-addrCh:
		addr = a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(c *http.Client, u, token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{{"/health", "", 200}, {"/instances", "", 401}, {"/instances", "wrong", 401}, {"/instances", "adm", 200}} {
		if got := get(hc, "https://"+addr+tc.path, tc.token); got != tc.want {
			t.Errorf("GET https://%s%s (token %q) = %d, want %d", addr, tc.path, tc.token, got, tc.want)
		}
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if got := get(plain, "http://"+addr+"/health", ""); got == 200 {
		t.Fatal("plain HTTP was served on the TLS port")
	}
}
