package head

import (
	"context"
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

func cores(n float64) capacity.Resources {
	return capacity.Resources{MilliCPU: int64(n * 1000), Memory: 512 << 20}
}

// localPool is tide up's default pool on a 4-CPU machine: 1-CPU nodes of
// 1 GiB, from 0 up to 4.
func localPool() PoolCapacity {
	return PoolCapacity{Name: "local", Managed: true, Max: 4, Offerings: []capacity.Offering{
		{Type: "local-1cpu", Resources: capacity.Resources{MilliCPU: 1000, Memory: 1 << 30}}}}
}

func TestWaitingReason(t *testing.T) {
	gpuPool := PoolCapacity{Name: "gpu", Managed: true, Max: 2, Selector: map[string]string{"accel": "gpu"},
		Offerings: []capacity.Offering{{Type: "g8", Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}}}}
	busy := localPool()
	busy.Ready, busy.Pending = 1, 2
	full := localPool()
	full.Ready = 4
	running := localPool()
	running.Ready = 2
	joined := PoolCapacity{Name: "batch", Workers: []WorkerCapacity{{Name: "w1", Resources: capacity.Resources{MilliCPU: 2000, Memory: 4 << 30}}}}
	tests := []struct {
		name  string
		req   WaitRequest
		pools []PoolCapacity
		want  string
		never bool
	}{
		{"cpu beyond every offering", WaitRequest{Requests: cores(4)}, []PoolCapacity{localPool()},
			"no pool can fit cpu 4: largest offering local-1cpu has 1", true},
		{"memory beyond every offering", WaitRequest{Requests: capacity.Resources{MilliCPU: 1000, Memory: 100000 << 20}},
			[]PoolCapacity{localPool()}, "no pool can fit memory 100000 MB: largest offering local-1cpu has 1024 MB", true},
		{"a gpu from a pool of none", WaitRequest{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}},
			[]PoolCapacity{localPool()}, "no pool can fit gpus 1: largest offering local-1cpu has 0", true},
		{"named pool too small", WaitRequest{Pool: "local", Requests: cores(2)}, []PoolCapacity{localPool(), gpuPool},
			"pool local cannot fit cpu 2: largest offering local-1cpu has 1", true},
		{"no such pool", WaitRequest{Pool: "nosuchpool", Requests: cores(1)}, []PoolCapacity{localPool()},
			"pool nosuchpool does not exist", true},
		{"selector excludes the pool that would fit", WaitRequest{Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}},
			[]PoolCapacity{localPool(), gpuPool}, "no pool can fit gpus 1: largest offering local-1cpu has 0", true},
		{"selected by its labels", WaitRequest{Pool: "gpu", Labels: map[string]string{"accel": "gpu"},
			Requests: capacity.Resources{MilliCPU: 1000, GPUs: 1}}, []PoolCapacity{localPool(), gpuPool},
			"waiting for pool gpu to scale up", false},
		{"no selector matches", WaitRequest{Labels: map[string]string{"team": "x"}, Requests: cores(1)},
			[]PoolCapacity{gpuPool}, "no pool selects labels team=x", true},
		{"every resource fits somewhere, never all at once", WaitRequest{Requests: capacity.Resources{MilliCPU: 2000, Memory: 2 << 30}},
			[]PoolCapacity{{Name: "mix", Managed: true, Max: 2, Offerings: []capacity.Offering{
				{Type: "cpu2", Resources: capacity.Resources{MilliCPU: 2000, Memory: 1 << 30}},
				{Type: "mem2", Resources: capacity.Resources{MilliCPU: 1000, Memory: 2 << 30}}}}},
			"no pool can fit cpu 2, memory 2048 MB: no single offering or worker has all of it", true},
		{"nodes on their way", WaitRequest{Pool: "local", Requests: cores(1), Scheduler: `no worker in pool "local"`},
			[]PoolCapacity{busy}, "waiting for capacity on its way: pool local has 2 nodes starting", false},
		{"one node on its way", WaitRequest{Pool: "local", Requests: cores(1)},
			[]PoolCapacity{{Name: "local", Managed: true, Max: 4, Pending: 1, Offerings: localPool().Offerings}},
			"waiting for capacity on its way: pool local has 1 node starting", false},
		{"pool at its maximum", WaitRequest{Pool: "local", Requests: cores(1), Scheduler: "insufficient free resources"},
			[]PoolCapacity{full}, "waiting for room: pool local is at its maximum of 4 nodes", false},
		{"scale-up not decided yet", WaitRequest{Pool: "local", Requests: cores(1), Scheduler: "insufficient free resources"},
			[]PoolCapacity{running}, "waiting for pool local to scale up", false},
		{"workers only: too small", WaitRequest{Pool: "batch", Requests: cores(4)}, []PoolCapacity{joined},
			"pool batch cannot fit cpu 4: largest worker w1 has 2", true},
		{"workers only: busy", WaitRequest{Pool: "batch", Requests: cores(1), Scheduler: "insufficient free resources"},
			[]PoolCapacity{joined}, "insufficient free resources", false},
		{"default pool of workers only: too small", WaitRequest{Requests: cores(4), Scheduler: "needs cpu=4"},
			[]PoolCapacity{{Name: "", Workers: []WorkerCapacity{{Name: "w1", Resources: cores(2)}}}},
			"no pool can fit cpu 4: largest worker w1 has 2", true},
		{"nothing known yet", WaitRequest{Pool: "later", Requests: cores(1), Scheduler: `no worker in pool "later"`},
			nil, `no worker in pool "later"`, false},
		{"bound to one worker", WaitRequest{Requests: cores(64), Targeted: true, Scheduler: "target worker w9 is not registered"},
			[]PoolCapacity{localPool()}, "target worker w9 is not registered", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, never := WaitingReason(tt.req, tt.pools)
			if got != tt.want || never != tt.never {
				t.Errorf("got %q (never %v), want %q (never %v)", got, never, tt.want, tt.never)
			}
		})
	}
}

// TestWaitingWorkSaysWhy is issue 17's "waiting work says why" through the
// head: with tide up's default pool, an instance no pool can ever fit
// carries its reason in GET /instances/{id} and GET /instances (only the
// waiting_reason field is added to PyLet's shape) and gets one event; one
// that fits waits for the pool to scale up; --pool naming no pool is refused
// at submit.
func TestWaitingWorkSaysWhy(t *testing.T) {
	e := newEnv(t, nil)
	lp := localPool()
	e.h.SetPoolStatus(func() []PoolStatus {
		return []PoolStatus{{Name: "local", Provider: "local", Policy: "tide", Nodes: capacity.Elastic(0, lp.Max),
			Offerings: lp.Offerings}}
	})
	big := e.submit(obj{"command": "x", "pool": "local", "resource_requirements": obj{"cpu_cores": 4}})
	small := e.submit(obj{"command": "x", "pool": "local", "resource_requirements": obj{"cpu_cores": 1}})
	var out obj
	if code := e.do("POST", "/instances", obj{"command": "x", "pool": "nosuchpool"}, &out); code != 400 ||
		!strings.Contains(out["detail"].(string), `pool "nosuchpool" does not exist; pools: local`) {
		t.Fatalf("submit to no pool: %d %v", code, out)
	}
	e.schedule()
	e.schedule() // a second pass records no second event

	want := "pool local cannot fit cpu 4: largest offering local-1cpu has 1"
	if in := e.instance(big); in.WaitingReason != want {
		t.Fatalf("waiting_reason %q, want %q", in.WaitingReason, want)
	}
	var list []httpapi.InstanceJSON
	if code := e.do("GET", "/instances", nil, &list); code != 200 || len(list) != 2 {
		t.Fatalf("list: %d %d", code, len(list))
	}
	for _, in := range list {
		want := map[string]string{big: want, small: "waiting for pool local to scale up"}[in.InstanceID]
		if in.WaitingReason != want {
			t.Errorf("%s: waiting_reason %q, want %q", in.InstanceID, in.WaitingReason, want)
		}
	}
	evs, err := e.h.Events(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Reason == "unschedulable" {
			n++
			if ev.Message != "instance "+big+": "+want || ev.Pool != "local" || ev.Type != "Warning" {
				t.Errorf("event %+v", ev)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d unschedulable events, want 1: %+v", n, evs)
	}
	// A finished instance has no waiting reason; the field is then absent.
	e.cancel(big)
	var raw obj
	e.do("GET", "/instances/"+big, nil, &raw)
	if _, ok := raw["waiting_reason"]; ok {
		t.Fatalf("waiting_reason on a cancelled instance: %v", raw["waiting_reason"])
	}
}

// TestPoolCountsAreConsistent: `tide pools` counted a node whose worker had
// joined as PENDING (its provider had not said so yet), and a draining node
// as READY and DRAINING at once (the controller's current set holds
// draining nodes). Counts now come from the merged nodes, one state each,
// the state `tide nodes` shows.
func TestPoolCountsAreConsistent(t *testing.T) {
	e := newEnv(t, nil)
	e.registerIn("local-0", "local")
	e.registerIn("local-1", "local")
	e.h.SetPoolStatus(func() []PoolStatus {
		return []PoolStatus{{Name: "local", Provider: "local", Policy: "tide", Nodes: capacity.Elastic(0, 4), Desired: 1,
			Ready: 2, Pending: 1, Draining: 1, // as the controller counts: draining inside ready
			Machines: []MachineStatus{
				{Ordinal: 0, MachineID: "local-0", State: NodePending}, // joined before the provider said so
				{Ordinal: 1, MachineID: "local-1", State: NodeDraining},
				{Ordinal: 2, MachineID: "local-2", State: NodePending}, // not joined
			}}}
	})
	var pools []httpapi.PoolJSON
	if code := e.do("GET", "/pools", nil, &pools); code != 200 || len(pools) != 1 {
		t.Fatalf("GET /pools: %d %+v", code, pools)
	}
	if p := pools[0]; p.Ready != 1 || p.Pending != 1 || p.Draining != 1 {
		t.Fatalf("ready %d pending %d draining %d, want 1 1 1", p.Ready, p.Pending, p.Draining)
	}
	var nodes []httpapi.NodeJSON
	e.do("GET", "/nodes", nil, &nodes)
	if len(nodes) != 3 || nodes[0].State != NodeReady || nodes[1].State != NodeDraining || nodes[2].State != NodePending {
		t.Fatalf("nodes %+v", nodes)
	}
}
