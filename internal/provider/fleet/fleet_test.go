package fleet

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/sdk/provider"
)

// fakeFleet is a Fleet API whose answers the test scripts: the machines it
// lists for the cluster and the requests it makes. It records every needs
// message.
type fakeFleet struct {
	fleetv1.UnimplementedFleetServer
	mu       sync.Mutex
	got      []*fleetv1.ClusterCapacityNeeds
	machines []*fleetv1.ClusterMachine
	requests []*fleetv1.OperatorRequest
	down     bool
	unlisted bool // answer as a shard that has not listed the cluster's machines yet
}

func (f *fakeFleet) SendNeeds(_ context.Context, r *fleetv1.SendNeedsRequest) (*fleetv1.SendNeedsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, context.DeadlineExceeded
	}
	f.got = append(f.got, r.GetNeeds())
	return &fleetv1.SendNeedsResponse{Shard: 1, Machines: f.machines, Requests: f.requests, MachinesListed: !f.unlisted}, nil
}

func (f *fakeFleet) script(ms []*fleetv1.ClusterMachine, rs []*fleetv1.OperatorRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machines, f.requests = ms, rs
}

func (f *fakeFleet) last() *fleetv1.ClusterCapacityNeeds {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) == 0 {
		return nil
	}
	return f.got[len(f.got)-1]
}

// recorder is the cluster side: it mints blobs and records preemptions.
type recorder struct {
	mu        sync.Mutex
	preempted []string
}

func (r *recorder) Blob(_ context.Context, pool, machine, _ string) ([]byte, error) {
	return []byte("blob-for-" + pool + "/" + machine), nil
}

func (r *recorder) Preempt(_ context.Context, _, machine, _ string, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.preempted = append(r.preempted, machine)
	return nil
}

type rig struct {
	t     *testing.T
	fleet *fakeFleet
	addr  string
	dir   string
	clk   *clock.Fake
	join  *recorder
	p     *Provider
}

func newRig(t *testing.T) *rig {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFleet{}
	g := grpc.NewServer()
	fleetv1.RegisterFleetServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	r := &rig{t: t, fleet: f, addr: lis.Addr().String(), dir: t.TempDir(), clk: clock.NewFake(time.Unix(1000, 0)),
		join: &recorder{}}
	r.open()
	return r
}

func (r *rig) open() {
	r.t.Helper()
	p, err := New(Config{Coordinator: r.addr, Cluster: "a", Pool: "gpu", Priority: 7, StateDir: r.dir,
		Offerings: []capacity.Offering{{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 3,
			Resources: capacity.Resources{GPUs: 8}}},
		Period: time.Hour, Joiner: r.join, Clock: r.clk})
	if err != nil {
		r.t.Fatal(err)
	}
	r.p = p
	r.t.Cleanup(func() { p.Close() })
}

// sync makes the provider send its needs now and waits for the send.
func (r *rig) sync() {
	r.t.Helper()
	r.fleet.mu.Lock()
	n := len(r.fleet.got)
	r.fleet.mu.Unlock()
	r.p.wake()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.fleet.mu.Lock()
		sent := len(r.fleet.got) > n
		r.fleet.mu.Unlock()
		if sent {
			// One more round trip: the answer to that send has been handled.
			time.Sleep(20 * time.Millisecond)
			r.p.mu.Lock()
			r.p.mu.Unlock()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatal("the provider sent no needs")
}

func (r *rig) state(id string) provider.State {
	r.t.Helper()
	m, err := r.p.Get(context.Background(), id)
	if provider.IsNotFound(err) {
		return "gone"
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return m.State
}

var fence1 = provider.Fence{Controller: "c", Epoch: 1, Seq: 1}

// claimBound creates claim id and has the shard ask for machine's blob.
func (r *rig) claimBound(id, machine string) {
	r.t.Helper()
	if _, err := r.p.Create(context.Background(), provider.CreateRequest{Fence: fence1, Pool: "gpu", MachineID: id,
		Offering: "g8/on-demand"}); err != nil {
		r.t.Fatal(err)
	}
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: machine, Profile: "g8", State: "configuring"}},
		[]*fleetv1.OperatorRequest{{Kind: "bootstrap", Machine: machine, Profile: "g8"}})
	r.sync()
}

func TestClaimJoinLeave(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, id := range []string{"gpu-0-1", "gpu-1-2"} {
		if _, err := r.p.Create(ctx, provider.CreateRequest{Fence: fence1, Pool: "gpu", MachineID: id, Offering: "g8/on-demand"}); err != nil {
			t.Fatal(err)
		}
	}
	r.sync()
	n := r.fleet.last()
	if !n.GetOperator() || len(n.GetNeeds()) != 1 || n.GetNeeds()[0].GetCount() != 2 || n.GetNeeds()[0].GetPriority() != 7 ||
		n.GetNeeds()[0].GetProfile() != "g8" {
		t.Fatalf("needs = %v, want 2 of g8 at priority 7 from an operator", n)
	}
	if got := r.state("gpu-0-1"); got != provider.Creating {
		t.Fatalf("an unbound claim is %s, want creating", got)
	}

	// The shard asks for F1's blob: the oldest claim takes it.
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "configuring"}},
		[]*fleetv1.OperatorRequest{{Kind: "bootstrap", Machine: "f1", Profile: "g8"}})
	r.sync()
	r.sync()
	n = r.fleet.last()
	if len(n.GetBootstraps()) != 1 || string(n.GetBootstraps()[0].GetBlob()) != "blob-for-gpu/gpu-0-1" {
		t.Fatalf("bootstraps = %v, want gpu-0-1's blob for f1", n.GetBootstraps())
	}
	if got := r.state("gpu-0-1"); got != provider.Configuring {
		t.Fatalf("a bound claim is %s, want configuring", got)
	}
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "configured"}}, nil)
	r.sync()
	if got := r.state("gpu-0-1"); got != provider.Configured {
		t.Fatalf("a claim whose machine is configured is %s", got)
	}
	if m, _ := r.p.Get(ctx, "gpu-0-1"); m.Host != "f1" || m.Cluster != "a" {
		t.Fatalf("machine = %+v, want host f1 in cluster a", m)
	}

	// A request for a machine no claim waits for is refused.
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "configured"}},
		[]*fleetv1.OperatorRequest{{Kind: "bootstrap", Machine: "f9", Profile: "cpu"}})
	r.sync()
	r.sync()
	if b := r.fleet.last().GetBootstraps(); len(b) != 1 || b[0].GetError() == "" {
		t.Fatalf("bootstraps = %v, want f9 refused", b)
	}

	// Drain gives f1 back: the need drops and f1 is released.
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "configured"}}, nil)
	if _, err := r.p.Drain(ctx, provider.DrainRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-0-1"}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	n = r.fleet.last()
	if n.GetNeeds()[0].GetCount() != 1 || !slices.Equal(n.GetRelease(), []string{"f1"}) {
		t.Fatalf("needs after a drain = %v, want 1 needed and f1 released", n)
	}
	if got := r.state("gpu-0-1"); got != provider.Draining {
		t.Fatalf("a claim giving its machine back is %s", got)
	}
	r.fleet.script(nil, nil) // f1 has left the cluster
	r.sync()
	if got := r.state("gpu-0-1"); got != provider.Idle {
		t.Fatalf("a claim whose machine left is %s, want idle", got)
	}
	if _, err := r.p.Delete(ctx, provider.DeleteRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-0-1"}); !provider.IsNotFound(err) {
		t.Fatalf("delete of an unbound claim: %v, want NotFound", err)
	}
	if _, err := r.p.Create(ctx, provider.CreateRequest{Fence: fence1, Pool: "gpu", MachineID: "gpu-0-1", Offering: "g8/on-demand"}); !provider.IsConflict(err) {
		t.Fatalf("create of a deleted id: %v, want Conflict", err)
	}
}

func TestUnknownMachineReleasedAndClaimsSurviveRestart(t *testing.T) {
	r := newRig(t)
	r.claimBound("gpu-0-1", "f1")
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "configured"},
		{Machine: "stray", Profile: "g8", State: "configured"}}, nil)
	r.sync()
	r.sync()
	if rel := r.fleet.last().GetRelease(); !slices.Equal(rel, []string{"stray"}) {
		t.Fatalf("release = %v, want the machine no claim holds", rel)
	}
	// A shard that has just restarted has not listed the cluster's machines
	// yet: its empty list changes nothing.
	r.fleet.mu.Lock()
	r.fleet.unlisted, r.fleet.machines = true, nil
	r.fleet.mu.Unlock()
	r.sync()
	if got := r.state("gpu-0-1"); got != provider.Configured {
		t.Fatalf("after an answer with no machine listed the claim is %s, want configured", got)
	}
	// A restart (the fleet down meanwhile) keeps the joined claim.
	r.fleet.mu.Lock()
	r.fleet.down = true
	r.fleet.mu.Unlock()
	r.p.Close()
	r.open()
	if got := r.state("gpu-0-1"); got != provider.Configured {
		t.Fatalf("after a restart with the fleet down the claim is %s, want configured", got)
	}
	if st := r.p.Status(); st.Cluster != "a" {
		t.Fatalf("status = %+v", st)
	}
}

func TestPreemptionTellsTheCluster(t *testing.T) {
	r := newRig(t)
	r.claimBound("gpu-0-1", "f1")
	r.fleet.script([]*fleetv1.ClusterMachine{{Machine: "f1", Profile: "g8", State: "draining"}},
		[]*fleetv1.OperatorRequest{{Kind: "cordon", Machine: "f1", GraceMs: 10000, Reason: "preempted for b"}})
	r.sync()
	r.join.mu.Lock()
	got := slices.Clone(r.join.preempted)
	r.join.mu.Unlock()
	if !slices.Equal(got, []string{"gpu-0-1"}) {
		t.Fatalf("the cluster was told of preemptions %v, want gpu-0-1", got)
	}
	r.sync()
	if c := r.fleet.last().GetNeeds()[0].GetCount(); c != 0 {
		t.Fatalf("a preempted claim still counts in the needs (%d)", c)
	}
	r.fleet.script(nil, nil) // drained away after the grace
	r.sync()
	if got := r.state("gpu-0-1"); got != "gone" {
		t.Fatalf("a claim whose machine the fleet took is %s, want gone", got)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := New(Config{})
	for _, want := range []string{"coordinator:", "cluster:", "pool:", "state_dir:", "joiner:", "offerings:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(Config{}) = %v, want an error naming %s", err, want)
		}
	}
}
