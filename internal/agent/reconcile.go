package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

// key names one local process: an instance at one attempt. Two attempts of
// one instance are two processes; a report always carries its attempt, so
// the head can fence off the stale one.
type key struct {
	ID      string
	Attempt int64
}

// phase is where a local process is in its life.
type phase int

const (
	// phaseRunning: started (or adopted) and not asked to stop.
	phaseRunning phase = iota + 1
	// phaseStopping: SIGTERM sent, SIGKILL due at the deadline.
	phaseStopping
	// phaseExited: gone; its outcome is reported until the head forgets it.
	phaseExited
)

// localView is what planning needs to know about one local process.
type localView struct {
	Key   key
	Phase phase
}

// stopAction asks to stop one process with a grace period before SIGKILL.
type stopAction struct {
	Key   key
	Grace time.Duration
}

// reconcilePlan is what to do to make the local processes match the head's
// desired state.
type reconcilePlan struct {
	// Start are desired instances the head expects to be started here.
	Start []httpapi.DesiredInstance
	// Stop are running processes that are no longer desired.
	Stop []stopAction
	// Drop are exited processes the head no longer asks about: their
	// records are deleted and they are no longer reported.
	Drop []key
}

// planReconcile compares the desired set with the local processes (PyLet's
// worker reconcile, keyed by (instance, attempt)):
//   - a running process whose key is not desired is stopped, with the grace
//     period of its cancel request when the head sent one (tide's stopping
//     list), else defaultGrace; a stale attempt (a,1) while (a,2) is desired
//     is stopped because its key is not desired;
//   - an exited process neither desired nor being cancelled is dropped; one
//     that is still desired or still being cancelled keeps being reported, so
//     the head learns its outcome before the worker forgets it;
//   - a desired key missing locally is started when the head expects
//     ASSIGNED. When it expects RUNNING or UNKNOWN the process was lost
//     (a worker restart that could not adopt it) and reports say NOT_FOUND;
//     starting it again could run it twice.
//
// It is a pure function of its arguments; the result lists keys in the
// order of the inputs.
func planReconcile(desired []httpapi.DesiredInstance, stopping []httpapi.StoppingInstance, local []localView,
	defaultGrace time.Duration) reconcilePlan {
	want := make(map[key]bool, len(desired))
	for _, d := range desired {
		want[key{d.InstanceID, d.Attempt}] = true
	}
	grace := make(map[key]time.Duration, len(stopping))
	for _, s := range stopping {
		g := time.Duration(s.GracePeriodSeconds * float64(time.Second))
		grace[key{s.InstanceID, s.Attempt}] = max(g, 0)
	}
	have := make(map[key]bool, len(local))
	var p reconcilePlan
	for _, l := range local {
		have[l.Key] = true
		if want[l.Key] {
			continue
		}
		switch l.Phase {
		case phaseRunning:
			g, ok := grace[l.Key]
			if !ok {
				g = defaultGrace
			}
			p.Stop = append(p.Stop, stopAction{Key: l.Key, Grace: g})
		case phaseExited:
			if _, cancelling := grace[l.Key]; !cancelling {
				p.Drop = append(p.Drop, l.Key)
			}
		}
	}
	for _, d := range desired {
		k := key{d.InstanceID, d.Attempt}
		if !have[k] && (d.ExpectedStatus == "" || d.ExpectedStatus == "ASSIGNED") {
			p.Start = append(p.Start, d)
		}
	}
	return p
}

// outcome is how an exited process ended.
type outcome struct {
	// Code is the exit code; -N when killed by signal N (Python's
	// returncode, which PyLet reports).
	Code int
	// Stopped says the worker asked it to stop (SIGTERM or SIGKILL).
	Stopped bool
	// StartFailed says it never ran (no port, exec failure).
	StartFailed bool
	// Reason says why a process that never started did not; reported as
	// the instance's failure reason.
	Reason string
	// Fenced is the reason when the fencing lease stopped it: reported
	// FAILED with this reason, whatever its exit code.
	Fenced string
}

// reportView is what a heartbeat report needs about one local process.
type reportView struct {
	Key     key
	Phase   phase
	Port    int
	Outcome outcome
}

// buildReports returns PyLet's instance reports: one for every local
// process, running, stopping or exited, on every heartbeat (the head
// completes the cancel of a never-started instance when a heartbeat that has
// seen the cancel does not report it, so nothing local may be left out),
// plus NOT_FOUND for each instance the head last said should be running
// here (expected RUNNING or UNKNOWN) that has no local process.
func buildReports(local []reportView, lastDesired []httpapi.DesiredInstance) []httpapi.InstanceReport {
	out := make([]httpapi.InstanceReport, 0, len(local))
	have := make(map[key]bool, len(local))
	for _, l := range local {
		have[l.Key] = true
		r := httpapi.InstanceReport{InstanceID: l.Key.ID, Attempt: l.Key.Attempt}
		switch l.Phase {
		case phaseRunning:
			r.Status = "RUNNING"
			if l.Port > 0 {
				port := l.Port
				r.Port = &port
			}
		case phaseStopping:
			r.Status = "STOPPING"
		case phaseExited:
			code := l.Outcome.Code
			r.ExitCode = &code
			switch {
			case l.Outcome.Fenced != "":
				r.Status = "FAILED"
				r.FailureReason = l.Outcome.Fenced
			case l.Outcome.Stopped:
				r.Status = "CANCELLED"
			case code == 0 && !l.Outcome.StartFailed:
				r.Status = "COMPLETED"
			default:
				r.Status = "FAILED"
				r.FailureReason = l.Outcome.Reason
			}
		}
		out = append(out, r)
	}
	for _, d := range lastDesired {
		k := key{d.InstanceID, d.Attempt}
		if !have[k] && d.ExpectedStatus != "" && d.ExpectedStatus != "ASSIGNED" {
			out = append(out, httpapi.InstanceReport{InstanceID: k.ID, Attempt: k.Attempt, Status: "NOT_FOUND"})
		}
	}
	slices.SortStableFunc(out, func(a, b httpapi.InstanceReport) int {
		switch {
		case a.InstanceID < b.InstanceID:
			return -1
		case a.InstanceID > b.InstanceID:
			return 1
		}
		return int(a.Attempt - b.Attempt)
	})
	return out
}

// capRequeuedGrace caps the grace period of stops of processes the head
// has requeued (marked RequeuedIfLost in prev, not being cancelled) at the
// lease's grace period: the head holds the new attempt for that long after
// the fence's deadline, not for the worker's own default.
func capRequeuedGrace(stops []stopAction, prev []httpapi.DesiredInstance, stopping []httpapi.StoppingInstance, l lease) []stopAction {
	if l.terms == nil {
		return stops
	}
	requeued := map[key]bool{}
	for _, d := range prev {
		if d.RequeuedIfLost {
			requeued[key{d.InstanceID, d.Attempt}] = true
		}
	}
	for _, s := range stopping {
		delete(requeued, key{s.InstanceID, s.Attempt})
	}
	for i := range stops {
		if requeued[stops[i].Key] {
			stops[i].Grace = min(stops[i].Grace, l.grace())
		}
	}
	return stops
}

// sortViews orders local views by instance, then attempt.
func sortViews(local []localView) {
	slices.SortFunc(local, func(a, b localView) int {
		if a.Key.ID != b.Key.ID {
			return strings.Compare(a.Key.ID, b.Key.ID)
		}
		return int(a.Key.Attempt - b.Key.Attempt)
	})
}
