package assembly

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/netns"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/strictjson"
)

// Env is what a provider may use from the assembly that runs it.
type Env struct {
	// DataDir is the head's data dir; a provider keeps its state under
	// DataDir/machines/<pool>.
	DataDir string
	// Binary is the tide executable that machines on this host run.
	Binary string
	// Logger is the pool's logger.
	Logger *slog.Logger
	// Clock is the assembly's clock.
	Clock clock.Clock
}

// providerTypes lists the provider types newProvider builds, for errors.
var providerTypes = []string{"aws", "local", "netns", "plugin", "sim"}

// newProvider checks pool pc's provider section and returns the function
// that builds its provider. Checking has no side effects (a config refused
// at start or on reload leaves nothing behind); building may create
// directories and processes. Errors name the field under the pool
// ("provider.type: ...", "provider.options.boot: ..."); the caller prefixes
// the file and the pool.
//
// Every provider type is one case here: a new one (netns, plugin, ...) is
// one more line.
func newProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	switch pc.Provider.Type {
	case "aws":
		return awsProvider(pc, env)
	case "local":
		return localProvider(pc, env)
	case "netns":
		return netnsProvider(pc, env)
	case "plugin":
		return pluginProvider(pc, env)
	case "sim":
		return simProvider(pc, env)
	default:
		return nil, fmt.Errorf("provider.type: %q is not supported by the head (supported: %v)", pc.Provider.Type, providerTypes)
	}
}

// localProvider runs machines as tide worker processes of this host; it
// takes no options.
func localProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	if len(pc.Provider.Options) > 0 {
		return nil, errors.New("provider.options: the local provider takes no options")
	}
	return func() (provider.Provider, error) {
		return local.New(local.Config{
			Root:      filepath.Join(env.DataDir, "machines", pc.Name),
			Command:   local.WorkerCommand(env.Binary),
			Offerings: pc.Offerings,
			Clock:     env.Clock,
			Logger:    env.Logger.With("component", "local-provider"),
		})
	}, nil
}

// netnsConfig is pool pc's netns provider configuration: options prefix
// and subnet (strings), state under DataDir/machines/<pool>.
func netnsConfig(pc config.Pool, env Env) (netns.Config, error) {
	nc := netns.Config{Root: filepath.Join(env.DataDir, "machines", pc.Name), Binary: env.Binary, Offerings: pc.Offerings,
		Clock: env.Clock}
	for k, v := range pc.Provider.Options {
		s, ok := v.(string)
		switch {
		case !ok:
			return nc, fmt.Errorf("provider.options.%s: want a string, got %v", k, v)
		case k == "prefix":
			nc.Prefix = s
		case k == "subnet":
			nc.Subnet = s
		default:
			return nc, fmt.Errorf("provider.options.%s: unknown option (netns has prefix and subnet)", k)
		}
	}
	return nc, nil
}

// netnsProvider runs each machine as a network namespace on this host with
// its own address on a bridge, running tide worker inside (Linux, root).
func netnsProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	nc, err := netnsConfig(pc, env)
	if err != nil {
		return nil, err
	}
	if why := netns.Supported(); why != "" {
		return nil, fmt.Errorf("provider.type: %s", why)
	}
	if _, err := netns.PlanGateway(nc); err != nil {
		return nil, fmt.Errorf("provider.options: %w", err)
	}
	return func() (provider.Provider, error) {
		nc.Logger = env.Logger.With("component", "netns-provider")
		return netns.New(nc)
	}, nil
}

// simOptions are the sim provider's options: a simulated cloud whose
// machines boot, configure, drain and delete in the given times and join
// no head (they run no worker). For tests and demos of the controller.
type simOptions struct {
	Boot      config.Duration `json:"boot,omitempty"`
	Configure config.Duration `json:"configure,omitempty"`
	Drain     config.Duration `json:"drain,omitempty"`
	Delete    config.Duration `json:"delete,omitempty"`
	// Quota bounds the machines of all offerings; 0: none.
	Quota int `json:"quota,omitempty"`
	// APIErrorRate is the probability that a call fails transiently.
	APIErrorRate float64 `json:"api_error_rate,omitempty"`
	// OutOfCapacity names offerings (type or type/capacity) whose Create
	// answers InsufficientCapacity.
	OutOfCapacity []string `json:"out_of_capacity,omitempty"`
	// Seed seeds the cloud's randomness (1 when zero).
	Seed uint64 `json:"seed,omitempty"`
}

func simProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	var o simOptions
	if len(pc.Provider.Options) > 0 {
		js, err := json.Marshal(pc.Provider.Options)
		if err == nil {
			err = strictjson.Decode(js, &o)
		}
		if err != nil {
			return nil, fmt.Errorf("provider.options: %w", err)
		}
	}
	cfg := sim.Config{Quota: o.Quota, APIErrorRate: o.APIErrorRate}
	known := map[string]bool{}
	for _, off := range pc.Offerings {
		known[off.Name()], known[off.Type] = true, true
		cfg.Offerings = append(cfg.Offerings, sim.Offering{Offering: off,
			Boot: sim.Fixed(time.Duration(o.Boot)), Configure: sim.Fixed(time.Duration(o.Configure)),
			Drain: sim.Fixed(time.Duration(o.Drain)), Delete: sim.Fixed(time.Duration(o.Delete)),
			OutOfCapacity: slices.Contains(o.OutOfCapacity, off.Name()) || slices.Contains(o.OutOfCapacity, off.Type)})
	}
	for i, name := range o.OutOfCapacity {
		if !known[name] {
			return nil, fmt.Errorf("provider.options.out_of_capacity[%d]: no offering %q in the pool", i, name)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("provider.options: %w", err)
	}
	seed := o.Seed
	if seed == 0 {
		seed = 1
	}
	return func() (provider.Provider, error) {
		return sim.New(cfg, env.Clock, rand.New(rand.NewPCG(seed, seed^0x7469646568656164)))
	}, nil
}
