package plugin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tide-project/tide/api/provider/v1"
	"github.com/tide-project/tide/sdk/provider"
)

const secToken = "plugin-s3cret-0123456789"

// secPlugin serves the sim provider as a remote plugin with a bearer token
// and short connection timeouts, and returns its address and a client
// connection that sends no credentials of its own.
func secPlugin(t *testing.T, timeout time.Duration) (string, pb.ProviderClient) {
	t.Helper()
	addr := serveRemote(t, provider.RemoteConfig{Token: secToken, HandshakeTimeout: timeout, IdleTimeout: timeout})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return addr, pb.NewProviderClient(conn)
}

func withToken(ctx context.Context, v string) context.Context {
	if v == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", v)
}

// machines lists every machine with the right token, as the test's view of
// what work the plugin did.
func machines(t *testing.T, c pb.ProviderClient) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "Bearer "+secToken), 10*time.Second)
	defer cancel()
	r, err := c.List(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range r.Machines {
		ids = append(ids, m.Id+"="+m.State.String())
	}
	return strings.Join(ids, ",")
}

// waitGoroutinesBack waits (bounded) for the goroutine count to come back
// to base plus slack, and fails with a dump if it does not.
func waitGoroutinesBack(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d after the attacks, %d before:\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond) // polling a count, not timing correctness
	}
}

// TestSecurityPluginCredentials calls every RPC of the plugin protocol on
// a remote plugin that requires a bearer token, with no token, a wrong
// one, the right one without "Bearer ", a prefix of it, and Basic
// credentials: every call is refused with Unauthenticated and the plugin's
// machines are unchanged (a Create made nothing, a Delete deleted nothing).
func TestSecurityPluginCredentials(t *testing.T) {
	_, c := secPlugin(t, 5*time.Second)
	ok := withToken(context.Background(), "Bearer "+secToken)
	offs, err := c.Offerings(ok, &pb.OfferingsRequest{})
	if err != nil || len(offs.Offerings) == 0 {
		t.Fatalf("offerings: %v %v", offs, err)
	}
	o := offs.Offerings[0]
	offering := o.Type + "/" + o.Zone + "/" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(o.Kind.String(), "CAPACITY_KIND_"), "_", "-"))
	fence := &pb.Fence{Controller: "c", Epoch: 1, Seq: 1}
	if _, err := c.Create(ok, &pb.CreateRequest{Fence: fence, Pool: "p", MachineId: "victim", Offering: offering,
		IdempotencyKey: "victim/idle"}); err != nil {
		t.Fatal(err)
	}
	// The victim settles first: a Creating machine becomes Idle by itself,
	// which the check below would take for a refused call's doing.
	before := machines(t, c)
	for deadline := time.Now().Add(10 * time.Second); before != "victim=STATE_IDLE" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		before = machines(t, c)
	}
	base := runtime.NumGoroutine()
	fence.Seq = 2
	calls := map[string]func(ctx context.Context) error{
		"Info":      func(ctx context.Context) error { _, err := c.Info(ctx, &pb.InfoRequest{}); return err },
		"Offerings": func(ctx context.Context) error { _, err := c.Offerings(ctx, &pb.OfferingsRequest{}); return err },
		"Create": func(ctx context.Context) error {
			_, err := c.Create(ctx, &pb.CreateRequest{Fence: fence, Pool: "p", MachineId: "intruder", Offering: offering})
			return err
		},
		"Configure": func(ctx context.Context) error {
			_, err := c.Configure(ctx, &pb.ConfigureRequest{Fence: fence, Pool: "p", MachineId: "victim", Cluster: "x"})
			return err
		},
		"Drain": func(ctx context.Context) error {
			_, err := c.Drain(ctx, &pb.DrainRequest{Fence: fence, Pool: "p", MachineId: "victim"})
			return err
		},
		"Delete": func(ctx context.Context) error {
			_, err := c.Delete(ctx, &pb.DeleteRequest{Fence: fence, Pool: "p", MachineId: "victim"})
			return err
		},
		"Get":  func(ctx context.Context) error { _, err := c.Get(ctx, &pb.GetRequest{MachineId: "victim"}); return err },
		"List": func(ctx context.Context) error { _, err := c.List(ctx, &pb.ListRequest{}); return err },
		"Watch": func(ctx context.Context) error {
			s, err := c.Watch(ctx, &pb.WatchRequest{Pool: "p"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
	creds := map[string]string{"none": "", "wrong": "Bearer nope", "no Bearer": secToken,
		"prefix": "Bearer " + secToken[:len(secToken)-1], "basic": "Basic " + secToken}
	tried := 0
	for name, cred := range creds {
		for rpc, call := range calls {
			ctx, cancel := context.WithTimeout(withToken(context.Background(), cred), 10*time.Second)
			err := call(ctx)
			cancel()
			tried++
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s with %s credentials: %v, want Unauthenticated", rpc, name, err)
			}
		}
	}
	if after := machines(t, c); after != before {
		t.Errorf("%d refused calls changed the plugin's machines: %s, then %s", tried, before, after)
	}
	waitGoroutinesBack(t, base)
	t.Logf("%d calls without the right token refused, machines unchanged (%s)", tried, before)
}

// TestSecurityPluginOversizedMessages: a request over the server's 4 MiB
// limit is refused (ResourceExhausted), with or without the token, and
// does nothing.
func TestSecurityPluginOversizedMessages(t *testing.T) {
	_, c := secPlugin(t, 5*time.Second)
	before := machines(t, c)
	base := runtime.NumGoroutine()
	big := strings.Repeat("a", 4<<20)
	for name, cred := range map[string]string{"token": "Bearer " + secToken, "none": ""} {
		ctx, cancel := context.WithTimeout(withToken(context.Background(), cred), 20*time.Second)
		_, err := c.Create(ctx, &pb.CreateRequest{Fence: &pb.Fence{Controller: "c", Epoch: 1, Seq: 1}, Pool: "p",
			MachineId: "big", Offering: "x", Labels: map[string]string{"k": big}})
		cancel()
		if code := status.Code(err); code != codes.ResourceExhausted && !(cred == "" && code == codes.Unauthenticated) {
			t.Errorf("a 4 MiB Create with %s: %v, want ResourceExhausted", name, err)
		}
		ctx, cancel = context.WithTimeout(withToken(context.Background(), cred), 20*time.Second)
		_, err = c.Configure(ctx, &pb.ConfigureRequest{Fence: &pb.Fence{Controller: "c", Epoch: 1, Seq: 2}, Pool: "p",
			MachineId: "big", Bootstrap: []byte(big)})
		cancel()
		if code := status.Code(err); code != codes.ResourceExhausted && !(cred == "" && code == codes.Unauthenticated) {
			t.Errorf("a 4 MiB Configure with %s: %v, want ResourceExhausted", name, err)
		}
	}
	if after := machines(t, c); after != before {
		t.Errorf("oversized calls changed the plugin's machines: %s, then %s", before, after)
	}
	waitGoroutinesBack(t, base)
}

// TestSecurityPluginStalledClients: connections that stall before the
// HTTP/2 preface (nothing sent, half a preface), after it, or inside a
// call they never finish sending without the token, are closed within the
// plugin's handshake or idle timeout (400 ms here; 10 s and 5 min by
// default), 20 of each at once, and the goroutine count comes back.
// Before RemoteConfig.HandshakeTimeout and IdleTimeout, gRPC's defaults
// held a silent connection for 120 s and a connection that answered
// keepalive pings for ever; before the token was checked when a call's
// headers arrive (a tap handle), an unauthenticated call whose message
// never ended held a goroutine until its connection died.
func TestSecurityPluginStalledClients(t *testing.T) {
	const timeout = 400 * time.Millisecond
	addr, c := secPlugin(t, timeout)
	before := machines(t, c)
	base := runtime.NumGoroutine()
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}
	// HEADERS for stream 1 (END_HEADERS): POST /tide.provider.v1.Provider/Create
	// over http, content-type application/grpc, te: trailers, HPACK
	// literals without indexing; then a DATA frame holding 5 of the
	// message's announced 100 bytes.
	var hb []byte
	lit := func(name, value string) {
		hb = append(hb, 0x00, byte(len(name)))
		hb = append(hb, name...)
		hb = append(hb, byte(len(value)))
		hb = append(hb, value...)
	}
	lit(":method", "POST")
	lit(":scheme", "http")
	lit(":path", "/tide.provider.v1.Provider/Create")
	lit(":authority", "x")
	lit("content-type", "application/grpc")
	lit("te", "trailers")
	frame := func(typ, flags byte, stream uint32, payload []byte) []byte {
		n := len(payload)
		f := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
		return append(f, payload...)
	}
	stalledCall := append(append([]byte(preface), settings...), frame(1, 0x4, 1, hb)...)
	stalledCall = append(stalledCall, frame(0, 0, 1, []byte{0, 0, 0, 0, 100})...)
	attacks := []struct {
		name string
		send []byte
	}{
		{"a connection that sends nothing", nil},
		{"half a preface", []byte(preface[:10])},
		{"the preface, then nothing", append([]byte(preface), settings...)},
		{"an unauthenticated call whose message never ends", stalledCall},
	}
	for _, a := range attacks {
		var conns []net.Conn
		for range 20 {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			if _, err := conn.Write(a.send); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
		}
		began := time.Now()
		for _, conn := range conns {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: the plugin held the connection for 30 s", a.name)
			}
		}
		took := time.Since(began)
		t.Logf("%s ×20: all closed after %v", a.name, took.Round(time.Millisecond))
		if took > 10*timeout+5*time.Second {
			t.Errorf("%s: held %v, timeout %v", a.name, took, timeout)
		}
	}
	if after := machines(t, c); after != before {
		t.Errorf("the connections changed the plugin's machines: %s, then %s", before, after)
	}
	waitGoroutinesBack(t, base)
}
