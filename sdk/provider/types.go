package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Provider is a source of machines: four asynchronous, idempotent
// transitions, two reads and a catalog. Every method is safe for concurrent
// use.
type Provider interface {
	// Offerings lists what the provider sells.
	Offerings(ctx context.Context) ([]Offering, error)
	// Create starts acquiring a machine with the caller's id; target Idle.
	// A Create of an existing id in the same pool with the same offering is
	// a replay (Ack.Replayed, nothing provisioned); with another pool or
	// offering, or of a deleted id, a ConflictError.
	Create(ctx context.Context, req CreateRequest) (Ack, error)
	// Configure binds an Idle machine to a cluster; target Configured.
	Configure(ctx context.Context, req ConfigureRequest) (Ack, error)
	// Drain unbinds a Configuring or Configured machine; target Idle.
	Drain(ctx context.Context, req DrainRequest) (Ack, error)
	// Delete releases a machine in any state; once gone, NotFoundError.
	Delete(ctx context.Context, req DeleteRequest) (Ack, error)
	// Get returns one machine or a NotFoundError.
	Get(ctx context.Context, id string) (Machine, error)
	// List returns the machines passing the filter, sorted by id.
	List(ctx context.Context, f Filter) ([]Machine, error)
}

// State is where a machine is in its lifecycle.
type State string

// The machine states.
const (
	Speculative State = "speculative"
	Creating    State = "creating"
	Idle        State = "idle"
	Configuring State = "configuring"
	Configured  State = "configured"
	Draining    State = "draining"
	Deleting    State = "deleting"
	Failed      State = "failed"
)

// States lists every state in lifecycle order.
var States = []State{Speculative, Creating, Idle, Configuring, Configured, Draining, Deleting, Failed}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Transitional reports whether s is Creating, Configuring, Draining or Deleting.
func (s State) Transitional() bool {
	return s == Creating || s == Configuring || s == Draining || s == Deleting
}

// Fence identifies who makes a mutating call: the controller, its epoch and
// a sequence number within the epoch (recorded, not checked).
type Fence struct {
	Controller string
	Epoch      uint64
	Seq        uint64
}

// String formats the fence as "controller@epoch#seq".
func (f Fence) String() string { return fmt.Sprintf("%s@%d#%d", f.Controller, f.Epoch, f.Seq) }

// Validate checks that the fence names a controller and an epoch of 1 or more.
func (f Fence) Validate() error {
	var errs []error
	if f.Controller == "" {
		errs = append(errs, NewInvalid("fence.controller", "must be set"))
	}
	if f.Epoch == 0 {
		errs = append(errs, NewInvalid("fence.epoch", "must be 1 or more"))
	}
	return errors.Join(errs...)
}

// CreateRequest asks for a new machine; MachineID is the idempotency key.
type CreateRequest struct {
	Fence     Fence
	Pool      string
	MachineID string
	// Offering names an offering (Offering.Name).
	Offering string
	Labels   map[string]string
}

// Validate checks the fields; errors are InvalidErrors naming the field.
func (r *CreateRequest) Validate() error {
	errs := []error{r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID)}
	if r.Offering == "" {
		errs = append(errs, NewInvalid("offering", "must be set"))
	}
	for k := range r.Labels {
		if k == "" {
			errs = append(errs, NewInvalid("labels", "a label key must not be empty"))
			break
		}
	}
	return errors.Join(errs...)
}

// ConfigureRequest asks to bind an Idle machine to a cluster.
type ConfigureRequest struct {
	Fence     Fence
	Pool      string
	MachineID string
	Cluster   string
	// Bootstrap is opaque: hand it to the machine as is.
	Bootstrap []byte
}

// Validate checks the fields; errors are InvalidErrors naming the field.
func (r *ConfigureRequest) Validate() error {
	errs := []error{r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID)}
	if r.Cluster == "" {
		errs = append(errs, NewInvalid("cluster", "must be set"))
	}
	if len(r.Bootstrap) == 0 {
		errs = append(errs, NewInvalid("bootstrap", "must not be empty"))
	}
	return errors.Join(errs...)
}

// DrainRequest asks to unbind a machine from its cluster.
type DrainRequest struct {
	Fence     Fence
	Pool      string
	MachineID string
}

// Validate checks the fields; errors are InvalidErrors naming the field.
func (r *DrainRequest) Validate() error {
	return errors.Join(r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID))
}

// DeleteRequest asks to release a machine.
type DeleteRequest struct {
	Fence     Fence
	Pool      string
	MachineID string
}

// Validate checks the fields; errors are InvalidErrors naming the field.
func (r *DeleteRequest) Validate() error {
	return errors.Join(r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID))
}

// Ack acknowledges an accepted (not a finished) transition.
type Ack struct {
	MachineID string
	// State is the machine's state right after the call.
	State State
	// Replayed is true when the call changed nothing.
	Replayed bool
}

// Machine is a provider's view of one machine.
type Machine struct {
	ID        string
	Pool      string
	Offering  string
	State     State
	Host      string
	Cluster   string
	Bootstrap []byte
	Labels    map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
	// ReclaimAt, when not zero, announces a spot reclaim.
	ReclaimAt time.Time
	// Reason says why the machine is Failed.
	Reason string
}

// Clone returns a deep copy of m.
func (m Machine) Clone() Machine {
	m.Bootstrap = slices.Clone(m.Bootstrap)
	m.Labels = maps.Clone(m.Labels)
	return m
}

// Filter selects machines in List; the zero Filter selects all.
type Filter struct {
	Pool   string
	States []State
}

// Matches reports whether m passes the filter.
func (f Filter) Matches(m *Machine) bool {
	if f.Pool != "" && m.Pool != f.Pool {
		return false
	}
	return len(f.States) == 0 || slices.Contains(f.States, m.State)
}

// Resources is what one node provides.
type Resources struct {
	MilliCPU int64
	Memory   int64
	GPUs     int64
	Extended map[string]int64
}

// Offering is one thing a provider sells.
type Offering struct {
	Type string
	Zone string
	// Kind is "on-demand" (the default when empty), "spot", "reserved" or "bare-metal".
	Kind                    string
	Resources               Resources
	PricePerHour            float64
	InterruptionProbability float64
	InterruptionPenalty     float64
}

// Name is the offering's key: "type/zone/kind" ("type/kind" without a zone).
func (o Offering) Name() string {
	kind := o.Kind
	if kind == "" {
		kind = "on-demand"
	}
	if o.Zone == "" {
		return o.Type + "/" + kind
	}
	return o.Type + "/" + o.Zone + "/" + kind
}

// ValidName checks a pool name or machine id: 1 to 63 characters from
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidName(field, s string) error {
	if s == "" {
		return NewInvalid(field, "must be set")
	}
	if len(s) > 63 {
		return NewInvalid(field, fmt.Sprintf("%d characters, at most 63 allowed", len(s)))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '-' && c != '_' && c != '.') {
			return NewInvalid(field, fmt.Sprintf("%q: use letters, digits, '-', '_' and '.', starting with a letter or digit", s))
		}
	}
	return nil
}

// FenceTable is the fencing state a provider keeps: per pool, the highest
// epoch seen and its controller. Not safe for concurrent use.
type FenceTable struct {
	pools map[string]Fence
}

// Admit checks a mutating call's fence: a higher epoch takes the pool over,
// the same epoch and controller is accepted, anything else is refused with a
// StaleFenceError and changes nothing.
func (t *FenceTable) Admit(pool string, f Fence) error {
	cur, ok := t.pools[pool]
	if ok && (f.Epoch < cur.Epoch || f.Epoch == cur.Epoch && f.Controller != cur.Controller) {
		return NewStaleFence(pool, f, cur)
	}
	if t.pools == nil {
		t.pools = make(map[string]Fence)
	}
	if ok && f.Epoch == cur.Epoch {
		f.Seq = max(f.Seq, cur.Seq)
	}
	t.pools[pool] = f
	return nil
}
