package head

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// ReasonMaxWait is the event recorded for an instance failed by its
// max_wait.
const ReasonMaxWait = "max-wait"

// maxWaitOf is the max_wait that applies to in: its own, else its pool's
// (Config.MaxWait); 0 for none.
func (h *Head) maxWaitOf(in *store.Instance) time.Duration {
	if in.MaxWait > 0 {
		return in.MaxWait
	}
	if h.cfg.MaxWait != nil {
		return h.cfg.MaxWait(in.Pool)
	}
	return 0
}

// ExpireWaiting is the max_wait sweep (seed 002's provisioning queue, whose
// tasks ECS stops after a timeout): every PENDING instance, without a
// cancel request, that has waited since it was queued for at least its
// max_wait (its own, else its pool's) ends FAILED with the reason "no
// capacity within <max_wait>: <why it waits>", and a Warning event
// max-wait says so. Only instances still PENDING when the store applies it
// fail (store.FailPending): one placed meanwhile, assigned or running is
// never touched. An instance requeued (a lost worker, a restart) waits
// from its new queued time. It returns the ids it failed. The leader runs
// it on every liveness tick.
func (h *Head) ExpireWaiting(ctx context.Context) ([]string, error) {
	pending, err := h.st.ListInstances(ctx, store.Filter{Status: store.StatusPending})
	if err != nil {
		return nil, fmt.Errorf("max_wait sweep: %w", err)
	}
	now := h.clk.Now()
	var due []*store.Instance
	var waits []time.Duration
	for _, in := range pending {
		if !in.CancelRequestedAt.IsZero() {
			continue
		}
		d := h.maxWaitOf(in)
		if d <= 0 {
			continue
		}
		since := cmp.Or(in.QueuedAt, in.CreatedAt)
		if now.Sub(since) < d {
			continue
		}
		due = append(due, in)
		waits = append(waits, d)
	}
	if len(due) == 0 {
		return nil, nil
	}
	due, waits = wholeGangs(pending, due, waits)
	whys := h.WaitingReasons(ctx, due)
	// FailPending takes one reason per call: group the due by theirs.
	var order []string
	byReason := map[string][]string{}
	gangReason := map[string]string{} // one reason a gang: one FailPending call fails it whole
	for i, in := range due {
		why := cmp.Or(whys[i], "no worker has placed it")
		reason := fmt.Sprintf("no capacity within %s: %s", waits[i], why)
		if in.GangID != "" {
			if r, ok := gangReason[in.GangID]; ok {
				reason = r
			} else {
				reason = fmt.Sprintf("no capacity within %s: gang %s (%d instances): %s", waits[i], in.GangName, in.GangSize, why)
				gangReason[in.GangID] = reason
			}
		}
		if _, ok := byReason[reason]; !ok {
			order = append(order, reason)
		}
		byReason[reason] = append(byReason[reason], in.ID)
	}
	pool := map[string]string{}
	for _, in := range due {
		pool[in.ID] = in.Pool
	}
	var failed []string
	for _, reason := range order {
		ids, err := h.st.FailPending(ctx, byReason[reason], reason, now)
		if err != nil {
			return failed, fmt.Errorf("max_wait sweep: %w", err)
		}
		for _, id := range ids {
			h.log.Info("instance failed: max_wait passed", "instance", id, "reason", reason)
			if err := h.RecordEvent(ctx, Event{Pool: pool[id], Type: "Warning", Reason: ReasonMaxWait,
				Message: fmt.Sprintf("instance %s: %s", id, reason)}); err != nil {
				h.log.Warn("record max-wait event", "instance", id, "err", err)
			}
		}
		failed = append(failed, ids...)
	}
	if len(failed) > 0 {
		h.Poke() // the pressure report loses them
		var pools []string
		for _, id := range failed {
			pools = append(pools, pool[id])
		}
		h.withdraw(pools)
	}
	return failed, nil
}

// wholeGangs adds to due the other members of every gang that has a due
// member and none started (all its instances PENDING), each with the due
// member's max_wait, so that max_wait fails such a gang whole: the FailPending
// call that fails one fails the others with the same reason. A member
// waiting again while the rest of its gang runs (a restart) is due alone.
func wholeGangs(pending, due []*store.Instance, waits []time.Duration) ([]*store.Instance, []time.Duration) {
	members := map[string][]*store.Instance{}
	for _, in := range pending {
		if in.GangID != "" && in.CancelRequestedAt.IsZero() {
			members[in.GangID] = append(members[in.GangID], in)
		}
	}
	isDue := make(map[string]bool, len(due))
	for _, in := range due {
		isDue[in.ID] = true
	}
	for i, n := 0, len(due); i < n; i++ {
		g := due[i].GangID
		if g == "" || len(members[g]) != due[i].GangSize {
			continue
		}
		for _, m := range members[g] {
			if !isDue[m.ID] {
				isDue[m.ID] = true
				due, waits = append(due, m), append(waits, waits[i])
			}
		}
	}
	return due, waits
}
