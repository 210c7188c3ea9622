package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// InsufficientCapacityError means the provider has no capacity left for an
// offering right now (a cloud's "insufficient instance capacity", or a spot
// market that is out). Nothing was created. The caller should skip the
// offering for a while and try the next-cheapest one.
type InsufficientCapacityError struct {
	// Offering is the offering that is out of capacity.
	Offering string
	// Err is the underlying cause, if any.
	Err error
}

// NewInsufficientCapacity returns an InsufficientCapacityError for offering.
func NewInsufficientCapacity(offering string, cause error) error {
	return &InsufficientCapacityError{Offering: offering, Err: cause}
}

// Error describes the failure.
func (e *InsufficientCapacityError) Error() string {
	return withCause(fmt.Sprintf("insufficient capacity for offering %q", e.Offering), e.Err)
}

// Unwrap returns the cause.
func (e *InsufficientCapacityError) Unwrap() error { return e.Err }

// IsInsufficientCapacity reports whether err is or wraps an InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool { return isType[*InsufficientCapacityError](err) }

// QuotaExceededError means creating a machine would exceed a quota the
// account has: per offering, or in total (Offering empty). Nothing was
// created. Retrying helps only once machines are deleted or quota is raised.
type QuotaExceededError struct {
	// Offering is the offering whose quota is exhausted; empty for the
	// provider-wide quota.
	Offering string
	// Limit is the quota, in machines.
	Limit int
	// Err is the underlying cause, if any.
	Err error
}

// NewQuotaExceeded returns a QuotaExceededError; offering is empty for the
// provider-wide quota.
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

// IsQuotaExceeded reports whether err is or wraps a QuotaExceededError.
func IsQuotaExceeded(err error) bool { return isType[*QuotaExceededError](err) }

// NotFoundError means the machine does not exist in the pool named by the
// call: it never existed, belongs to another pool, or is gone. For Delete it
// is the successful end.
type NotFoundError struct {
	MachineID string
}

// NewNotFound returns a NotFoundError for the machine.
func NewNotFound(machineID string) error { return &NotFoundError{MachineID: machineID} }

// Error describes the failure.
func (e *NotFoundError) Error() string { return fmt.Sprintf("machine %q not found", e.MachineID) }

// IsNotFound reports whether err is or wraps a NotFoundError.
func IsNotFound(err error) bool { return isType[*NotFoundError](err) }

// IgnoreNotFound returns nil when err is a NotFoundError and err otherwise;
// handy after Delete, whose end is NotFound.
func IgnoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}

// StaleFenceError means the call's fence is older than the highest the
// provider has seen for the pool (or the same epoch from another
// controller). The call changed nothing. The caller has been deposed and must
// stop acting on the pool.
type StaleFenceError struct {
	Pool string
	// Got is the fence the call carried.
	Got Fence
	// Highest is the fence the provider holds for the pool.
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

// IsStaleFence reports whether err is or wraps a StaleFenceError.
func IsStaleFence(err error) bool { return isType[*StaleFenceError](err) }

// TransientError means the call failed in a way that may pass (a timeout, a
// throttled or unavailable API). The call may or may not have taken effect;
// retrying it unchanged is always safe because calls are idempotent.
type TransientError struct {
	// RetryAfter, when not zero, is how long the provider asks the caller to
	// wait before retrying.
	RetryAfter time.Duration
	// Err is the underlying cause.
	Err error
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

// IsTransient reports whether err is or wraps a TransientError.
func IsTransient(err error) bool { return isType[*TransientError](err) }

// ConflictError means the machine exists but the call does not apply to its
// state (Configure on a machine that is not Idle, a Create whose id is taken
// by another pool or offering or was deleted). The call changed nothing; the
// caller should re-read the machine and decide again.
type ConflictError struct {
	MachineID string
	// State is the machine's state at the time of the call; empty for a
	// deleted id.
	State State
	// Detail says what conflicts.
	Detail string
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

// IsConflict reports whether err is or wraps a ConflictError.
func IsConflict(err error) bool { return isType[*ConflictError](err) }

// InvalidError means a request field is malformed or names something the
// provider does not have (e.g. an unknown offering). Retrying will not help.
type InvalidError struct {
	// Field names the request field, e.g. "machine_id" or "fence.epoch".
	Field  string
	Detail string
}

// NewInvalid returns an InvalidError for the field.
func NewInvalid(field, detail string) error { return &InvalidError{Field: field, Detail: detail} }

// Error describes the failure.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Detail }

// IsInvalid reports whether err is or wraps an InvalidError.
func IsInvalid(err error) bool { return isType[*InvalidError](err) }

// Error kinds returned by Kind, used as metric labels and event reasons.
const (
	KindNone                 = ""
	KindInsufficientCapacity = "insufficient_capacity"
	KindQuotaExceeded        = "quota_exceeded"
	KindNotFound             = "not_found"
	KindStaleFence           = "stale_fence"
	KindTransient            = "transient"
	KindConflict             = "conflict"
	KindInvalid              = "invalid"
	KindCanceled             = "canceled"
	KindUnknown              = "unknown"
)

// Kind classifies err into one of the Kind* constants: KindNone for nil,
// KindCanceled for context cancellation and deadlines, KindUnknown for an
// error of no known type.
func Kind(err error) string {
	switch {
	case err == nil:
		return KindNone
	case IsStaleFence(err):
		return KindStaleFence
	case IsInsufficientCapacity(err):
		return KindInsufficientCapacity
	case IsQuotaExceeded(err):
		return KindQuotaExceeded
	case IsNotFound(err):
		return KindNotFound
	case IsConflict(err):
		return KindConflict
	case IsInvalid(err):
		return KindInvalid
	case IsTransient(err):
		return KindTransient
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return KindCanceled
	}
	return KindUnknown
}

func isType[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

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
