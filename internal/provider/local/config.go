package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider"
)

// The Config defaults.
const (
	// DefaultDrainTimeout is how long a worker may take to exit after
	// SIGTERM before it is killed (the agent's own grace period).
	DefaultDrainTimeout = 30 * time.Second
	// DefaultReadyTimeout bounds Config.Ready.
	DefaultReadyTimeout = 2 * time.Minute
	// DefaultKillTimeout bounds the wait for SIGKILLed processes to vanish.
	DefaultKillTimeout = 10 * time.Second
	// DefaultPollInterval is how often a wait re-checks processes.
	DefaultPollInterval = 20 * time.Millisecond
	// DefaultHost is the Host of every local machine.
	DefaultHost = "127.0.0.1"
)

// Config configures a local Provider. Root and Command are required; zero
// fields take the defaults listed.
type Config struct {
	// Root is the directory that holds the provider's state and one
	// directory per machine. One Provider at a time may use it.
	Root string
	// Command builds the worker process of a machine, e.g.
	// `tide worker --head H --name <id> --data-dir <dir> --cpu .. --memory ..`
	// (WorkerCommand builds exactly that). It is called by Configure, with
	// the provider's lock held: it must be quick, have no side effects and
	// not call the Provider. An error makes Configure fail with an
	// InvalidError on "bootstrap" (the blob it could not use).
	//
	// The provider then sets the process group and the marker variable,
	// and sends stdout and stderr to the machine's worker.log unless the
	// command sets them (prefer files: a pipe to this process would break
	// when it exits, and the worker must outlive it to be adopted).
	Command func(w Worker) (*exec.Cmd, error)
	// Ready, when set, is called once the worker process runs; the machine
	// becomes Configured when it returns nil (e.g. once the worker joined
	// the head) and Failed with its error otherwise. Its context ends after
	// ReadyTimeout, or when the machine is drained, deleted or its process
	// exits, or the provider closes: it must return then.
	Ready func(ctx context.Context, w Worker) error
	// Offerings are what the provider sells; one offering sized to this
	// machine (DefaultOffering) when empty.
	Offerings []capacity.Offering
	// Host is every machine's Host; "127.0.0.1" when empty.
	Host string
	// Clock tells the time of records and times the waits; clock.Real
	// when nil.
	Clock clock.Clock
	// Logger receives what the provider does to processes; discarded when nil.
	Logger *slog.Logger
	// DrainTimeout is SIGTERM → SIGKILL for Drain and Shutdown (30s).
	DrainTimeout time.Duration
	// ReadyTimeout bounds Ready (2m).
	ReadyTimeout time.Duration
	// KillTimeout bounds the wait for killed processes to vanish (10s);
	// past it the transition is retried on the machine's next call.
	KillTimeout time.Duration
	// PollInterval is how often waits re-check processes (20ms).
	PollInterval time.Duration
	// StartDelay is how long a machine takes to boot: its worker process
	// starts this long after Configure accepted it (the machine stays
	// Configuring meanwhile; a Drain or Delete in that time ends it with
	// no process started). 0, the default, starts at once. It lets tests
	// and demos meet a provider slower than the work waiting for it.
	StartDelay time.Duration
}

// Worker is what Command and Ready get to know about a machine.
type Worker struct {
	// MachineID is the provider machine id, also the worker's name.
	MachineID string
	// Pool is the pool the machine belongs to.
	Pool string
	// Cluster is the cluster it joins (ConfigureRequest.Cluster).
	Cluster string
	// Offering is the machine's offering; its Resources are what the
	// worker offers.
	Offering capacity.Offering
	// DataDir is the machine's data directory (the worker's --data-dir).
	DataDir string
	// Bootstrap is the opaque blob given to Configure (for a tide worker,
	// an encoded provider.Bootstrap).
	Bootstrap []byte
}

// withDefaults returns c with its zero fields set and its slices copied.
func (c Config) withDefaults() (Config, error) {
	if len(c.Offerings) == 0 {
		o, err := DefaultOffering()
		if err != nil {
			return c, fmt.Errorf("offerings: none configured and %w", err)
		}
		c.Offerings = []capacity.Offering{o}
	} else {
		c.Offerings = slices.Clone(c.Offerings)
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.KillTimeout == 0 {
		c.KillTimeout = DefaultKillTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	return c, nil
}

// Validate checks the config; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("root: must be set"))
	}
	if c.Command == nil {
		errs = append(errs, errors.New("command: must be set"))
	}
	seen := map[string]bool{}
	for i, o := range c.Offerings {
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("offerings[%d]: %w", i, err))
		}
		if seen[o.Name()] {
			errs = append(errs, fmt.Errorf("offerings[%d]: offering %q listed twice", i, o.Name()))
		}
		seen[o.Name()] = true
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"drain_timeout", c.DrainTimeout}, {"ready_timeout", c.ReadyTimeout},
		{"kill_timeout", c.KillTimeout}, {"poll_interval", c.PollInterval}, {"start_delay", c.StartDelay},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", d.field, d.v))
		}
	}
	return errors.Join(errs...)
}

// DefaultOfferingType is the instance type of DefaultOffering.
const DefaultOfferingType = "local"

// DefaultOffering is one on-demand offering, free, sized to this machine:
// every CPU this process may run on and the memory of /proc/meminfo.
func DefaultOffering() (capacity.Offering, error) {
	mem, err := memTotal()
	if err != nil {
		return capacity.Offering{}, fmt.Errorf("default offering: memory: %w", err)
	}
	return capacity.Offering{
		Type: DefaultOfferingType, Kind: capacity.OnDemand,
		Resources: capacity.Resources{MilliCPU: int64(runtime.NumCPU()) * 1000, Memory: mem},
	}, nil
}

// WorkerCommand returns a Command that runs `binary worker` for a machine:
// it checks the bootstrap blob (provider.ParseBootstrap; a Kubernetes join
// document, provider.IsNodeJoin, is left to the node agent the worker
// runs for it) and hands it to the worker on its standard input (`--bootstrap -`), so the join
// credential is neither on the command line, where ps shows it, nor in the
// environment its instances inherit. It passes the machine id as --name,
// the data directory, the pool and the offering's gpus and its cpu and
// memory (when set), with --stop-on-exit (a drained worker takes its
// instances with it) and --log-addr 127.0.0.1:0 (workers sharing this host
// need distinct log ports); extraArgs follow and may override them.
// TIDE_TOKEN and TIDE_JOIN_TOKEN are not passed on.
func WorkerCommand(binary string, extraArgs ...string) func(Worker) (*exec.Cmd, error) {
	extra := slices.Clone(extraArgs)
	return func(w Worker) (*exec.Cmd, error) {
		if !provider.IsNodeJoin(w.Bootstrap) {
			if _, err := provider.ParseBootstrap(w.Bootstrap); err != nil {
				return nil, err
			}
		}
		r := w.Offering.Resources
		args := []string{"worker",
			"--bootstrap", "-",
			"--name", w.MachineID,
			"--data-dir", w.DataDir,
			"--pool", w.Pool,
			"--gpus", strconv.FormatInt(r.GPUs, 10),
			"--stop-on-exit",
			"--log-addr", "127.0.0.1:0",
		}
		// A zero cpu or memory is left to the worker to detect.
		if r.MilliCPU > 0 {
			args = append(args, "--cpu", capacity.FormatCPU(r.MilliCPU))
		}
		if r.Memory > 0 {
			args = append(args, "--memory", capacity.FormatBytes(r.Memory))
		}
		cmd := exec.Command(binary, append(args, extra...)...)
		env := make([]string, 0, len(os.Environ())+1)
		for _, kv := range os.Environ() {
			switch k, _, _ := strings.Cut(kv, "="); k {
			case "TIDE_TOKEN", "TIDE_JOIN_TOKEN", MarkerEnv:
				continue
			}
			env = append(env, kv)
		}
		cmd.Env = env
		cmd.Stdin = bytes.NewReader(slices.Clone(w.Bootstrap))
		return cmd, nil
	}
}
