package plugin_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tide-project/tide/api/provider/v1"
	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/sdk/provider"
)

// TestWatchStreamsChanges: Watch sends the pool's snapshot, then each state
// change of a machine, and its disappearance.
func TestWatchStreamsChanges(t *testing.T) {
	c, clk := fakeSim(t)
	client, err := provider.NewClient(t.Context(), serveLoopback(t, c, provider.WithWatchInterval(5*time.Millisecond)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, caps := client.Info(); len(caps) == 0 || caps[0] != provider.CapabilityWatch {
		t.Fatalf("capabilities %v, want watch", caps)
	}
	f := provider.Fence{Controller: "w", Epoch: 1}
	if _, err := client.Create(t.Context(), provider.CreateRequest{Fence: f, Pool: "p", MachineID: "m0", Offering: "m8/z1/on-demand"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	changes := make(chan provider.Change, 64)
	done := make(chan error, 1)
	go func() { done <- client.Watch(ctx, "p", func(ch provider.Change) { changes <- ch }) }()
	want := func(id string, state provider.State, gone bool) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ch := <-changes:
				if ch.Machine.ID == id && ch.Machine.State == state && ch.Gone == gone {
					return
				}
			case <-timeout:
				t.Fatalf("no change %s %s gone=%v within 10s", id, state, gone)
			}
		}
	}
	want("m0", provider.Creating, false) // the snapshot
	if _, err := client.Create(t.Context(), provider.CreateRequest{Fence: f, Pool: "p", MachineID: "m1", Offering: "m8/z1/on-demand"}); err != nil {
		t.Fatal(err)
	}
	want("m1", provider.Creating, false)
	clk.Advance(time.Hour)
	want("m1", provider.Idle, false)
	if _, err := client.Delete(t.Context(), provider.DeleteRequest{Fence: f, Pool: "p", MachineID: "m1"}); err != nil {
		t.Fatal(err)
	}
	want("m1", provider.Deleting, false)
	clk.Advance(time.Hour)
	want("m1", provider.Deleting, true)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch ended with %v after cancel, want nil", err)
	}
}

// FuzzCreateRequest: any bytes decoded as a CreateRequest and served by the
// sim provider behind the gRPC service never panic, and every refusal is
// one of the protocol's status codes.
func FuzzCreateRequest(f *testing.F) {
	seed, _ := proto.Marshal(&pb.CreateRequest{Fence: &pb.Fence{Controller: "c", Epoch: 1}, Pool: "p", MachineId: "m1",
		Offering: "m8/z1/on-demand", Labels: map[string]string{"k": "v"}})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x12, 0x01, '-'})
	cloud, err := plugin.NewSim(nil, time.Hour, 1)
	if err != nil {
		f.Fatal(err)
	}
	srv := provider.NewServer(cloud)
	allowed := map[codes.Code]bool{codes.InvalidArgument: true, codes.NotFound: true, codes.FailedPrecondition: true,
		codes.Aborted: true, codes.ResourceExhausted: true, codes.Unavailable: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pb.CreateRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		ack, err := srv.Create(context.Background(), &req)
		if err != nil {
			if code := status.Code(err); !allowed[code] {
				t.Fatalf("Create(%v) = %s: %v, not a protocol error code", &req, code, err)
			}
			return
		}
		if ack.GetMachineId() != req.GetMachineId() {
			t.Fatalf("ack names %q for %q", ack.GetMachineId(), req.GetMachineId())
		}
	})
}

// badReplies answers List and Create with states the protocol lacks.
type badReplies struct {
	pb.UnimplementedProviderServer
}

func (badReplies) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	return &pb.InfoResponse{Name: "bad", Protocol: &pb.ProtocolVersion{Major: 1}}, nil
}

func (badReplies) List(context.Context, *pb.ListRequest) (*pb.ListResponse, error) {
	return &pb.ListResponse{Machines: []*pb.Machine{{Id: "m0", State: pb.State_STATE_IDLE}, {Id: "m1", State: 42}}}, nil
}

func (badReplies) Create(context.Context, *pb.CreateRequest) (*pb.Ack, error) {
	return &pb.Ack{MachineId: "m1"}, nil
}

// TestBadRepliesNameTheField: a plugin reply that breaks the protocol is an
// error naming the reply's field (DESIGN invariant 6), not a machine in a
// made-up state.
func TestBadRepliesNameTheField(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterProviderServer(g, badReplies{})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := provider.Dial(t.Context(), lis.Addr().String(), provider.DialConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(t.Context(), provider.Filter{}); err == nil || !strings.Contains(err.Error(), "machines[1].state") {
		t.Fatalf("List with an unknown state = %v, want an error naming machines[1].state", err)
	}
	_, err = c.Create(t.Context(), provider.CreateRequest{})
	if e, ok := provider.As[*provider.ReplyError](err); !ok || e.Field != "ack.state" {
		t.Fatalf("Create acked without a state = %v, want a ReplyError on ack.state", err)
	}
}
