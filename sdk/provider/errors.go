package provider

import (
	"errors"
	"fmt"
	"time"
)

// InvalidError: a malformed field or an unknown offering. Do not retry.
type InvalidError struct {
	Field  string
	Detail string
}

// NewInvalid returns an InvalidError for the field.
func NewInvalid(field, detail string) error { return &InvalidError{Field: field, Detail: detail} }

// Error describes the failure.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Detail }

// NotFoundError: no such machine in the pool; the successful end of Delete.
type NotFoundError struct {
	MachineID string
}

// NewNotFound returns a NotFoundError.
func NewNotFound(machineID string) error { return &NotFoundError{MachineID: machineID} }

// Error describes the failure.
func (e *NotFoundError) Error() string { return fmt.Sprintf("machine %q not found", e.MachineID) }

// ConflictError: the call does not apply to the machine's state, or the id
// is taken by another pool or offering, or was deleted (State empty).
type ConflictError struct {
	MachineID string
	State     State
	Detail    string
}

// NewConflict returns a ConflictError.
func NewConflict(machineID string, state State, detail string) error {
	return &ConflictError{MachineID: machineID, State: state, Detail: detail}
}

// Error describes the failure.
func (e *ConflictError) Error() string {
	if e.State == "" {
		return fmt.Sprintf("machine %q: %s", e.MachineID, e.Detail)
	}
	return fmt.Sprintf("machine %q is %s: %s", e.MachineID, e.State, e.Detail)
}

// StaleFenceError: the call's fence is older than the pool's highest; the
// caller is deposed. Nothing changed.
type StaleFenceError struct {
	Pool    string
	Got     Fence
	Highest Fence
}

// NewStaleFence returns a StaleFenceError.
func NewStaleFence(pool string, got, highest Fence) error {
	return &StaleFenceError{Pool: pool, Got: got, Highest: highest}
}

// Error describes the failure.
func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("stale fence for pool %q: got %s, pool is held by %s", e.Pool, e.Got, e.Highest)
}

// QuotaExceededError: an account quota (of Offering, or in total when empty)
// is full. Nothing was created.
type QuotaExceededError struct {
	Offering string
	Limit    int
	Err      error
}

// NewQuotaExceeded returns a QuotaExceededError.
func NewQuotaExceeded(offering string, limit int, cause error) error {
	return &QuotaExceededError{Offering: offering, Limit: limit, Err: cause}
}

// Error describes the failure.
func (e *QuotaExceededError) Error() string {
	scope := "total quota"
	if e.Offering != "" {
		scope = fmt.Sprintf("quota of offering %q", e.Offering)
	}
	return withCause(fmt.Sprintf("%s exceeded (limit %d machines)", scope, e.Limit), e.Err)
}

// Unwrap returns the cause.
func (e *QuotaExceededError) Unwrap() error { return e.Err }

// InsufficientCapacityError: the offering is out of capacity right now.
// Nothing was created; another offering may succeed.
type InsufficientCapacityError struct {
	Offering string
	Err      error
}

// NewInsufficientCapacity returns an InsufficientCapacityError.
func NewInsufficientCapacity(offering string, cause error) error {
	return &InsufficientCapacityError{Offering: offering, Err: cause}
}

// Error describes the failure.
func (e *InsufficientCapacityError) Error() string {
	return withCause(fmt.Sprintf("insufficient capacity for offering %q", e.Offering), e.Err)
}

// Unwrap returns the cause.
func (e *InsufficientCapacityError) Unwrap() error { return e.Err }

// TransientError: a failure that may pass; the call may or may not have
// taken effect, and retrying it unchanged is safe.
type TransientError struct {
	RetryAfter time.Duration
	Err        error
}

// NewTransient returns a TransientError wrapping cause.
func NewTransient(cause error, retryAfter time.Duration) error {
	return &TransientError{Err: cause, RetryAfter: retryAfter}
}

// Error describes the failure.
func (e *TransientError) Error() string {
	msg := "transient provider error"
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return withCause(msg, e.Err)
}

// Unwrap returns the cause.
func (e *TransientError) Unwrap() error { return e.Err }

func withCause(msg string, cause error) string {
	if cause == nil {
		return msg
	}
	return msg + ": " + cause.Error()
}

// As is errors.As with the target type as a type parameter: it returns the
// first error of type T in err's tree.
func As[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
