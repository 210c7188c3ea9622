package head

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// A gang that started is one unit until it ends (issue 36): its members
// rendezvous, so one that stops leaves the others waiting on it. When a
// member of a running gang ends its attempt and is requeued (its worker was
// lost or it failed, under its restart policy; it was preempted or moved),
// the head restarts the whole gang when it may: every other member is
// stopped and requeued too (failure reason GANG_RESTART, event
// GangRestart), and the scheduler places the gang whole again, with new
// TIDE_GANG_HOSTS for every rank. A gang may restart when its members are
// restartable (the flag that lets tide stop one and start it again
// elsewhere). Otherwise, and whenever a member ended for good (FAILED or
// CANCELLED, so the gang can never be whole again; also while the gang
// waits whole to start again), the gang fails whole: its waiting members
// fail with the reason (GANG_BROKEN) and its running ones are cancelled
// (event GangFailed). Members that COMPLETED are left alone and are not run
// again. A member whose worker is only unreachable (UNKNOWN) is waited for.
// A restarted gang waits for placement like a new one: its max_wait counts
// from the restart.
const (
	// FailureGangRestart is the failure reason of a gang member's attempt
	// ended because another member of its gang ended its own: the gang
	// restarts whole.
	FailureGangRestart = "GANG_RESTART"
	// ReasonGangBroken starts the failure reason of the waiting members of
	// a gang failed whole because a member ended after the gang started.
	ReasonGangBroken = "GANG_BROKEN"
	// ReasonGangRestart is the event of a gang restarted whole.
	ReasonGangRestart = "GangRestart"
	// ReasonGangFailed is the event of a started gang failed whole.
	ReasonGangFailed = "GangFailed"
)

// startedGang is what one scheduling state shows of a gang with placed
// members.
type startedGang struct {
	id, name string
	size     int
	pool     string
	// placed are the members ASSIGNED or RUNNING; unknown those UNKNOWN.
	placed, unknown []*store.SchedInstance
	// requeued are the members waiting again after an attempt; fresh
	// those never placed (a torn first placement, being completed).
	requeued, fresh []*store.SchedInstance
}

// mendGangs applies the gang rule above to the started gangs of st before
// a scheduling pass: those with a member placed, and those whose members
// wait again after an attempt. It reports whether it changed the store
// (the pass then reads the state again).
func (h *Head) mendGangs(ctx context.Context, st *store.SchedulingState, now time.Time) (bool, error) {
	var gangs map[string]*startedGang
	gangOf := func(si *store.SchedInstance) *startedGang {
		if gangs == nil {
			gangs = map[string]*startedGang{}
		}
		g := gangs[si.GangID]
		if g == nil {
			g = &startedGang{id: si.GangID, name: si.GangName, size: si.GangSize, pool: si.Pool}
			gangs[si.GangID] = g
		}
		return g
	}
	for i := range st.Active {
		if si := &st.Active[i]; si.GangID != "" {
			g := gangOf(si)
			if si.Status == store.StatusUnknown {
				g.unknown = append(g.unknown, si)
			} else {
				g.placed = append(g.placed, si)
			}
		}
	}
	for i := range st.Pending {
		si := &st.Pending[i]
		switch {
		case si.GangID == "":
		case si.Attempt > 0:
			g := gangOf(si)
			g.requeued = append(g.requeued, si)
		case gangs[si.GangID] != nil:
			g := gangs[si.GangID]
			g.fresh = append(g.fresh, si)
		}
	}
	h.mu.Lock()
	for id := range h.gangsSeen {
		if gangs[id] == nil {
			delete(h.gangsSeen, id) // no member placed or waiting again
		}
	}
	h.mu.Unlock()
	changed := false
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(gangs)) {
		g := gangs[id]
		did, err := h.mendGang(ctx, g, now)
		changed = changed || did
		if err != nil {
			errs = append(errs, fmt.Errorf("gang %s: %w", g.name, err))
		}
	}
	if changed {
		h.Poke()
	}
	return changed, errors.Join(errs...)
}

// mendGang restarts or fails one started gang when a member ended its
// attempt; it reports whether it changed the store.
func (h *Head) mendGang(ctx context.Context, g *startedGang, now time.Time) (bool, error) {
	h.mu.Lock()
	seen, looked := h.gangsSeen[g.id]
	h.mu.Unlock()
	if looked && seen.failed {
		return false, nil // failed whole: its members are being stopped
	}
	if len(g.placed) == 0 && len(g.unknown) > 0 {
		return false, nil // wait for the workers of the UNKNOWN members
	}
	present := len(g.placed) + len(g.unknown) + len(g.requeued) + len(g.fresh)
	var cause *store.Instance
	ended := false // a member ended for good
	if present < g.size && (!looked || seen.present != present) {
		// Members missing from the state ended: look them up (again only
		// once their number changes).
		members, err := h.st.ListInstances(ctx, store.Filter{Gang: g.id})
		if err != nil {
			return false, err
		}
		for _, in := range members {
			if (in.Status == store.StatusFailed || in.Status == store.StatusCancelled) && (cause == nil || in.GangRank < cause.GangRank) {
				cause, ended = in, true
			}
		}
		if cause == nil {
			h.sawGang(g.id, gangSeen{present: present}) // completed members: nothing to do
		}
	}
	if cause == nil {
		if len(g.requeued) == 0 || len(g.placed) == 0 {
			return false, nil // running whole, or waiting whole to start again
		}
		slices.SortFunc(g.requeued, func(a, b *store.SchedInstance) int { return a.GangRank - b.GangRank })
		in, err := h.st.GetInstance(ctx, g.requeued[0].ID)
		if err != nil {
			return false, err
		}
		cause = in
	}
	how := strings.ToLower(string(cause.Status))
	if cause.Status == store.StatusPending {
		how = "waiting again"
	}
	if cause.FailureReason != "" {
		how += " (" + cause.FailureReason + ")"
	}
	restartable := !ended
	for _, si := range g.placed {
		restartable = restartable && si.Restartable
	}
	if restartable {
		var moved []string
		for _, si := range g.placed {
			ok, err := h.st.MoveInstance(ctx, si.ID, si.Attempt, si.Worker, FailureGangRestart, now)
			if err != nil {
				return len(moved) > 0, err
			}
			if ok {
				moved = append(moved, si.ID)
				h.notify.wake(si.Worker)
			}
		}
		if len(moved) == 0 {
			return false, nil
		}
		h.log.Info("gang restarts whole", "gang", g.name, "id", g.id, "cause", cause.ID, "stopped", len(moved))
		msg := fmt.Sprintf("gang %s: rank %d (instance %s) is %s after the gang started: its %d running members (%s) are stopped and requeued, so that the gang starts again whole",
			g.name, cause.GangRank, cause.ID, how, len(moved), strings.Join(moved, ", "))
		return true, h.RecordEvent(ctx, Event{Time: now, Pool: g.pool, Type: controller.TypeWarning, Reason: ReasonGangRestart, Message: msg})
	}
	why := "its members are not restartable"
	if ended {
		why = "a member that ended cannot run again"
	}
	reason := fmt.Sprintf("%s: gang %s: rank %d (instance %s) is %s after the gang started, and %s: the gang fails whole",
		ReasonGangBroken, g.name, cause.GangRank, cause.ID, how, why)
	var waiting []string
	for _, si := range append(g.requeued, g.fresh...) {
		waiting = append(waiting, si.ID)
	}
	failed, err := h.st.FailPending(ctx, waiting, reason, now)
	if err != nil {
		return false, err
	}
	h.sawGang(g.id, gangSeen{present: present, failed: true})
	var cancelled []string
	for _, si := range append(g.placed, g.unknown...) {
		res, err := h.st.RequestCancel(ctx, si.ID, h.cfg.DefaultGracePeriod, now)
		if err != nil {
			return true, err
		}
		if res.Worker != "" {
			h.notify.wake(res.Worker)
		}
		if res.Outcome == store.CancelDone || res.Outcome == store.CancelRequested {
			cancelled = append(cancelled, si.ID)
		}
	}
	if len(failed)+len(cancelled) == 0 {
		return false, nil
	}
	h.log.Info("started gang fails whole", "gang", g.name, "id", g.id, "cause", cause.ID, "failed", len(failed), "cancelled", len(cancelled))
	msg := fmt.Sprintf("%s; %d waiting members failed, %d running members cancelled", reason, len(failed), len(cancelled))
	return true, h.RecordEvent(ctx, Event{Time: now, Pool: g.pool, Type: controller.TypeWarning, Reason: ReasonGangFailed, Message: msg})
}

// gangSeen is what mendGangs last found of a started gang: how many of its
// members were in the scheduling state, and whether it failed it whole.
type gangSeen struct {
	present int
	failed  bool
}

// sawGang records what mendGangs found of gang id.
func (h *Head) sawGang(id string, s gangSeen) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gangsSeen == nil {
		h.gangsSeen = map[string]gangSeen{}
	}
	h.gangsSeen[id] = s
}

// gangMember reports whether one of ids is an active member of a gang in st.
func gangMember(st *store.SchedulingState, ids []string) bool {
	if len(ids) == 0 {
		return false
	}
	for i := range st.Active {
		if st.Active[i].GangID != "" && slices.Contains(ids, st.Active[i].ID) {
			return true
		}
	}
	return false
}
