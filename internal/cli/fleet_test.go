package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
)

// fakeFleet answers the Fleet API with fixed data and records requests.
type fakeFleet struct {
	fleetv1.UnimplementedFleetServer
	mu    sync.Mutex
	asked []*fleetv1.ShortfallsRequest
	needs []*fleetv1.ClusterCapacityNeeds
}

func (f *fakeFleet) Status(context.Context, *fleetv1.StatusRequest) (*fleetv1.StatusResponse, error) {
	return &fleetv1.StatusResponse{Role: "coordinator",
		Coordinator: &fleetv1.CoordinatorStatus{Id: "a", Leader: true, LeaderId: "a", Term: 42, Clusters: 3},
		Shards: []*fleetv1.ShardStatus{
			{Shard: 1, Live: true, Epoch: 7, Cycle: 12, Clusters: 2, Machines: 10, Configured: 8, Idle: 1, Speculative: 1,
				Address: "127.0.0.1:7401"},
			{Shard: 2, Live: false, ProvisioningPaused: true, PausedReason: "etcd unreachable"},
		}}, nil
}

func (f *fakeFleet) Shortfalls(_ context.Context, req *fleetv1.ShortfallsRequest) (*fleetv1.ShortfallsResponse, error) {
	f.mu.Lock()
	f.asked = append(f.asked, req)
	f.mu.Unlock()
	return &fleetv1.ShortfallsResponse{
		Shortfalls: []*fleetv1.Shortfall{{Shard: 1, Profile: "gpu", Priority: 900, Count: 3, Age: 7, Escalated: true}},
		Directives: []*fleetv1.Directive{{Id: "0001-0001", Kind: "reassign-quota", From: 2, To: 1, Profile: "gpu",
			Count: 3, State: "exported", Moved: 3}},
	}, nil
}

func (f *fakeFleet) SendNeeds(_ context.Context, req *fleetv1.SendNeedsRequest) (*fleetv1.SendNeedsResponse, error) {
	f.mu.Lock()
	f.needs = append(f.needs, req.GetNeeds())
	f.mu.Unlock()
	return &fleetv1.SendNeedsResponse{Shard: 1, ShardAddress: "127.0.0.1:7401", ClusterId: 5, FirstContact: true}, nil
}

func startFakeFleet(t *testing.T) (*fakeFleet, string) {
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
	return f, lis.Addr().String()
}

func TestFleetCommandsOverTheAPI(t *testing.T) {
	f, addr := startFakeFleet(t)
	dir := t.TempDir()
	needs := writeFile(t, dir, "needs.json", `{"cluster": "prod-1", "needs": [{"profile": "gpu", "count": 4, "priority": 1000}]}`)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"status table", []string{"fleet", "status", "--fleet", addr},
			[]string{"coordinator a (leader, term 42)", "s1  ", "true", "127.0.0.1:7401", "paused: etcd unreachable"}},
		{"status json", []string{"fleet", "status", "--fleet", addr, "-o", "json"},
			[]string{`"role": "coordinator"`, `"term": "42"`, `"provisioningPaused": true`}},
		{"shortfalls", []string{"fleet", "shortfalls", "--fleet", addr, "--escalated", "--shard", "1"},
			[]string{"s1     gpu", "900", "0001-0001", "reassign-quota", "exported"}},
		{"needs", []string{"fleet", "needs", "--fleet", addr, "--file", needs},
			[]string{"cluster prod-1 (id 5) → shard s1 at 127.0.0.1:7401 (first contact)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, "", tt.args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.HasSuffix(tt.name, "json") && !json.Valid([]byte(out)) {
				t.Errorf("not JSON:\n%s", out)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.asked) != 1 || !f.asked[0].EscalatedOnly || f.asked[0].Shard != 1 {
		t.Errorf("shortfalls requests: %v", f.asked)
	}
	if len(f.needs) != 1 || f.needs[0].GetCluster() != "prod-1" || f.needs[0].GetNeeds()[0].GetCount() != 4 {
		t.Errorf("needs sent: %v", f.needs)
	}
}

func TestFleetCommandErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "fleet.json", `{"offerings": [], "providers": [], "shards": []}`)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"shard id", []string{"fleet", "shard", "--etcd", "http://127.0.0.1:1"}, ExitUsage, "--shard: must be 1 or more"},
		{"bad config", []string{"fleet", "coordinator", "--config", bad}, ExitUsage, "offerings: at least one offering"},
		{"output", []string{"fleet", "status", "-o", "yaml"}, ExitUsage, "-o: want table or json"},
		{"unreachable", []string{"fleet", "status", "--fleet", "127.0.0.1:1", "--timeout", "200ms"}, ExitError,
			"fleet API at 127.0.0.1:1"},
		{"needs file", []string{"fleet", "needs", "--file", writeFile(t, dir, "n.json", `{"cluster": 3}`)}, ExitUsage,
			"n.json"},
		{"empty needs", []string{"fleet", "needs", "--fleet", "127.0.0.1:1", "--file", writeFile(t, dir, "e.json", "\n")}, ExitUsage,
			"e.json: is empty"},
		{"nan penalty", []string{"fleet", "needs", "--fleet", "127.0.0.1:1", "--file", writeFile(t, dir, "nan.json",
			`{"cluster": "c", "needs": [{"profile": "gpu", "count": 1, "interruption_penalty": "NaN"}]}`)}, ExitUsage,
			"nan.json: needs[0].interruption_penalty: must be a finite non-negative number, got NaN"},
		{"negative count", []string{"fleet", "needs", "--fleet", "127.0.0.1:1", "--file", writeFile(t, dir, "neg.json",
			`{"cluster": "c", "needs": [{"profile": "gpu", "count": -4, "drain_time_ms": "9223372036854775807"}]}`)}, ExitUsage,
			"neg.json: needs[0].count: must not be negative, got -4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, "", tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}

func TestBuildProviders(t *testing.T) {
	g8 := etcdstate.OfferingRecord{Provider: "cloud", Profile: "gpu",
		Offering: capacity.Offering{Type: "g8", PricePerHour: 3, Resources: capacity.Resources{GPUs: 8}}}
	one := etcdstate.OfferingRecord{Provider: "here", Profile: "cpu",
		Offering: capacity.Offering{Type: "local-1cpu", PricePerHour: 1, Resources: capacity.CPU(1000)}}
	conf := etcdstate.Config{Offerings: []etcdstate.OfferingRecord{g8, one},
		Providers: []etcdstate.ProviderSpec{
			{Name: "cloud", Type: "sim", Config: json.RawMessage(`{"boot": "30s", "seed": 3}`)},
			{Name: "here", Type: "local"}}}
	dir := t.TempDir()
	provs, err := buildProviders(conf, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeProviders(provs)
	for name, want := range map[string]string{"cloud": "g8/on-demand", "here": "local-1cpu/on-demand"} {
		offs, err := provs[name].Offerings(context.Background())
		if err != nil || len(offs) != 1 || offs[0].Name() != want {
			t.Errorf("%s sells %v (err %v), want %s", name, offs, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "here")); err != nil {
		t.Errorf("the local provider keeps no state under the data dir: %v", err)
	}
	tests := []struct {
		name string
		spec etcdstate.ProviderSpec
		want string
	}{
		{"unknown type", etcdstate.ProviderSpec{Name: "cloud", Type: "gce"}, `providers[0] (cloud).type: "gce" is not a provider type`},
		{"bad duration", etcdstate.ProviderSpec{Name: "cloud", Type: "sim", Config: json.RawMessage(`{"boot": "soon"}`)},
			"providers[0] (cloud).config"},
		{"unknown field", etcdstate.ProviderSpec{Name: "cloud", Type: "sim", Config: json.RawMessage(`{"bot": "1s"}`)},
			"providers[0] (cloud).config"},
		{"local takes only start_delay", etcdstate.ProviderSpec{Name: "cloud", Type: "local", Config: json.RawMessage(`{"x": 1}`)},
			"providers[0] (cloud).config: the local provider takes only start_delay"},
		{"no offering", etcdstate.ProviderSpec{Name: "other", Type: "sim"}, "providers[0] (other).offerings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildProviders(etcdstate.Config{Offerings: []etcdstate.OfferingRecord{g8},
				Providers: []etcdstate.ProviderSpec{tt.spec}}, t.TempDir(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
