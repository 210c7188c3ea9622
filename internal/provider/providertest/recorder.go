package providertest

import (
	"context"
	"slices"
	"sync"

	"github.com/tide-project/tide/internal/capacity"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// Call is one call that went through a Recorder.
type Call struct {
	Op tideprovider.Op
	// Pool and MachineID are those of the request (Pool is the filter's
	// pool for List; both are empty for Offerings).
	Pool      string
	MachineID string
	// Fence is the request's fence; zero for reads.
	Fence provider.Fence
	// Forwarded is false when the call was answered by an injected error
	// without reaching the wrapped provider.
	Forwarded bool
	// Err is what the caller got back.
	Err error
}

// Recorder wraps a Provider: it logs every call and can answer calls with
// injected errors, for the tests of code that drives a provider (the
// controller's fault and crash tests). It is safe for concurrent use and
// passes the conformance suite when the wrapped provider does.
type Recorder struct {
	next provider.Provider

	mu     sync.Mutex
	calls  []Call
	inject map[tideprovider.Op][]error

	// Before, when set, sees every call before it is forwarded; a non-nil
	// error is returned to the caller and the call is not forwarded (a
	// fault or a crash point before the provider acts). Set it before use.
	Before func(Call) error
	// After, when set, sees every forwarded call with its result (a crash
	// point after the provider acted). Set it before use.
	After func(Call)
}

var _ provider.Provider = (*Recorder)(nil)

// NewRecorder wraps p.
func NewRecorder(p provider.Provider) *Recorder {
	return &Recorder{next: p, inject: map[tideprovider.Op][]error{}}
}

// FailNext makes the next call of op return err without reaching the wrapped
// provider; queued errors are used in order.
func (r *Recorder) FailNext(op tideprovider.Op, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inject[op] = append(r.inject[op], err)
}

// Calls returns the calls so far, oldest first; with ops, only those operations.
func (r *Recorder) Calls(ops ...tideprovider.Op) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(ops) == 0 {
		return slices.Clone(r.calls)
	}
	var out []Call
	for _, c := range r.calls {
		if slices.Contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets the logged calls and the queued errors.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
	r.inject = map[tideprovider.Op][]error{}
}

// intercept decides whether c is forwarded; it returns the error to answer
// with when it is not.
func (r *Recorder) intercept(c Call) error {
	r.mu.Lock()
	if q := r.inject[c.Op]; len(q) > 0 {
		r.inject[c.Op] = q[1:]
		r.mu.Unlock()
		return q[0]
	}
	r.mu.Unlock()
	if r.Before != nil {
		return r.Before(c)
	}
	return nil
}

func (r *Recorder) done(c Call, forwarded bool, err error) {
	c.Forwarded, c.Err = forwarded, err
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	if forwarded && r.After != nil {
		r.After(c)
	}
}

// do runs one call through the recorder.
func do[T any](r *Recorder, c Call, call func() (T, error)) (T, error) {
	if err := r.intercept(c); err != nil {
		r.done(c, false, err)
		var zero T
		return zero, err
	}
	out, err := call()
	r.done(c, true, err)
	return out, err
}

// Offerings forwards to the wrapped provider.
func (r *Recorder) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	return do(r, Call{Op: tideprovider.OpOfferings}, func() ([]capacity.Offering, error) { return r.next.Offerings(ctx) })
}

// Create forwards to the wrapped provider.
func (r *Recorder) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	c := Call{Op: tideprovider.OpCreate, Pool: req.Pool, MachineID: req.MachineID, Fence: req.Fence}
	return do(r, c, func() (provider.Ack, error) { return r.next.Create(ctx, req) })
}

// Configure forwards to the wrapped provider.
func (r *Recorder) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	c := Call{Op: tideprovider.OpConfigure, Pool: req.Pool, MachineID: req.MachineID, Fence: req.Fence}
	return do(r, c, func() (provider.Ack, error) { return r.next.Configure(ctx, req) })
}

// Drain forwards to the wrapped provider.
func (r *Recorder) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	c := Call{Op: tideprovider.OpDrain, Pool: req.Pool, MachineID: req.MachineID, Fence: req.Fence}
	return do(r, c, func() (provider.Ack, error) { return r.next.Drain(ctx, req) })
}

// Delete forwards to the wrapped provider.
func (r *Recorder) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	c := Call{Op: tideprovider.OpDelete, Pool: req.Pool, MachineID: req.MachineID, Fence: req.Fence}
	return do(r, c, func() (provider.Ack, error) { return r.next.Delete(ctx, req) })
}

// Get forwards to the wrapped provider.
func (r *Recorder) Get(ctx context.Context, id string) (provider.Machine, error) {
	return do(r, Call{Op: tideprovider.OpGet, MachineID: id}, func() (provider.Machine, error) { return r.next.Get(ctx, id) })
}

// List forwards to the wrapped provider.
func (r *Recorder) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	return do(r, Call{Op: tideprovider.OpList, Pool: f.Pool}, func() ([]provider.Machine, error) { return r.next.List(ctx, f) })
}
