package assembly

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/head"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

// TestJoiningScopesCredentialsToMachines: each Configure hands the machine
// its own blob whose credential registers that machine only; Delete revokes
// it, so the blob registers nothing afterwards; the head stores hashes only.
func TestJoiningScopesCredentialsToMachines(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	h, err := head.New(ctx, head.Config{DataDir: dir, Token: "admin", JoinToken: "join", Clock: clk, CredentialTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	off := capacity.Offering{Type: "m", Kind: capacity.OnDemand, Resources: capacity.CPU(1000)}
	cloud, err := sim.New(sim.Config{Offerings: []sim.Offering{{Offering: off}}}, clk, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	j := joining{Provider: cloud, head: h, headURL: "https://10.0.0.1:8000"}
	f := provider.Fence{Controller: "c", Epoch: 1}
	blobOf := func(id string) tideprovider.Bootstrap {
		t.Helper()
		if _, err := j.Create(ctx, provider.CreateRequest{Fence: f, Pool: "p", MachineID: id, Offering: off.Name()}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if _, err := j.Configure(ctx, provider.ConfigureRequest{Fence: f, Pool: "p", MachineID: id, Cluster: "tide",
			Bootstrap: []byte(`{"version":1,"head":"https://10.0.0.1:8000","token":"shared"}`)}); err != nil {
			t.Fatal(err)
		}
		m, err := cloud.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tideprovider.ParseBootstrap(m.Bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		if b.Machine != id || b.Pool != "p" || b.Head != "https://10.0.0.1:8000" || b.Token == "shared" {
			t.Fatalf("blob of %s: %+v", id, b)
		}
		return b
	}
	register := func(worker, pool, token string) int {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"worker_id": worker, "host": "10.0.0.9", "pool": pool})
		req, _ := http.NewRequest("POST", srv.URL+"/workers", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	workers := func() int {
		t.Helper()
		st, err := h.Store().SchedulingState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Workers)
	}
	b1, b2 := blobOf("p-1"), blobOf("p-2")
	for _, tc := range []struct {
		name, worker, pool, token string
	}{
		{"another machine's credential", "p-1", "p", b2.Token},
		{"another pool", "p-1", "q", b1.Token},
		{"no credential", "p-1", "p", ""},
		{"a made-up credential", "p-1", "p", "x" + b1.Token},
	} {
		if code := register(tc.worker, tc.pool, tc.token); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", tc.name, code)
		}
	}
	if n := workers(); n != 0 {
		t.Fatalf("%d workers registered by refused requests", n)
	}
	if code := register("p-1", "p", b1.Token); code != http.StatusOK {
		t.Fatalf("the machine's own credential: %d", code)
	}
	// Used once, it outlives the TTL (a re-registration after a head
	// restart); unused, it expires.
	clk.Advance(2 * time.Minute)
	if code := register("p-1", "p", b1.Token); code != http.StatusOK {
		t.Fatalf("a used credential after the TTL: %d", code)
	}
	if code := register("p-2", "p", b2.Token); code != http.StatusUnauthorized {
		t.Fatalf("an expired credential: %d, want 401", code)
	}
	// Delete revokes: the blob registers nothing any more.
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "p", MachineID: "p-1"}); err != nil {
		t.Fatal(err)
	}
	if code := register("p-1", "p", b1.Token); code != http.StatusUnauthorized {
		t.Fatalf("a deleted machine's credential: %d, want 401", code)
	}
	if cs, err := h.Store().Credentials(ctx, "p-1"); err != nil || len(cs) != 0 {
		t.Fatalf("credentials of a deleted machine: %+v %v", cs, err)
	}
	// Only hashes are stored.
	h.Close()
	for _, name := range []string{"tide.db", "tide.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if bytes.Contains(data, []byte(b1.Token)) || bytes.Contains(data, []byte(b2.Token)) {
			t.Errorf("%s holds a credential in clear", name)
		}
	}
}
