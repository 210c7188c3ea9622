package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/tide-project/tide/internal/capacity"
)

// Provider is a source of machines: the six lifecycle calls of BigFleet §7
// plus its catalog. Every method takes ctx first and is safe for concurrent
// use. The package doc states the contract every implementation keeps:
// asynchronous transitions, idempotence keyed by (machine id, target state),
// pool ownership, fencing and typed errors. The conformance suite in
// providertest checks it.
type Provider interface {
	// Offerings lists what the provider sells (type, zone, capacity kind,
	// resources, price, interruption probability). The slice belongs to the
	// caller. A CreateRequest names one of them by Offering.Name.
	Offerings(ctx context.Context) ([]Offering, error)

	// Create starts acquiring a machine with the caller's id, to become Idle.
	// It returns once the provider has accepted the request, with the
	// machine Speculative, Creating or already Idle.
	//
	// A Create for an id that exists in the same pool with the same offering
	// is a replay: Ack.Replayed is set, and nothing is provisioned, whatever
	// state the machine is in (even Failed or Deleting). A Create for an id
	// that exists with another pool or offering, or that the provider has
	// deleted, is a ConflictError. Errors: InvalidError (bad field, unknown
	// offering), StaleFenceError, QuotaExceededError, InsufficientCapacityError
	// (nothing was created; another offering may succeed), TransientError
	// (the request may or may not have been accepted: retry with the same id).
	Create(ctx context.Context, req CreateRequest) (Ack, error)

	// Configure binds an Idle machine to a cluster, handing it the opaque
	// bootstrap blob; the machine goes Configuring, then Configured.
	// Replays: a machine Configuring or Configured with the same cluster.
	// Errors: NotFoundError (no such machine in this pool), ConflictError (the
	// machine is not Idle, or is bound to another cluster: drain it first),
	// InvalidError, StaleFenceError, TransientError.
	Configure(ctx context.Context, req ConfigureRequest) (Ack, error)

	// Drain unbinds a machine from its cluster; a Configuring or Configured
	// machine goes Draining, then Idle with no cluster. Replays: a machine
	// already Draining, or with no binding (Speculative, Creating, Idle).
	// Errors: NotFoundError, ConflictError (Failed or Deleting machines: delete
	// them), InvalidError, StaleFenceError, TransientError. Draining the
	// workload off the machine first is the caller's job.
	Drain(ctx context.Context, req DrainRequest) (Ack, error)

	// Delete releases a machine in any state; it goes Deleting, then
	// disappears. A machine already Deleting is a replay. Once the machine is
	// gone, Delete (and Get) return NotFoundError: callers retry Delete until
	// they see NotFound, which is its successful end. Errors besides
	// NotFoundError: InvalidError, StaleFenceError, TransientError.
	Delete(ctx context.Context, req DeleteRequest) (Ack, error)

	// Get returns one machine, or NotFoundError (never existed, or gone).
	Get(ctx context.Context, id string) (Machine, error)

	// List returns the machines that pass the filter, sorted by id. A
	// controller Lists its pool at start to adopt or clean up what it
	// created before a crash.
	List(ctx context.Context, f Filter) ([]Machine, error)
}

// Offering is one thing a provider sells: an instance type in a zone bought
// as one capacity kind, with the resources of one node and its price. Its
// Name ("type/zone/kind") is what a CreateRequest names. It is tide's own
// offering type, so a plugin's catalog is what the policies price.
type Offering = capacity.Offering

// Resources is what one node of an offering provides: CPU in millicores,
// memory in bytes, GPUs, and named extended resources.
type Resources = capacity.Resources

// CapacityKind is how an offering is bought: OnDemand (the default when
// empty), Spot, Reserved or BareMetal.
type CapacityKind = capacity.Kind

// The capacity kinds an Offering may have.
const (
	OnDemand  = capacity.OnDemand
	Spot      = capacity.Spot
	Reserved  = capacity.Reserved
	BareMetal = capacity.BareMetal
)

// Fence identifies who makes a mutating call (BigFleet §11): the controller,
// its epoch (raised each time a controller takes over a pool, e.g. from a
// leader election) and a sequence number that orders its calls within the
// epoch. Providers refuse calls from older epochs; Seq is recorded for audit
// and is not checked, since a retry legitimately repeats a sequence number.
type Fence struct {
	Controller string `json:"controller"`
	Epoch      uint64 `json:"epoch"`
	Seq        uint64 `json:"seq"`
}

// String formats the fence as "controller@epoch#seq".
func (f Fence) String() string { return fmt.Sprintf("%s@%d#%d", f.Controller, f.Epoch, f.Seq) }

// Validate checks that the fence is set: a controller and an epoch of 1 or more.
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

// CreateRequest asks for a new machine.
type CreateRequest struct {
	Fence Fence
	// Pool is the pool that will own the machine.
	Pool string
	// MachineID is the caller's id for the machine: the idempotency key.
	// Controllers should derive it from the pool name and a persisted
	// counter (e.g. "gpu-17") and write it down before calling Create.
	MachineID string
	// Offering names the offering to buy (Offering.Name).
	Offering string
	// Labels are attached to the machine and shown back by Get and List.
	Labels map[string]string
	// Bootstrap is the blob a machine that boots its worker by itself
	// (cloud user data) joins with, when the caller has one at Create;
	// opaque like ConfigureRequest.Bootstrap. Providers that do not boot
	// workers themselves ignore it.
	Bootstrap []byte
}

// Validate checks the request's fields; errors are InvalidErrors naming the field.
func (r *CreateRequest) Validate() error {
	errs := []error{r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID)}
	if r.Offering == "" {
		errs = append(errs, NewInvalid("offering", "must be set"))
	}
	if len(r.Bootstrap) > MaxBootstrapSize {
		errs = append(errs, NewInvalid("bootstrap", fmt.Sprintf("%d bytes, at most %d allowed", len(r.Bootstrap), MaxBootstrapSize)))
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
	// Cluster names the cluster the machine joins (for tide, the head).
	Cluster string
	// Bootstrap is opaque to the provider and handed to the machine as is
	// (for a tide worker, an encoded Bootstrap: head address and join token).
	Bootstrap []byte
}

// Validate checks the request's fields; errors are InvalidErrors naming the field.
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

// Validate checks the request's fields; errors are InvalidErrors naming the field.
func (r *DrainRequest) Validate() error {
	return errors.Join(r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID))
}

// DeleteRequest asks to release a machine.
type DeleteRequest struct {
	Fence     Fence
	Pool      string
	MachineID string
}

// Validate checks the request's fields; errors are InvalidErrors naming the field.
func (r *DeleteRequest) Validate() error {
	return errors.Join(r.Fence.Validate(), ValidName("pool", r.Pool), ValidName("machine_id", r.MachineID))
}

// Ack acknowledges an accepted transition. It says the provider took the
// request, not that the transition has finished.
type Ack struct {
	MachineID string `json:"machine_id"`
	// State is the machine's state right after the call.
	State State `json:"state"`
	// Replayed is true when the call changed nothing because the machine
	// already had, or was already moving to, the call's target state.
	Replayed bool `json:"replayed,omitempty"`
}

// maxNameLen bounds pool names and machine ids, which end up in host names
// and labels.
const maxNameLen = 63

// MaxBootstrapSize bounds the bootstrap blob a CreateRequest carries, in
// bytes (cloud user-data limits are around 16 KiB).
const MaxBootstrapSize = 16 << 10

// ValidName checks a pool name or machine id: 1 to 63 characters from
// [A-Za-z0-9._-], starting with a letter or digit; errors are InvalidErrors
// naming field.
func ValidName(field, s string) error {
	if s == "" {
		return NewInvalid(field, "must be set")
	}
	if len(s) > maxNameLen {
		return NewInvalid(field, fmt.Sprintf("%d characters, at most %d allowed", len(s), maxNameLen))
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
// epoch seen and the controller holding it. The zero value is ready to use. It
// is not safe for concurrent use: guard it with the provider's lock.
type FenceTable struct {
	pools map[string]Fence
}

// Admit checks a mutating call's fence against the pool's highest. A higher
// epoch takes the pool over (the older controller is fenced out from then
// on); the same epoch from the same controller is accepted; an older epoch,
// or the same epoch from another controller, is refused with a
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

// Highest returns the highest fence admitted for the pool (with the highest
// sequence number seen in its epoch) and whether there is one.
func (t *FenceTable) Highest(pool string) (Fence, bool) {
	f, ok := t.pools[pool]
	return f, ok
}
