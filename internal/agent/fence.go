package agent

import (
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/httpapi"
)

// The worker's half of the fencing lease (issue 16; the head's half and
// the argument are in head/fence.go). A worker cut off from the head keeps
// running its instances. Once the head has surely declared it lost, the
// head has requeued (or will, by the time the SIGKILL lands) every
// instance whose restart policy asks for it, and holds the new attempt out
// of scheduling until this fence is over; so the worker stops exactly
// those instances then, and never before:
//
//	deadline = send time of the last successful heartbeat
//	         + poll timeout + offline-after + liveness interval + margin
//
// with the head's values, from the last heartbeat answer (httpapi.WorkerLease).
// Restart-never instances are never stopped by the fence: the head keeps
// them UNKNOWN and runs nothing else in their place. A worker that has no
// lease terms (an older head, or none answered since this start) fences
// nothing.

// The lease is measured on a monotonic clock (Agent.mono): a step of the
// worker's wall clock must not end it (nor extend it).

// lease is what the worker knows of its fencing lease.
type lease struct {
	// terms are the head's, from the last successful heartbeat; nil: none.
	terms *httpapi.WorkerLease
	// sent is when the last successful heartbeat was sent (its request
	// written), on the monotonic clock; ok says there was one since this
	// start. sentWall is the same moment on the wall clock, for people.
	sent     time.Duration
	ok       bool
	sentWall time.Time
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// deadline is when (on the monotonic clock) the head has surely declared
// this worker lost; false when the worker has no lease.
func (l lease) deadline() (time.Duration, bool) {
	if l.terms == nil || !l.ok {
		return 0, false
	}
	return l.sent + l.length(), true
}

// length is the lease's length after the last successful heartbeat.
func (l lease) length() time.Duration {
	t := l.terms
	return seconds(t.PollTimeoutSeconds) + seconds(t.OfflineAfterSeconds) + seconds(t.LivenessIntervalSeconds) +
		seconds(t.MarginSeconds)
}

// grace is the grace period the fence stops with: the head's, which its
// hold counts on.
func (l lease) grace() time.Duration {
	if l.terms == nil {
		return 0
	}
	return max(seconds(l.terms.GracePeriodSeconds), 0)
}

// planFence returns the local processes the fence stops at now: running
// ones whose key the head last desired with RequeuedIfLost, once the
// deadline has passed; none before it. It is a pure function of its
// arguments; keys come in the order of local.
func planFence(l lease, now time.Duration, desired []httpapi.DesiredInstance, local []localView) []key {
	dl, ok := l.deadline()
	if !ok || now < dl {
		return nil
	}
	requeued := make(map[key]bool, len(desired))
	for _, d := range desired {
		if d.RequeuedIfLost {
			requeued[key{d.InstanceID, d.Attempt}] = true
		}
	}
	var out []key
	for _, lv := range local {
		if lv.Phase == phaseRunning && requeued[lv.Key] {
			out = append(out, lv.Key)
		}
	}
	return out
}

// fenceReason is the end reason of a fenced attempt, for a person.
func (a *Agent) fenceReason() string {
	t := a.lease.terms
	dl := a.lease.sentWall.Add(a.lease.length())
	return fmt.Sprintf("FENCED: worker %s had not reached the head since %s; by %s (poll timeout %s + offline-after %s + "+
		"liveness interval %s + margin %s later) the head had surely declared it OFFLINE and requeued this instance, "+
		"so the worker stopped this attempt before the new one could start",
		a.workerID, a.lease.sentWall.UTC().Format(time.RFC3339), dl.UTC().Format(time.RFC3339),
		seconds(t.PollTimeoutSeconds), seconds(t.OfflineAfterSeconds), seconds(t.LivenessIntervalSeconds),
		seconds(t.MarginSeconds))
}

// fenceIfDue stops the processes planFence names at the clock's now. It
// reports whether it stopped any. The loop calls it first on every wake-up,
// so a worker resumed after SIGSTOP past its deadline fences before it
// acts on anything else (a stale answer, a process exit, a retry).
func (a *Agent) fenceIfDue() bool {
	now := a.mono()
	keys := planFence(a.lease, now, a.lastDesired, a.localViews())
	if len(keys) == 0 {
		return false
	}
	dl, _ := a.lease.deadline()
	reason := a.fenceReason()
	a.log.Warn("fencing lease over: the head has surely declared this worker lost; stopping the instances it requeued",
		"instances", len(keys), "last_heartbeat_sent", a.lease.sentWall, "late", now-dl)
	for _, k := range keys {
		p := a.procs[k]
		p.rec.Fenced = reason
		a.note(k.ID, fmt.Sprintf("\n[tide worker %s: attempt %d stopped at %s: %s]\n", a.workerID, k.Attempt,
			a.clk.Now().UTC().Format(time.RFC3339), reason))
		a.stop(p, a.lease.grace())
	}
	return true
}

// armFence (re)arms the timer that wakes the loop at the lease's deadline.
func (a *Agent) armFence() {
	dl, ok := a.lease.deadline()
	if !ok {
		a.stopFenceTimer()
		return
	}
	if a.fenceTimer != nil && a.fenceAt == dl {
		return
	}
	a.stopFenceTimer()
	a.fenceAt = dl
	a.fenceTimer = a.clk.NewTimer(max(dl-a.mono(), 0))
}

// elapsedClock is a clock that can tell the time elapsed on a clock that
// is never stepped (clock.Real: the process's monotonic clock).
type elapsedClock interface {
	Elapsed() time.Duration
}

// monoFor returns the monotonic clock of clk: its Elapsed when it has one,
// else the time since now on clk itself (a test's fake clock is never
// stepped behind the test's back).
func monoFor(clk clock.Clock) func() time.Duration {
	if e, ok := clk.(elapsedClock); ok {
		return e.Elapsed
	}
	start := clk.Now()
	return func() time.Duration { return clk.Now().Sub(start) }
}

func (a *Agent) stopFenceTimer() {
	if a.fenceTimer != nil {
		a.fenceTimer.Stop()
		a.fenceTimer = nil
	}
}

// note appends a line for a person to an instance's log.
func (a *Agent) note(instance, line string) {
	l, err := a.logs.acquire(instance)
	if err != nil {
		a.log.Warn("note in instance log", "instance", instance, "err", err)
		return
	}
	defer a.logs.release(instance, l)
	if _, err := l.Write([]byte(line)); err != nil {
		a.log.Warn("note in instance log", "instance", instance, "err", err)
	}
}

// localViews lists the local processes, sorted by key (as reconcile does).
func (a *Agent) localViews() []localView {
	local := make([]localView, 0, len(a.procs))
	for _, p := range a.procs {
		local = append(local, localView{Key: p.key, Phase: p.phase})
	}
	sortViews(local)
	return local
}
