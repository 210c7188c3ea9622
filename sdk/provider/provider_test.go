package provider

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tide-project/tide/api/provider/v1"
)

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{"m-1": true, "A.b_c": true, "": false, "-m": false, "has space": false,
		strings.Repeat("x", 63): true, strings.Repeat("x", 64): false} {
		if err := ValidName("machine_id", name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestStatusRoundTrip: every typed error survives ErrorToStatus and
// ErrorFromStatus with its kind and fields.
func TestStatusRoundTrip(t *testing.T) {
	errs := []error{
		NewInvalid("pool", "must be set"),
		NewNotFound("m1"),
		NewConflict("m1", Creating, "not idle"),
		NewStaleFence("p", Fence{"a", 1, 2}, Fence{"b", 3, 4}),
		NewQuotaExceeded("o", 3, errors.New("account")),
		NewInsufficientCapacity("o", nil),
		NewTransient(errors.New("throttled"), 1500*time.Millisecond),
	}
	for _, e := range errs {
		got := ErrorFromStatus(context.Background(), ErrorToStatus(e).Err())
		if got.Error() != e.Error() {
			t.Errorf("%v came back as %v", e, got)
		}
	}
	if st := ErrorToStatus(errors.New("boom")); st.Code() != codes.Unknown {
		t.Errorf("an untyped error has code %s, want UNKNOWN", st.Code())
	}
	if st := ErrorToStatus(context.Canceled); st.Code() != codes.Canceled {
		t.Errorf("context.Canceled has code %s", st.Code())
	}
}

// TestStatusWithoutDetails: a plugin that sends bare status codes still
// produces typed errors, decided by the code alone.
func TestStatusWithoutDetails(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		code  codes.Code
		check func(error) bool
	}{
		{codes.InvalidArgument, func(e error) bool { _, ok := As[*InvalidError](e); return ok }},
		{codes.NotFound, func(e error) bool { _, ok := As[*NotFoundError](e); return ok }},
		{codes.FailedPrecondition, func(e error) bool { _, ok := As[*ConflictError](e); return ok }},
		{codes.Aborted, func(e error) bool { _, ok := As[*StaleFenceError](e); return ok }},
		{codes.ResourceExhausted, func(e error) bool { _, ok := As[*QuotaExceededError](e); return ok }},
		{codes.Unavailable, func(e error) bool { _, ok := As[*TransientError](e); return ok }},
		{codes.DeadlineExceeded, func(e error) bool { _, ok := As[*TransientError](e); return ok }},
		{codes.Canceled, func(e error) bool { return errors.Is(e, context.Canceled) }},
		{codes.Internal, func(e error) bool { _, ok := As[*NotFoundError](e); return !ok && e != nil }},
	}
	for _, tt := range tests {
		if got := ErrorFromStatus(ctx, status.Error(tt.code, "bare")); !tt.check(got) {
			t.Errorf("bare %s came back as %T %v", tt.code, got, got)
		}
	}
	// The caller's own cancellation wins over the status.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := ErrorFromStatus(cctx, status.Error(codes.Unavailable, "x")); !errors.Is(got, context.Canceled) {
		t.Errorf("a cancelled caller got %v, want context.Canceled", got)
	}
}

func TestMachineWireRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 123).UTC()
	m := Machine{ID: "m1", Pool: "p", Offering: "o", State: Configured, Host: "h", Cluster: "c", Bootstrap: []byte("b"),
		Labels: map[string]string{"k": "v"}, CreatedAt: now, UpdatedAt: now.Add(time.Second), Reason: "r"}
	got := MachineFromPB(MachineToPB(&m))
	if got.ID != m.ID || got.State != m.State || !got.CreatedAt.Equal(m.CreatedAt) || !got.ReclaimAt.IsZero() ||
		got.Labels["k"] != "v" || string(got.Bootstrap) != "b" || got.Reason != "r" {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
	if s := stateFrom(pb.State(42)); s.Valid() {
		t.Fatalf("an unknown wire state became the valid state %q", s)
	}
}

func TestOfferingName(t *testing.T) {
	tests := []struct {
		o    Offering
		want string
	}{
		{Offering{Type: "m8", Zone: "z1", Kind: "spot"}, "m8/z1/spot"},
		{Offering{Type: "m8"}, "m8/on-demand"},
	}
	for _, tt := range tests {
		if got := tt.o.Name(); got != tt.want {
			t.Errorf("Name() = %q, want %q", got, tt.want)
		}
	}
}
