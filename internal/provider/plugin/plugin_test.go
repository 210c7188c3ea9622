package plugin_test

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tide-project/tide/api/provider/v1"
	"github.com/tide-project/tide/internal/clock"

	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeSim is the sim provider on a fake clock with the plugin catalog.
func fakeSim(t *testing.T) (*sim.Cloud, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	var offs []sim.Offering
	for _, o := range plugin.SimOfferings() {
		offs = append(offs, sim.Offering{Offering: o, Boot: sim.Fixed(30 * time.Second), Configure: sim.Fixed(5 * time.Second),
			Drain: sim.Fixed(5 * time.Second), Delete: sim.Fixed(10 * time.Second)})
	}
	c, err := sim.New(sim.Config{Offerings: offs}, clk, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

// serveLoopback serves p on a loopback port and returns a client conn.
func serveLoopback(t testing.TB, p provider.Provider, opts ...provider.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	provider.Register(g, p, opts...)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestConformanceOverGRPC: the sim provider served over gRPC on loopback
// and called through the SDK client keeps the contract, the provisioning
// ledger included (fake clock: deterministic).
func TestConformanceOverGRPC(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		c, clk := fakeSim(t)
		client, err := provider.NewClient(t.Context(), serveLoopback(t, c), 0)
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{Provider: client, Offering: "m8/z1/on-demand",
			Settle: func() { clk.Advance(time.Hour) }, Creates: c.Provisions}
	})
}

// startPlugin starts this test binary as a subprocess plugin in mode.
func startPlugin(t *testing.T, mode string, env ...string) *plugin.Subprocess {
	t.Helper()
	return startPluginB(t, mode, env...)
}

// startPluginB is startPlugin for tests and benchmarks.
func startPluginB(t testing.TB, mode string, env ...string) *plugin.Subprocess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := plugin.StartSubprocess(plugin.SubprocessConfig{Command: []string{exe},
		Env: append([]string{"TIDE_TEST_PLUGIN=" + mode}, env...), MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func failures(rs []providertest.Result) []string {
	var out []string
	for _, r := range rs {
		if !r.Passed {
			out = append(out, r.Name+": "+strings.Join(r.Messages, "; "))
		}
	}
	return out
}

// TestConformanceSubprocessPlugin: the sim provider as a go-plugin
// subprocess (real clock) passes the whole suite through Check, the runner
// of `tide provider test`.
func TestConformanceSubprocessPlugin(t *testing.T) {
	conforms(t, startPlugin(t, "sim"))
}

// conforms runs the whole conformance suite on p (real clock) and fails the
// test on any failure.
func conforms(t *testing.T, p provider.Provider) {
	t.Helper()
	rs, err := plugin.Conform(t.Context(), p, "", 20*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 16 {
		t.Fatalf("ran %d subtests, want the whole suite", len(rs))
	}
	if f := failures(rs); len(f) > 0 {
		t.Fatalf("conformance failures:\n%s", strings.Join(f, "\n"))
	}
}

// TestConformanceFailsBrokenPlugins: plugins that break the contract fail
// the suite, in the subtest that names what they break.
func TestConformanceFailsBrokenPlugins(t *testing.T) {
	tests := []struct{ mode, failing string }{
		{"broken-replay", "ReplayedCreateIsNoOp"},
		{"broken-fence", "StaleEpochIsRefused"},
		{"broken-code", "GetUnknownIsNotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			s := startPlugin(t, tt.mode)
			rs, err := plugin.Conform(t.Context(), s, "", 20*time.Second, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			f := failures(rs)
			if !slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, tt.failing+":") }) {
				t.Fatalf("%s passed %s; failures: %v", tt.mode, tt.failing, f)
			}
			if providertest.Passed(rs) {
				t.Fatal("Passed reports a broken plugin as conformant")
			}
		})
	}
}

// versionServer answers Info with another protocol major.
type versionServer struct {
	pb.UnimplementedProviderServer
	major uint32
}

func (v versionServer) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	return &pb.InfoResponse{Name: "future", Version: "9.0", Protocol: &pb.ProtocolVersion{Major: v.major}}, nil
}

// TestHandshakeRefusesUnknownMajor: a plugin speaking protocol v2 is refused
// with an error that says so.
func TestHandshakeRefusesUnknownMajor(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterProviderServer(g, versionServer{major: 2})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	_, err = provider.Dial(t.Context(), lis.Addr().String(), provider.DialConfig{})
	if err == nil || !strings.Contains(err.Error(), "protocol v2.0") || !strings.Contains(err.Error(), "v1") {
		t.Fatalf("Dial of a v2 plugin = %v, want a refusal naming both versions", err)
	}
}

// TestTypedErrorsCrossTheWire: every typed error a plugin returns comes back
// as the same internal type with its fields, so errors.As works.
func TestTypedErrorsCrossTheWire(t *testing.T) {
	f1 := provider.Fence{Controller: "a", Epoch: 1, Seq: 3}
	f2 := provider.Fence{Controller: "b", Epoch: 2, Seq: 9}
	tests := []struct {
		err  error
		kind string
	}{
		{provider.NewInvalid("fence.epoch", "must be 1 or more"), provider.KindInvalid},
		{provider.NewNotFound("m1"), provider.KindNotFound},
		{provider.NewConflict("m1", provider.Creating, "not idle"), provider.KindConflict},
		{provider.NewConflict("m1", "", "deleted id"), provider.KindConflict},
		{provider.NewStaleFence("p", f1, f2), provider.KindStaleFence},
		{provider.NewQuotaExceeded("m8/z1/on-demand", 5, nil), provider.KindQuotaExceeded},
		{provider.NewQuotaExceeded("", 50, nil), provider.KindQuotaExceeded},
		{provider.NewInsufficientCapacity("m8/z1/spot", nil), provider.KindInsufficientCapacity},
		{provider.NewTransient(nil, 2*time.Second), provider.KindTransient},
	}
	for _, tt := range tests {
		client, err := provider.NewClient(t.Context(), serveLoopback(t, failing{err: tt.err}), 0)
		if err != nil {
			t.Fatal(err)
		}
		_, got := client.Get(t.Context(), "m1")
		if provider.Kind(got) != tt.kind {
			t.Errorf("%v came back as %v (kind %s), want kind %s", tt.err, got, provider.Kind(got), tt.kind)
			continue
		}
		if got.Error() != tt.err.Error() {
			t.Errorf("%v came back as %q: fields lost", tt.err, got.Error())
		}
	}
}

// failing is a provider whose Get fails with err.
type failing struct {
	provider.Provider
	err error
}

func (f failing) Get(context.Context, string) (provider.Machine, error) {
	return provider.Machine{}, f.err
}

// createRecorder keeps the last CreateRequest it was given.
type createRecorder struct {
	provider.Provider
	got provider.CreateRequest
}

func (r *createRecorder) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	r.got = req
	return r.Provider.Create(ctx, req)
}

// TestCreateCarriesBootstrapOverTheWire: every field of the one
// CreateRequest reaches the plugin, the boot blob of a machine that joins
// from its user data included.
func TestCreateCarriesBootstrapOverTheWire(t *testing.T) {
	c, _ := fakeSim(t)
	rec := &createRecorder{Provider: c}
	client, err := provider.NewClient(t.Context(), serveLoopback(t, rec), 0)
	if err != nil {
		t.Fatal(err)
	}
	req := provider.CreateRequest{Fence: provider.Fence{Controller: "c", Epoch: 1, Seq: 2}, Pool: "p", MachineID: "p-1",
		Offering: "m8/z1/on-demand", Labels: map[string]string{"k": "v"}, Bootstrap: []byte(`{"head":"https://h"}`)}
	if _, err := client.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.got, req) {
		t.Fatalf("the plugin got %+v, want %+v", rec.got, req)
	}
}
