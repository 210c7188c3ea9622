package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/provider"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fleetRig is one etcd, a coordinator, one shard whose provider runs local
// worker processes, and heads whose pools get their machines from the fleet.
type fleetRig struct {
	*cluster
	etcd     *etcdtest.Server
	coord    string // the coordinator's Fleet API address
	shardDir string
	heads    map[string]*client.Client
}

const fleetConfig = `{
  "offerings": [{"provider": "here", "profile": "local-1cpu",
                 "offering": {"type": "local-1cpu", "cpu": 1, "memory": "256Mi", "price": 1}}],
  "providers": [{"name": "here", "type": "local"}],
  "shards": [{"id": 1, "quota": [{"provider": "here", "offering": "local-1cpu/on-demand", "count": 2}]}]
}`

func startFleet(t *testing.T) *fleetRig {
	t.Helper()
	r := &fleetRig{cluster: newCluster(t), etcd: etcdtest.Start(t), heads: map[string]*client.Client{}}
	conf := filepath.Join(r.dir, "fleet.json")
	if err := os.WriteFile(conf, []byte(fleetConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	r.coord = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.start("coordinator", "fleet", "coordinator", "--etcd", r.etcd.Endpoint(), "--listen", r.coord, "--config", conf,
		"--interval", "500ms", "--lease-ttl", "2s")
	r.waitFor(20*time.Second, "the coordinator to lead", func() (bool, string) {
		st, err := r.fleetStatus()
		if err != nil {
			return false, err.Error()
		}
		return st.GetCoordinator().GetLeader(), "not leading"
	})
	r.shardDir = filepath.Join(r.dir, "shard")
	r.start("shard", "fleet", "shard", "--etcd", r.etcd.Endpoint(), "--shard", "1", "--data-dir", r.shardDir,
		"--interval", "250ms", "--lease-ttl", "2s")
	r.waitFor(30*time.Second, "shard 1 to run", func() (bool, string) {
		st, err := r.fleetStatus()
		if err != nil {
			return false, err.Error()
		}
		for _, sh := range st.GetShards() {
			if sh.GetShard() == 1 && sh.GetLive() {
				return true, ""
			}
		}
		return false, "shard 1 not live"
	})
	return r
}

func (r *fleetRig) fleetStatus() (*fleetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(r.coord, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return fleetv1.NewFleetClient(cc).Status(ctx, &fleetv1.StatusRequest{})
}

// startHead starts a head named name whose pool fa gets its machines from
// the fleet as cluster name, at priority.
func (r *fleetRig) startHead(name string, priority int) *client.Client {
	r.t.Helper()
	port := freePort(r.t)
	dir := filepath.Join(r.dir, "head-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	pools := fmt.Sprintf(`pools:
  - name: fa
    provider: {type: fleet, options: {coordinator: %q, cluster: %s, priority: %d, period: 500ms}}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 256Mi, price: 1}
    scaling: {policy: tide, idle_timeout: 1s, batch_window: 200ms, reconcile_interval: 250ms}
`, r.coord, name, priority)
	conf := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte(pools), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.start("head-"+name, "head", "--config", conf, "--port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--token", token, "--poll-timeout", "1s", "--scheduler-interval", "200ms", "--log-level", "info")
	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), token, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.waitFor(20*time.Second, "head "+name+" to answer", func() (bool, string) {
		err := c.Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	r.heads[name] = c
	return c
}

// machines lists the shard provider's machine ids (one directory each: the
// local provider never reuses an id, so this counts its Creates).
func (r *fleetRig) machines() []string {
	ents, _ := os.ReadDir(filepath.Join(r.shardDir, "here", "machines"))
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// blobOfMachine reads the bootstrap blob a shard machine was configured with.
func (r *fleetRig) blobOfMachine(id string) (provider.Bootstrap, bool) {
	data, err := os.ReadFile(filepath.Join(r.shardDir, "here", "machines", id, "machine.json"))
	if err != nil {
		return provider.Bootstrap{}, false
	}
	var rec struct {
		Bootstrap []byte `json:"bootstrap"`
	}
	if json.Unmarshal(data, &rec) != nil || len(rec.Bootstrap) == 0 {
		return provider.Bootstrap{}, false
	}
	b, err := provider.ParseBootstrap(rec.Bootstrap)
	return b, err == nil
}

func (r *fleetRig) runAll(c *client.Client, n int, cmd string) []string {
	r.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		cpu, mem := 1.0, int64(16)
		res, err := c.Submit(context.Background(), &httpapi.SubmitRequest{Command: &cmd,
			ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu, MemoryMB: &mem}})
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, res.InstanceID)
	}
	return ids
}

func (r *fleetRig) waitDone(c *client.Client, ids []string, timeout time.Duration) map[string]string {
	r.t.Helper()
	workers := map[string]string{}
	r.waitFor(timeout, "instances to complete", func() (bool, string) {
		for _, id := range ids {
			in, err := c.Instance(context.Background(), id)
			if err != nil {
				return false, err.Error()
			}
			if in.Status != "COMPLETED" {
				return false, fmt.Sprintf("%s is %s (%s)", id, in.DisplayStatus, in.WaitingReason)
			}
			workers[id] = fmt.Sprint(deref(in.AssignedTo))
		}
		return true, ""
	})
	return workers
}

// TestFleetServesTwoHeads: work submitted to head A gets machines from the
// fleet that join A and run it; once A's work is done and B's arrives, B's
// runs on the machines A gave back: the shard's provider created no new
// machine, and A's credentials for them no longer register anything.
func TestFleetServesTwoHeads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a coordinator, a shard and two heads")
	}
	r := startFleet(t)
	a := r.startHead("a", 100)
	b := r.startHead("b", 100)

	started := time.Now()
	idsA := r.runAll(a, 2, "echo on-a; sleep 2")
	onA := r.waitDone(a, idsA, 90*time.Second)
	t.Logf("A's 2 instances ran on %v, %s after submission", onA, time.Since(started).Round(time.Millisecond))
	created := r.machines()
	if len(created) != 2 {
		t.Fatalf("the shard's provider created %v, want 2 machines", created)
	}
	// A's credentials, read from what each machine was configured with.
	credsA := map[string]provider.Bootstrap{}
	for _, id := range created {
		if bl, ok := r.blobOfMachine(id); ok && bl.Pool == "fa" {
			credsA[id] = bl
		}
	}
	if len(credsA) != 2 {
		t.Fatalf("A's blobs found for %d machines, want 2", len(credsA))
	}

	// A's pool goes idle and gives its machines back; B's work takes them.
	r.waitFor(60*time.Second, "A's pool to give its machines back", func() (bool, string) {
		ws, err := a.Workers(context.Background())
		if err != nil {
			return false, err.Error()
		}
		online := 0
		for _, w := range ws {
			if w.Status == "ONLINE" {
				online++
			}
		}
		return online == 0, fmt.Sprintf("%d workers of A online", online)
	})
	started = time.Now()
	idsB := r.runAll(b, 2, "echo on-b; sleep 1")
	onB := r.waitDone(b, idsB, 90*time.Second)
	t.Logf("B's 2 instances ran on %v, %s after submission", onB, time.Since(started).Round(time.Millisecond))
	if got := r.machines(); strings.Join(got, ",") != strings.Join(created, ",") {
		t.Errorf("the shard's provider has machines %v after B's work, want only A's old %v (no new Create)", got, created)
	}
	for id, bl := range credsA {
		if now, ok := r.blobOfMachine(id); !ok || now.Head == bl.Head {
			t.Errorf("machine %s is not configured into B: blob %+v (found %v)", id, now, ok)
		}
		body, _ := json.Marshal(map[string]any{"worker_id": bl.Machine, "host": "127.0.0.1", "pool": bl.Pool})
		req, _ := http.NewRequest("POST", bl.Head+"/workers", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+bl.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("A's credential of machine %s (worker %s) answered %d, want 401", id, bl.Machine, resp.StatusCode)
		}
	}
}
