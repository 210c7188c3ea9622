package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/fleet"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/sdk/provider"
)

// fleetOptions are a fleet-backed pool's provider options.
type fleetOptions struct {
	// Coordinator is the Fleet API address of a coordinator (host:port).
	Coordinator string `json:"coordinator"`
	// Cluster is this cluster's name in the fleet.
	Cluster string `json:"cluster"`
	// Priority of the pool's needs (higher first; decides preemption).
	Priority int32 `json:"priority,omitempty"`
	// Profile is the fleet profile the pool's machines are; default each
	// offering's type.
	Profile string `json:"profile,omitempty"`
	// InterruptionPenalty is what interrupting one machine costs, in dollars.
	InterruptionPenalty float64 `json:"interruption_penalty,omitempty"`
	// Period is how often the needs are sent with no change (default 2s).
	Period config.Duration `json:"period,omitempty"`
	// HeadURL is the head's URL as the fleet's machines reach it; default
	// the head's own listen address.
	HeadURL string `json:"head_url,omitempty"`
}

// fleetProvider gets the pool's machines from the fleet tier: the pool's
// policy decides how many, the fleet which ones; machines join with blobs
// the head mints for them (env.Join).
func fleetProvider(pc config.Pool, env Env) (func() (provider.Provider, error), error) {
	var o fleetOptions
	js, err := json.Marshal(pc.Provider.Options)
	if err == nil {
		err = strictjson.Decode(js, &o)
	}
	if err != nil {
		return nil, fmt.Errorf("provider.options: %w", err)
	}
	var errs []error
	if o.Coordinator == "" {
		errs = append(errs, errors.New("provider.options.coordinator: must be set (the Fleet API address, host:port)"))
	}
	if o.Cluster == "" {
		errs = append(errs, errors.New("provider.options.cluster: must be set (this cluster's name in the fleet)"))
	}
	if o.Priority < 0 {
		errs = append(errs, fmt.Errorf("provider.options.priority: must not be negative, got %d", o.Priority))
	}
	if env.Join == nil || env.Preempt == nil {
		errs = append(errs, errors.New("provider.type: fleet pools need a cluster their machines join (a head)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := env.hostRun(pc); err != nil {
		return nil, err
	}
	return func() (provider.Provider, error) {
		return fleet.New(fleet.Config{Coordinator: o.Coordinator, Cluster: o.Cluster, Pool: pc.Name, Priority: o.Priority,
			InterruptionPenalty: o.InterruptionPenalty, Profile: o.Profile, Offerings: pc.Offerings,
			StateDir: filepath.Join(env.MachinesDir, pc.Name), Period: time.Duration(o.Period),
			Joiner: joiner{env: env, headURL: o.HeadURL}, Clock: env.Clock,
			Logger: env.Logger.With("component", "fleet-provider")})
	}, nil
}

// joiner is a fleet.Joiner over the process's cluster (env.Join, env.Preempt).
type joiner struct {
	env     Env
	headURL string
}

func (j joiner) Blob(ctx context.Context, pool, machine, offering string) ([]byte, error) {
	return j.env.Join(ctx, pool, machine, offering, j.headURL)
}

func (j joiner) Preempt(ctx context.Context, pool, machine, why string, grace time.Duration) error {
	return j.env.Preempt(ctx, pool, machine, why, grace)
}
