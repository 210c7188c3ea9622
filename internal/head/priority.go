package head

import (
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/scheduler"
	"github.com/tide-project/tide/internal/store"
)

// Event reasons and the failure reason of instance preemption.
const (
	// ReasonPreempting is the event of a running instance chosen to make
	// room for waiting work of higher priority: it runs on for
	// Config.PreemptGrace.
	ReasonPreempting = "Preempting"
	// ReasonInstancePreempted is the event of a preempted instance stopped
	// and requeued once its grace passed.
	ReasonInstancePreempted = "InstancePreempted"
	// FailurePreempted is the failure reason a preempted instance carries
	// while it waits again (its attempt ended by preemption).
	FailurePreempted = "PREEMPTED"
)

// eviction is a running instance chosen to be preempted: it is stopped
// and requeued at deadline unless the waiting work no longer needs it.
type eviction struct {
	attempt  int64
	worker   string
	pool     string
	forID    string
	deadline time.Time
}

// preemptible reports, per pool, whether waiting work there may preempt
// lower-priority restartable work: the pool cannot grow (a pool no
// autoscaler runs, or one whose desired node count is at its max).
func (h *Head) preemptible() func(pool string) bool {
	if h.cfg.PreemptGrace < 0 {
		return nil
	}
	atMax := map[string]bool{}
	for _, ps := range h.poolStatuses() {
		atMax[ps.Name] = ps.Desired >= ps.Nodes.Max
	}
	return func(pool string) bool {
		at, ok := atMax[pool]
		return !ok || at
	}
}

// evictingSet is the ids of the instances being preempted.
func (h *Head) evictingSet() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.evicting) == 0 {
		return nil
	}
	out := make(map[string]bool, len(h.evicting))
	for id := range h.evicting {
		out[id] = true
	}
	return out
}

// preempt acts on a scheduling pass's preemptions: a victim newly chosen
// gets an event naming both instances and PreemptGrace to run on; one
// whose grace passed is stopped and requeued (store.MoveInstance: only a
// restartable instance, fenced by its attempt); a victim the pass no
// longer needs is spared. pool maps instance ids to their pools. It
// returns the victims it requeued.
func (h *Head) preempt(ctx context.Context, prs []scheduler.Preemption, pool map[string]string, now time.Time) ([]string, error) {
	h.mu.Lock()
	if h.evicting == nil {
		h.evicting = map[string]eviction{}
	}
	var (
		events []Event
		due    []string
	)
	seen := map[string]bool{}
	for _, pr := range prs {
		for _, v := range pr.Victims {
			seen[v.ID] = true
			e, ok := h.evicting[v.ID]
			if !ok {
				e = eviction{attempt: v.Attempt, worker: pr.Worker, pool: pool[v.ID], forID: pr.For,
					deadline: now.Add(h.cfg.PreemptGrace)}
				h.evicting[v.ID] = e
				events = append(events, Event{Time: now, Pool: e.pool, Node: pr.Worker, Type: controller.TypeWarning,
					Reason: ReasonPreempting, Message: fmt.Sprintf(
						"instance %s (priority %d) preempts instance %s (priority %d, restartable) on %s: it stops in %s and is requeued",
						pr.For, pr.ForPriority, v.ID, v.Priority, pr.Worker, h.cfg.PreemptGrace)})
			}
			if !now.Before(e.deadline) {
				due = append(due, v.ID)
			}
		}
	}
	for id := range h.evicting {
		if !seen[id] {
			delete(h.evicting, id) // placed elsewhere, cancelled or no longer needed
		}
	}
	todo := make(map[string]eviction, len(due))
	for _, id := range due {
		todo[id] = h.evicting[id]
	}
	h.mu.Unlock()
	var (
		errs  []error
		moved []string
	)
	for _, id := range due {
		e := todo[id]
		ok, err := h.st.MoveInstance(ctx, id, e.attempt, e.worker, FailurePreempted, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.mu.Lock()
		delete(h.evicting, id)
		h.mu.Unlock()
		if ok {
			moved = append(moved, id)
			h.notify.wake(e.worker)
			events = append(events, Event{Time: now, Pool: e.pool, Node: e.worker, Type: controller.TypeWarning,
				Reason: ReasonInstancePreempted, Message: fmt.Sprintf(
					"instance %s stopped on %s and requeued: preempted by instance %s of higher priority", id, e.worker, e.forID)})
		}
	}
	for _, ev := range events {
		if err := h.RecordEvent(ctx, ev); err != nil {
			errs = append(errs, err)
		}
	}
	if len(due) > 0 {
		h.Poke()
	}
	if len(errs) > 0 {
		return moved, fmt.Errorf("preempt: %w", errs[0])
	}
	return moved, nil
}

// poolOf maps the instances of st to their pools.
func poolOf(st *store.SchedulingState) map[string]string {
	out := make(map[string]string, len(st.Active))
	for _, s := range st.Active {
		out[s.ID] = s.Pool
	}
	return out
}
