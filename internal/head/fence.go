package head

import (
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/api"
	"github.com/tide-project/tide/internal/store"
)

// The fencing lease (issue 16). A worker cut off from the head keeps
// running its instances; at OfflineAfter the head declares it OFFLINE and
// requeues the instances whose restart policy asks for it. Without a lease
// the old attempt may still run while the new one starts elsewhere. With
// it:
//
//   - every heartbeat answer tells the worker the lease's terms
//     (api.WorkerLease) and which desired instances the head would requeue
//     (api.DesiredInstance.RequeuedIfLost);
//   - the worker stops those, and only those, once the head has surely
//     declared it lost: its last successful heartbeat's send time T +
//     PollTimeout + OfflineAfter + LivenessInterval + FenceMargin
//     (agent/fence.go). The head heard that heartbeat at A ≥ T, and maybe
//     one more, sent when T's answer arrived (at most PollTimeout after T,
//     the head holds a poll no longer) whose own answer was lost; it marks
//     the worker OFFLINE within LivenessInterval after OfflineAfter of
//     silence. So the worker's deadline is not before the head's
//     declaration (FenceMargin absorbs network delay): it never stops work
//     the head still counts on it for;
//   - the head holds each instance it requeued out of scheduling for
//     fenceHold after the declaration D: PollTimeout + LivenessInterval +
//     2 × FenceMargin + the grace period the fence stops with. D ≥ A +
//     OfflineAfter ≥ T + OfflineAfter, so the hold ends at least a margin
//     after the worker's deadline plus the grace period, when the SIGKILL
//     has landed: the old attempt is gone before a new one can start.
//
// Limit: a partition that lets heartbeats reach the head but loses every
// answer makes the worker fence while the head still counts it ONLINE;
// the instances then end FAILED with the fence's reason and are requeued
// by their policy (each attempt ran once, but work the head had not given
// up on was stopped). A head that is down for longer than the lease has the
// same effect.

// leaseOn reports whether the fencing lease is on (FenceMargin ≥ 0).
func (h *Head) leaseOn() bool { return h.cfg.FenceMargin >= 0 }

// fenceHold is how long an instance requeued from an OFFLINE worker waits
// before it may be placed again; 0 when the lease is off.
func (h *Head) fenceHold() time.Duration {
	if !h.leaseOn() {
		return 0
	}
	return h.cfg.PollTimeout + h.cfg.LivenessInterval + 2*h.cfg.FenceMargin + h.cfg.DefaultGracePeriod
}

// lease is the lease's terms sent on every heartbeat answer; nil when off.
func (h *Head) lease() *api.WorkerLease {
	if !h.leaseOn() {
		return nil
	}
	return &api.WorkerLease{PollTimeoutSeconds: h.cfg.PollTimeout.Seconds(), OfflineAfterSeconds: h.cfg.OfflineAfter.Seconds(),
		LivenessIntervalSeconds: h.cfg.LivenessInterval.Seconds(), MarginSeconds: h.cfg.FenceMargin.Seconds(),
		GracePeriodSeconds: h.cfg.DefaultGracePeriod.Seconds()}
}

// heldReason says, for a person, why a PENDING instance is held out of
// scheduling at now; "" when it is not.
func heldReason(notBefore time.Time, heldBy string, attempt int64, now time.Time) string {
	if notBefore.IsZero() || !now.Before(notBefore) {
		return ""
	}
	return fmt.Sprintf("held until %s (%s from now): worker %s went OFFLINE while it ran attempt %d, "+
		"which that worker's fence stops by then; a new attempt starts only after, so the instance never runs twice at once",
		notBefore.UTC().Format(time.RFC3339), notBefore.Sub(now).Round(time.Second), heldBy, attempt)
}

// instanceHeld is heldReason for a stored instance.
func instanceHeld(in *store.Instance, now time.Time) string {
	if in.Status != store.StatusPending {
		return ""
	}
	return heldReason(in.NotBefore, in.HeldBy, in.Attempt, now)
}
