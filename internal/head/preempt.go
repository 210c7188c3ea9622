package head

import (
	"context"
	"fmt"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// ReasonPreempted is the event reason of a worker whose machine the fleet
// takes back for a need of higher priority.
const ReasonPreempted = "preempted"

// Preempt is the fleet taking a pool's machine back for a need of higher
// priority (BigFleet's preemption: drain first, a grace by priority gap).
// The worker is cordoned, its restartable instances move off at once (their
// next attempt runs elsewhere), and whatever may not move runs on until the
// fleet drains the machine once grace has passed. An event says why. It
// returns the ids moved; idempotent.
func (h *Head) Preempt(ctx context.Context, pool, worker, why string, grace time.Duration) ([]string, error) {
	if err := h.Cordon(ctx, worker, true); err != nil {
		return nil, err
	}
	active, err := h.activeOn(ctx, map[string]bool{worker: true})
	if err != nil {
		return nil, err
	}
	var moved []string
	stays := 0
	for _, in := range active {
		ci := consolidationInstance(in)
		switch {
		case in.Daemon:
		case !movable(in) || ci.DoNotDisrupt: // a gang member moves too: its gang then restarts whole
			stays++
		default:
			ok, err := h.st.MoveInstance(ctx, in.ID, in.Attempt, worker, store.ReasonMoved, h.clk.Now())
			if err != nil {
				return moved, err
			}
			if ok {
				moved = append(moved, in.ID)
			}
		}
	}
	if len(moved) > 0 {
		h.notify.wake(worker)
		h.Poke()
	}
	msg := fmt.Sprintf("machine %s: %s; %d restartable instance(s) moved off, %d other(s) run on until the machine is drained in %s",
		worker, why, len(moved), stays, grace)
	err = h.RecordEvent(ctx, Event{Time: h.clk.Now(), Pool: pool, Node: worker, Type: controller.TypeWarning,
		Reason: ReasonPreempted, Message: msg})
	return moved, err
}
