// Package build builds a pool's provider from its configuration block
// (`provider: {type, options}`): the one place that knows every provider
// type tide runs machines with (aws, local, netns, plugin, sim). `tide
// head` (internal/assembly) and `tide kube` (internal/kube/operator) both
// build their pools' providers here; each wraps the result with how its
// machines join (a head's worker credential, a Kubernetes Node's).
package build

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/internal/provider/netns"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/sdk/provider"
)

// Env is what a provider may use from the process that runs it.
type Env struct {
	// MachinesDir holds the state of the providers whose machines run on
	// this host (local, netns), one subdirectory per pool
	// (MachinesDir/<pool>); empty: such pools are refused.
	MachinesDir string
	// Binary is the tide executable that machines on this host run (as
	// `tide worker --bootstrap -`, which joins what its blob says: a head,
	// or a Kubernetes cluster as a Node).
	Binary string
	// Logger is the pool's logger.
	Logger *slog.Logger
	// Clock is the process's clock.
	Clock clock.Clock
	// Join mints the blob that joins one machine (of the pool's offering)
	// to this process's cluster, reaching a head at headURL ("": the
	// head's own address; Kubernetes mode ignores it); nil where there is
	// no cluster to join (a fleet shard). Fleet-backed pools need it: the
	// fleet asks them for each blob.
	Join func(ctx context.Context, pool, machine, offering, headURL string) ([]byte, error)
	// Preempt tells this process's cluster that the fleet takes one of a
	// pool's machines back after grace (why is for its events); nil with Join.
	Preempt func(ctx context.Context, pool, machine, why string, grace time.Duration) error
}

// Types lists the provider types New builds.
var Types = []string{"aws", "fleet", "local", "netns", "plugin", "sim"}

// RunsNoAgent says why the machines of provider type typ run nothing that
// a bootstrap blob could start ("" when they do: a tide worker, or the
// Node agent a Kubernetes join blob starts). Such machines can serve a
// head's controller tests but never join a cluster as Nodes.
func RunsNoAgent(typ string) string {
	if typ == "sim" {
		return "the sim provider's machines are simulated: they run nothing, so none can join the cluster as a Node"
	}
	return ""
}

// New checks pool pc's provider section and returns the function that
// builds its provider. Checking has no side effects (a config refused at
// start or on reload leaves nothing behind); building may create
// directories and processes. Errors name the field under the pool
// ("provider.type: ...", "provider.options.boot: ..."); the caller
// prefixes the file and the pool.
//
// Every provider type is one case here: a new one is one more line.
func New(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	switch pc.Provider.Type {
	case "aws":
		return awsProvider(pc, env)
	case "fleet":
		return fleetProvider(pc, env)
	case "local":
		return localProvider(pc, env)
	case "netns":
		return netnsProvider(pc, env)
	case "plugin":
		return pluginProvider(pc, env)
	case "sim":
		return simProvider(pc, env)
	default:
		return nil, fmt.Errorf("provider.type: %q is not a provider type (supported: %v)", pc.Provider.Type, Types)
	}
}

// localOptions are the local provider's options.
type localOptions struct {
	// StartDelay is how long each machine takes to boot before its
	// worker starts (local.Config.StartDelay): a slow provider on this
	// host, for tests and demos.
	StartDelay config.Duration `json:"start_delay,omitempty"`
}

// localProvider runs machines as tide worker processes of this host; its
// one option is start_delay.
func localProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	var o localOptions
	if len(pc.Provider.Options) > 0 {
		js, err := json.Marshal(pc.Provider.Options)
		if err == nil {
			err = strictjson.Decode(js, &o)
		}
		if err != nil {
			return nil, fmt.Errorf("provider.options: the local provider takes only start_delay: %w", err)
		}
		if o.StartDelay < 0 {
			return nil, fmt.Errorf("provider.options.start_delay: must not be negative, got %s", time.Duration(o.StartDelay))
		}
	}
	if err := env.hostRun(pc); err != nil {
		return nil, err
	}
	return func() (provider.Provider, error) {
		return local.New(local.Config{
			Root:       filepath.Join(env.MachinesDir, pc.Name),
			Command:    local.WorkerCommand(env.Binary),
			Offerings:  pc.Offerings,
			Clock:      env.Clock,
			Logger:     env.Logger.With("component", "local-provider"),
			StartDelay: time.Duration(o.StartDelay),
		})
	}, nil
}

// hostRun checks that env has a place for the machines of pool pc, which
// run on this host.
func (env Env) hostRun(pc config.Pool) error {
	if env.MachinesDir == "" {
		return fmt.Errorf("provider.type: %s runs its machines on this host and no directory is set for them", pc.Provider.Type)
	}
	return nil
}

// NetnsConfig is pool pc's netns provider configuration: options prefix
// and subnet (strings), state under MachinesDir/<pool>.
func NetnsConfig(pc config.Pool, env Env) (netns.Config, error) {
	nc := netns.Config{Root: filepath.Join(env.MachinesDir, pc.Name), Binary: env.Binary, Offerings: pc.Offerings,
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
	nc, err := NetnsConfig(pc, env)
	if err != nil {
		return nil, err
	}
	if err := env.hostRun(pc); err != nil {
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
