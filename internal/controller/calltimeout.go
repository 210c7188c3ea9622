package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// callTimeout bounds every call to the provider it wraps. A call still
// unanswered after d is abandoned (its context is cancelled and it finishes
// on its own goroutine) and answers a TransientError, which the controller
// treats as "may have taken effect": a Create is replayed with the same id.
// A panic in the call is raised again on the caller's goroutine. It does
// not rely on the provider honouring its context: a provider that
// ignores cancellation still cannot hold a reconcile pass.
type callTimeout struct {
	next provider.Provider
	d    time.Duration
}

// answersInline is a provider that answers every call on the caller's
// goroutine without waiting on anything (the simulator's cloud on virtual
// time): a bound would bound nothing, so its calls are made directly,
// without a goroutine and a timer per call.
type answersInline interface{ AnswersInline() bool }

func withCallTimeout(p provider.Provider, d time.Duration) provider.Provider {
	if in, ok := p.(answersInline); ok && in.AnswersInline() {
		return p
	}
	return &callTimeout{next: p, d: d}
}

// bounded runs call with a context that ends after d and returns its
// result, or a TransientError once d has passed (ctx's error if ctx ended).
func bounded[T any](ctx context.Context, d time.Duration, op tideprovider.Op, call func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel() // on a timeout, tells the abandoned call to stop
	type result struct {
		v        T
		err      error
		panicked any
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- result{panicked: p}
			}
		}()
		v, err := call(cctx)
		ch <- result{v: v, err: err}
	}()
	select {
	case r := <-ch:
		if r.panicked != nil {
			panic(r.panicked) // on the caller's goroutine, as without the bound
		}
		return r.v, r.err
	case <-cctx.Done():
		select {
		case r := <-ch: // answered just in time
			if r.panicked != nil {
				panic(r.panicked)
			}
			return r.v, r.err
		default:
		}
		var zero T
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, provider.NewTransient(fmt.Errorf("provider %s: no answer within the call timeout %s: %w", op, d, cctx.Err()), 0)
	}
}

func (c *callTimeout) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	return bounded(ctx, c.d, tideprovider.OpOfferings, c.next.Offerings)
}

func (c *callTimeout) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	return bounded(ctx, c.d, tideprovider.OpCreate, func(ctx context.Context) (provider.Ack, error) { return c.next.Create(ctx, req) })
}

func (c *callTimeout) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	return bounded(ctx, c.d, tideprovider.OpConfigure, func(ctx context.Context) (provider.Ack, error) { return c.next.Configure(ctx, req) })
}

func (c *callTimeout) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return bounded(ctx, c.d, tideprovider.OpDrain, func(ctx context.Context) (provider.Ack, error) { return c.next.Drain(ctx, req) })
}

func (c *callTimeout) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	return bounded(ctx, c.d, tideprovider.OpDelete, func(ctx context.Context) (provider.Ack, error) { return c.next.Delete(ctx, req) })
}

func (c *callTimeout) Get(ctx context.Context, id string) (provider.Machine, error) {
	return bounded(ctx, c.d, tideprovider.OpGet, func(ctx context.Context) (provider.Machine, error) { return c.next.Get(ctx, id) })
}

func (c *callTimeout) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	return bounded(ctx, c.d, tideprovider.OpList, func(ctx context.Context) ([]provider.Machine, error) { return c.next.List(ctx, f) })
}
