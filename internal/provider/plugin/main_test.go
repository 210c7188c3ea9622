package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/plugin"
	"github.com/tide-project/tide/sdk/provider"
)

// TestMain doubles as the plugin processes the tests start: with
// TIDE_TEST_PLUGIN set, this test binary serves a provider as a go-plugin
// plugin instead of running tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("TIDE_TEST_PLUGIN"); mode != "" {
		servePlugin(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pluginLatency is the sim plugin's transition latency: long enough that
// the suite sees machines Creating, short enough to settle quickly.
const pluginLatency = 200 * time.Millisecond

func servePlugin(mode string) {
	if mode == "proxy" {
		// A plugin that fronts a cloud in another process, as real cloud
		// plugins do: killing it loses nothing.
		c, err := provider.Dial(context.Background(), os.Getenv("TIDE_TEST_CLOUD"), provider.DialConfig{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		provider.Serve(c, provider.WithInfo(provider.Info{Name: "proxy", Version: "test"}))
		return
	}
	latency := pluginLatency
	if v := os.Getenv("TIDE_TEST_SIM_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		latency = d
	}
	cloud, err := plugin.NewSim(nil, latency, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var p provider.Provider = cloud
	switch mode {
	case "crash":
		// Serve briefly, then die as a crashing plugin does.
		go func() {
			time.Sleep(50 * time.Millisecond)
			os.Exit(3)
		}()
	case "sim":
	case "broken-replay":
		p = &replaysTwice{Provider: p, seen: map[string]int{}}
	case "broken-fence":
		p = ignoresFence{p}
	case "broken-code":
		p = wrongCode{p}
	default:
		fmt.Fprintf(os.Stderr, "unknown TIDE_TEST_PLUGIN %q\n", mode)
		os.Exit(2)
	}
	provider.Serve(p, provider.WithInfo(provider.Info{Name: mode, Version: "test"}))
}

// replaysTwice provisions a second machine when a Create is replayed, and
// says it is fresh.
type replaysTwice struct {
	provider.Provider
	mu   sync.Mutex
	seen map[string]int
}

func (r *replaysTwice) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	r.mu.Lock()
	n := r.seen[req.MachineID]
	r.seen[req.MachineID]++
	r.mu.Unlock()
	ack, err := r.Provider.Create(ctx, req)
	if err == nil && n > 0 {
		dup := req
		dup.MachineID = fmt.Sprintf("%s.dup%d", req.MachineID, n)
		if _, err := r.Provider.Create(ctx, dup); err != nil {
			return ack, err
		}
		ack.Replayed = false
	}
	return ack, err
}

// ignoresFence accepts every fence: it rewrites them all to one controller.
type ignoresFence struct{ provider.Provider }

var anyFence = provider.Fence{Controller: "whoever", Epoch: 1}

func (p ignoresFence) Create(ctx context.Context, r provider.CreateRequest) (provider.Ack, error) {
	r.Fence = anyFence
	return p.Provider.Create(ctx, r)
}

func (p ignoresFence) Configure(ctx context.Context, r provider.ConfigureRequest) (provider.Ack, error) {
	r.Fence = anyFence
	return p.Provider.Configure(ctx, r)
}

func (p ignoresFence) Drain(ctx context.Context, r provider.DrainRequest) (provider.Ack, error) {
	r.Fence = anyFence
	return p.Provider.Drain(ctx, r)
}

func (p ignoresFence) Delete(ctx context.Context, r provider.DeleteRequest) (provider.Ack, error) {
	r.Fence = anyFence
	return p.Provider.Delete(ctx, r)
}

// wrongCode reports a missing machine as an internal error instead of
// NOT_FOUND.
type wrongCode struct{ provider.Provider }

func (p wrongCode) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := p.Provider.Get(ctx, id)
	if _, ok := provider.As[*provider.NotFoundError](err); ok {
		return m, errors.New("internal error: no row")
	}
	return m, err
}
