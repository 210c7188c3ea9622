package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/reconcile"
)

func TestConfigValidate(t *testing.T) {
	good := func() controller.Config {
		return controller.Config{
			Pool:         "gpu-a100.z1",
			Reconcile:    reconcile.Config{Nodes: capacity.Elastic(0, 4)},
			Offerings:    offerings(catalog()),
			Bootstrap:    []byte("blob"),
			ControllerID: "head-1",
		}
	}
	tests := []struct {
		name   string
		change func(*controller.Config)
		want   []string // substrings of the error; none: valid
	}{
		{"valid", func(*controller.Config) {}, nil},
		{"no pool", func(c *controller.Config) { c.Pool = "" }, []string{"pool: must be set"}},
		{"long pool", func(c *controller.Config) { c.Pool = strings.Repeat("p", 33) }, []string{"pool:", "33 characters, at most 32"}},
		{"bad pool", func(c *controller.Config) { c.Pool = "-gpu" }, []string{"pool:", "starting with a letter or digit"}},
		{"pool with slash", func(c *controller.Config) { c.Pool = "a/b" }, []string{"pool:"}},
		{"bad nodes", func(c *controller.Config) { c.Reconcile.Nodes = capacity.NodeSpec{Min: 3, Max: 1, Elastic: true} },
			[]string{"reconcile: nodes: min: 3 is above max 1"}},
		{"too many nodes", func(c *controller.Config) { c.Reconcile.Nodes = capacity.Elastic(0, 10_000_000) },
			[]string{"max: at most 9999999 nodes per pool"}},
		{"no offerings", func(c *controller.Config) { c.Offerings = nil }, []string{"offerings: at least one"}},
		{"bad offering", func(c *controller.Config) { c.Offerings[1].PricePerHour = -1 }, []string{"offerings[1]: price"}},
		{"duplicate offering", func(c *controller.Config) { c.Offerings[1] = c.Offerings[0] }, []string{`offerings[1]: offering "m8/z1/on-demand" listed twice`}},
		{"no bootstrap", func(c *controller.Config) { c.Bootstrap = nil }, []string{"bootstrap: must not be empty"}},
		{"huge bootstrap", func(c *controller.Config) { c.Bootstrap = make([]byte, 17<<10) }, []string{"bootstrap: 17408 bytes"}},
		{"no controller id", func(c *controller.Config) { c.ControllerID = "" }, []string{"controller_id: must be set"}},
		{"negative durations", func(c *controller.Config) {
			c.ReconcileInterval, c.LaunchTimeout, c.CapacityBackoff, c.MaxRetries = -1, -time.Second, -time.Minute, -1
		}, []string{"reconcile_interval", "launch_timeout", "capacity_backoff", "max_retries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.change(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNewChecksConfigAndDeps(t *testing.T) {
	cfg := controller.Config{Pool: "gpu", Reconcile: reconcile.Config{Nodes: capacity.Fixed(1)},
		Offerings: offerings(catalog()), Bootstrap: []byte("b"), ControllerID: "c"}
	_, err := controller.New(cfg, controller.Deps{})
	for _, w := range []string{`controller of pool "gpu"`, "deps: provider: must be set", "deps: journal: must be set", "deps: workload: must be set"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("New with no deps: %v, want it to mention %q", err, w)
		}
	}
	cfg.Pool = ""
	if _, err := controller.New(cfg, controller.Deps{Provider: nil}); err == nil || !strings.Contains(err.Error(), "pool: must be set") {
		t.Errorf("New with no pool: %v", err)
	}
}
