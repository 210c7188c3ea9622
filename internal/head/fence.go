package head

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/store"
)

// The fencing lease (issue 16). A worker cut off from the head keeps
// running its instances; at OfflineAfter the head declares it OFFLINE and
// requeues the instances whose restart policy asks for it. Without a lease
// the old attempt may still run while the new one starts elsewhere. With
// it:
//
//   - every heartbeat answer tells the worker the lease's terms
//     (httpapi.WorkerLease) and which desired instances the head would requeue
//     (httpapi.DesiredInstance.RequeuedIfLost);
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
// A pool controller that gives a machine up (lost, failed, reclaimed,
// scaled away) has the head forget its worker first (RemoveWorker), before
// it deletes the machine, possibly while that worker is still ONLINE and
// running. The instances it requeues then are held too, for removeHold:
// the worker's last successful heartbeat was sent at the latest at the
// removal R, so its fence stops them by R + PollTimeout + OfflineAfter +
// LivenessInterval + FenceMargin, plus the grace period; one more margin,
// as above. (Its later heartbeats are refused, and a worker that registers
// again under its name gets an empty desired set and stops them sooner.)
//
// The hold ends early when the lost worker's machine is known to be gone:
// its pool controller saw the provider answer the machine's Delete with
// NotFound (controller.DeletionObserver, the end state of Delete in the
// provider contract), so the worker and every process it started no
// longer exist and the old attempt cannot run. ReleaseHold then clears the
// hold of the instances requeued from that worker at once. Nothing weaker
// releases it: not OFFLINE, not a drain, not a Delete accepted but not yet
// confirmed, not the worker being forgotten (RemoveWorker), which a pool
// controller does before it deletes the machine.
//
// Limit: a partition that lets heartbeats reach the head but loses every
// answer makes the worker fence while the head still counts it ONLINE;
// the instances then end FAILED with the fence's reason and are requeued
// by their policy (each attempt ran once, but work the head had not given
// up on was stopped). A head that is down for longer than the lease has the
// same effect.

// Late completions. The lost worker may have finished the old attempt
// before its fence ran out, and report it COMPLETED when it is heard from
// again (a healed partition, or a worker that registers again after its
// pool controller forgot it). When nothing has run the instance since,
// that report ends it COMPLETED instead of it running a second time
// (store.HeartbeatResult.Late): the store accepts it only for a successful
// COMPLETED report of the very attempt the instance was requeued at, while
// it is still PENDING at that attempt, unassigned, not cancelled, and held
// by the reporting worker, in the heartbeat's own transaction. Every
// assignment increments the attempt and clears HeldBy, so those
// conditions say no other attempt has begun, and Assign, which needs
// PENDING, cannot place it after. A FAILED or fenced attempt, a
// restart-always instance (which its completion would requeue anyway), and
// a hold released by a confirmed deletion keep the requeue.

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

// removeHold is how long an instance requeued from a worker the head
// forgets while it may still run (RemoveWorker) waits before it may be
// placed again: fenceHold plus OfflineAfter, since that worker may have
// heartbeated successfully up to the removal; 0 when the lease is off.
func (h *Head) removeHold() time.Duration {
	if !h.leaseOn() {
		return 0
	}
	return h.fenceHold() + h.cfg.OfflineAfter
}

// lease is the lease's terms sent on every heartbeat answer; nil when off.
func (h *Head) lease() *httpapi.WorkerLease {
	if !h.leaseOn() {
		return nil
	}
	return &httpapi.WorkerLease{PollTimeoutSeconds: h.cfg.PollTimeout.Seconds(), OfflineAfterSeconds: h.cfg.OfflineAfter.Seconds(),
		LivenessIntervalSeconds: h.cfg.LivenessInterval.Seconds(), MarginSeconds: h.cfg.FenceMargin.Seconds(),
		GracePeriodSeconds: h.cfg.DefaultGracePeriod.Seconds()}
}

// heldReason says, for a person, why a PENDING instance is held out of
// scheduling at now; "" when it is not.
func heldReason(notBefore time.Time, heldBy string, attempt int64, now time.Time) string {
	if notBefore.IsZero() || !now.Before(notBefore) {
		return ""
	}
	return fmt.Sprintf("held until %s (%s from now): worker %s was lost (OFFLINE, or its machine given up) while it ran attempt %d, "+
		"which that worker's fence stops by then; a new attempt starts only after (or once the machine is confirmed deleted), "+
		"so the instance never runs twice at once",
		notBefore.UTC().Format(time.RFC3339), notBefore.Sub(now).Round(time.Second), heldBy, attempt)
}

// instanceHeld is heldReason for a stored instance.
func instanceHeld(in *store.Instance, now time.Time) string {
	if in.Status != store.StatusPending {
		return ""
	}
	return heldReason(in.NotBefore, in.HeldBy, in.Attempt, now)
}

// ReasonHoldReleased is the reason of the event ReleaseHold records.
const ReasonHoldReleased = "hold-released"

// ReleaseHold ends, at once, the fence hold of the instances requeued from
// worker, whose machine (of pool) the caller knows for certain is deleted:
// they become schedulable now instead of at their NotBefore. It records a
// hold-released event and counts them in
// tide_head_fence_holds_released_total, and returns their ids (none when
// nothing was held). Only a confirmed deletion may call it (see the top of
// this file): while the machine may exist, the hold is what keeps an
// instance from running twice at once.
func (h *Head) ReleaseHold(ctx context.Context, pool, worker, machine string) ([]string, error) {
	ids, err := h.st.ReleaseHold(ctx, worker, h.clk.Now())
	if err != nil || len(ids) == 0 {
		return ids, err
	}
	h.m.released.Add(float64(len(ids)))
	h.log.Info("fence hold released: machine deleted", "worker", worker, "machine", machine, "instances", ids)
	h.Poke()
	if err := h.RecordEvent(ctx, Event{Pool: pool, Node: machine, Type: "Normal", Reason: ReasonHoldReleased,
		Message: fmt.Sprintf("hold released: worker %s's machine %s was deleted, so its old attempts cannot run; "+
			"%s requeued from it may start at once", worker, machine, countedIDs(ids, 10))}); err != nil {
		h.log.Warn("record hold-released event", "worker", worker, "err", err)
	}
	return ids, nil
}

// ReasonLateCompletion is the reason of the event a late completion
// records.
const ReasonLateCompletion = "late-completion"

// lateCompleted records the late completions a heartbeat of worker had
// the store accept (see the top of this file): a late-completion event for
// each, counted in tide_head_late_completions_total.
func (h *Head) lateCompleted(ctx context.Context, worker string, late []store.LateCompletion) {
	h.m.late.Add(float64(len(late)))
	for _, l := range late {
		h.log.Info("late completion accepted", "worker", worker, "instance", l.InstanceID, "attempt", l.Attempt)
		if err := h.RecordEvent(ctx, Event{Pool: l.Pool, Node: worker, Type: "Normal", Reason: ReasonLateCompletion,
			Message: fmt.Sprintf("instance %s: worker %s, lost while it ran attempt %d, reported it COMPLETED; no other "+
				"attempt had begun, so the instance is COMPLETED and will not run again", l.InstanceID, worker, l.Attempt)}); err != nil {
			h.log.Warn("record late-completion event", "worker", worker, "instance", l.InstanceID, "err", err)
		}
	}
}

// countedIDs says "instance a" or "3 instances: a, b, c", naming at most
// limit of them.
func countedIDs(ids []string, limit int) string {
	if len(ids) == 1 {
		return "instance " + ids[0]
	}
	named := ids[:min(len(ids), limit)]
	s := fmt.Sprintf("%d instances: %s", len(ids), strings.Join(named, ", "))
	if len(ids) > limit {
		s += fmt.Sprintf(" and %d more", len(ids)-limit)
	}
	return s
}
