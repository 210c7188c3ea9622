package provreq

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// States of a request, as the metric and the operator name them.
const (
	// StateInvalid: not accepted (a PodTemplate is missing, a parameter
	// is malformed); tried again every pass.
	StateInvalid = "invalid"
	// StateWaiting: accepted, its capacity not there yet (an atomic
	// request's nodes are being bought).
	StateWaiting = "waiting"
	// StateNoCapacity: a check-capacity request whose pods do not fit the
	// room now; checked again every pass.
	StateNoCapacity = "no-capacity"
	// StateProvisioned: its capacity exists and is booked for its pods.
	StateProvisioned = "provisioned"
	// StateConsumed: provisioned, and every one of its pods is bound.
	StateConsumed = "consumed"
	// StateBookingExpired: the booking ended before its pods came.
	StateBookingExpired = "booking-expired"
	// StateFailed: tide gave up (no pool can ever hold it, or its
	// ValidUntilSeconds passed).
	StateFailed = "failed"
)

// Input is what one pass knows of a request besides the request itself.
type Input struct {
	// Now is the pass's time.
	Now time.Time
	// Missing says which PodTemplates are missing ("" when none).
	Missing string
	// Bound is the number of pods consuming the request that are bound.
	Bound int
	// Fits: the pods the request still needs fit the room of Ready Nodes
	// (after the requests booked before it).
	Fits bool
	// Never says why no pool can ever hold the request's pods ("" when
	// one can; atomic requests).
	Never string
	// Booking is how long capacity stays booked (0: BookingTime).
	Booking time.Duration
}

// Outcome is what a pass does about a request.
type Outcome struct {
	// Conditions are the request's conditions after the pass (the ones
	// tide does not set kept as they were).
	Conditions []metav1.Condition
	// Changed lists the conditions set or changed in this pass (one
	// event each).
	Changed []metav1.Condition
	// State names where the request stands (State* constants).
	State string
	// Demand: the pods the request still needs are demand (an atomic
	// request: they hold their room, or their nodes are bought).
	Demand bool
	// Book: the request's remaining pods keep the room they fit in, so
	// later requests are checked against the rest.
	Book bool
	// Claims: unschedulable pods consuming the request are not demand of
	// their own (the request stands for them).
	Claims bool
}

// Step returns what a pass does about r: its conditions, and whether it
// is demand, books room and claims its consumers. A Failed or
// BookingExpired request is done: nothing changes any more. Conditions
// are set by their type; their LastTransitionTime is in.Now (whole
// seconds) when their status changes, and the booking runs from
// Provisioned's transition to True.
func Step(r *Request, in Input) Outcome {
	out := Outcome{Conditions: slices.Clone(r.Conditions)}
	booking := in.Booking
	if booking <= 0 {
		booking = BookingTime
	}
	get := func(typ string) *metav1.Condition {
		for i := range out.Conditions {
			if out.Conditions[i].Type == typ {
				return &out.Conditions[i]
			}
		}
		return nil
	}
	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		c := get(typ)
		if c == nil {
			out.Conditions = append(out.Conditions, metav1.Condition{Type: typ})
			c = &out.Conditions[len(out.Conditions)-1]
		}
		if c.Status == st && c.Reason == reason && c.Message == msg && c.ObservedGeneration == r.Generation {
			return
		}
		if c.Status != st {
			c.LastTransitionTime = metav1.NewTime(in.Now.UTC().Truncate(time.Second))
		}
		changed := c.Status != st || c.Reason != reason
		c.Status, c.Reason, c.Message, c.ObservedGeneration = st, reason, msg, r.Generation
		if changed {
			out.Changed = append(out.Changed, *c)
		}
	}
	is := func(typ string) bool { c := get(typ); return c != nil && c.Status == metav1.ConditionTrue }
	switch {
	case is(Failed):
		out.State = StateFailed
		return out
	case is(BookingExpired):
		out.State = StateBookingExpired
		return out
	}
	total := r.Total()
	atomic := r.Class == ClassAtomicScaleUp
	if in.Missing != "" {
		set(Accepted, false, "PodTemplateNotFound", in.Missing+"; tide tries again on every pass")
		out.State = StateInvalid
		return out
	}
	var validUntil time.Duration
	if v, ok := r.Parameters[ValidUntilSeconds]; ok && atomic {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s < 0 {
			set(Failed, true, "InvalidParameters", fmt.Sprintf("parameters.%s: want a whole number of seconds, got %q", ValidUntilSeconds, v))
			out.State = StateFailed
			return out
		}
		validUntil = time.Duration(s) * time.Second
	}
	set(Accepted, true, "Accepted", fmt.Sprintf("tide answers this %s request for %s", map[bool]string{true: "atomic scale-up", false: "check-capacity"}[atomic], npods(total)))
	left := max(total-in.Bound, 0)
	if is(Provisioned) {
		start := get(Provisioned).LastTransitionTime.Time
		switch {
		case left == 0:
			out.State = StateConsumed
		case !in.Now.Before(start.Add(booking)):
			set(BookingExpired, true, "BookingTimeElapsed", fmt.Sprintf("the capacity was booked for %v from %s; %d of its %s did not come, their room is released",
				booking, start.UTC().Format(time.RFC3339), left, npods(total)))
			out.State = StateBookingExpired
		default:
			out.State, out.Demand, out.Book, out.Claims = StateProvisioned, atomic, true, true
		}
		return out
	}
	if !atomic {
		if in.Fits {
			set(Provisioned, true, "CapacityFound", fmt.Sprintf("%s fit the free room of Ready Nodes; booked for %v", npods(left), booking))
			out.State, out.Book, out.Claims = StateProvisioned, true, true
			return out
		}
		set(Provisioned, false, "CapacityNotFound", fmt.Sprintf("%s do not fit the free room of Ready Nodes; nothing is bought for a check-capacity request, tide checks again on every pass", npods(left)))
		out.State, out.Claims = StateNoCapacity, true
		return out
	}
	switch {
	case in.Never != "":
		set(Failed, true, "NoNodePoolCanHold", "no NodePool can ever hold its "+npods(total)+" at once: "+in.Never)
		out.State = StateFailed
	case validUntil > 0 && !in.Now.Before(r.Created.Add(validUntil)):
		set(Failed, true, "ValidUntilPassed", fmt.Sprintf("the capacity for its %s was not there within %s of %ss", npods(total), ValidUntilSeconds, r.Parameters[ValidUntilSeconds]))
		out.State = StateFailed
	case in.Fits:
		set(Provisioned, true, "CapacityProvisioned", fmt.Sprintf("%s fit the free room of Ready Nodes; booked for %v", npods(left), booking))
		out.State, out.Demand, out.Book, out.Claims = StateProvisioned, true, true, true
	default:
		set(Provisioned, false, "ScalingUp", fmt.Sprintf("tide buys the nodes for %s in one scale-up", npods(left)))
		out.State, out.Demand, out.Claims = StateWaiting, true, true
	}
	return out
}

// On says, in a waiting atomic request's Provisioned condition (and its
// event), which
// NodePool its nodes are bought on (the pass's demand report tells).
func (o *Outcome) On(pool string) {
	if o.State != StateWaiting || pool == "" {
		return
	}
	for _, cs := range [][]metav1.Condition{o.Conditions, o.Changed} {
		for i := range cs {
			if c := &cs[i]; c.Type == Provisioned && c.Reason == "ScalingUp" {
				c.Message = fmt.Sprintf("%s on NodePool %s", c.Message, pool)
			}
		}
	}
}

// npods is "1 pod" or "n pods".
func npods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return strconv.Itoa(n) + " pods"
}
