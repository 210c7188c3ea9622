package head

import (
	"context"
	"regexp"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/store"
)

// Event is one recorded event (see store.Event): Time, Pool, Node, Type,
// Reason and Message; the store assigns ID.
type Event = store.Event

// FromController converts a pool controller's event. The controller's
// event names no node, but its messages do, in two fixed forms: "machine
// <id>" (the node's name, as `tide nodes` shows it) and "node <ordinal>";
// the NODE column takes the machine id, else "#<ordinal>".
func FromController(e controller.Event) Event {
	return Event{Time: e.Time, Pool: e.Pool, Node: eventNode(e.Message), Type: e.Type, Reason: e.Reason, Message: e.Message}
}

var (
	machineRef = regexp.MustCompile(`\bmachine ([A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])`)
	nodeRef    = regexp.MustCompile(`^(?:node|drain|abort-drain|terminate) (\d+)\b`)
)

// eventNode is the node a controller event's message is about; "" when it
// names none (or several).
func eventNode(msg string) string {
	if m := machineRef.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := nodeRef.FindStringSubmatch(msg); m != nil {
		return "#" + m[1]
	}
	return ""
}

// followBatch is how many events a follower reads per query.
const followBatch = 500

// RecordEvent stores an event and wakes the followers of GET /events. Type
// and Reason are required; a zero Time is the head's now. Over-long fields
// are cut (store.MaxEventField, store.MaxEventMessage); the oldest events
// beyond Config.EventRetention are trimmed in batches.
func (h *Head) RecordEvent(ctx context.Context, e Event) error {
	if _, err := h.st.InsertEvents(ctx, []Event{e}, h.clk.Now()); err != nil {
		return err
	}
	h.evWake.wake("")
	h.changes.bump()
	return nil
}

// Events lists recorded events in ID order.
func (h *Head) Events(ctx context.Context, f store.EventFilter) ([]Event, error) {
	return h.st.ListEvents(ctx, f)
}

// FollowEvents calls emit with every event that f selects, in ID order,
// then with each new matching event as it is recorded, until ctx is done
// (it returns ctx's error), emit fails (it returns that error), or
// Config.EventFollowMax has passed (it returns nil; the caller may resume
// after the last ID it saw). With f.Tail it starts with the newest f.Limit
// events; otherwise f.Limit bounds one read, not the total.
func (h *Head) FollowEvents(ctx context.Context, f store.EventFilter, emit func(Event) error) error {
	timer := h.clk.NewTimer(h.cfg.EventFollowMax)
	defer timer.Stop()
	if f.Limit <= 0 || (!f.Tail && f.Limit > followBatch) {
		f.Limit = followBatch
	}
	for {
		// Take the wake-up channel before reading, so an event recorded
		// between the read and the wait is not missed.
		wake := h.evWake.wait("")
		evs, err := h.st.ListEvents(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := emit(e); err != nil {
				return err
			}
			f.After = e.ID
		}
		more := !f.Tail && len(evs) == f.Limit
		f.Tail, f.Limit = false, followBatch
		if more {
			continue
		}
		select {
		case <-wake:
		case <-timer.C():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
