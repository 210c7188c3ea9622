package plugin_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/internal/provider/plugin"
)

// TestConformanceOfRegistryProviders: providers a fleet shard builds from
// its registry (build.FromRegistry, the construction pools use) pass the
// conformance suite, a subprocess plugin among them.
func TestConformanceOfRegistryProviders(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := json.Marshal(map[string]any{"command": []string{exe}, "env": []string{"TIDE_TEST_PLUGIN=sim"}})
	entries := []build.Entry{
		{Name: "cloud", Type: "sim", Options: json.RawMessage(`{"boot": "20ms", "configure": "20ms", "drain": "20ms", "delete": "20ms"}`)},
		{Name: "outside", Type: "plugin", Options: cmd},
	}
	env := build.Env{MachinesDir: t.TempDir(), Binary: exe, Logger: slog.New(slog.DiscardHandler), Clock: clock.Real{}}
	for _, e := range entries {
		t.Run(e.Type, func(t *testing.T) {
			e.Offerings = plugin.SimOfferings()
			mk, err := build.FromRegistry(e, env)
			if err != nil {
				t.Fatal(err)
			}
			p, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := p.(io.Closer); ok {
				t.Cleanup(func() { c.Close() })
			}
			conforms(t, p)
		})
	}
}
