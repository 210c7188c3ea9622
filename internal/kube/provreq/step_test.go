package provreq

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cond returns r's condition typ as "Status/Reason" ("" when absent).
func cond(conds []metav1.Condition, typ string) string {
	for _, c := range conds {
		if c.Type == typ {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

func changed(out Outcome) string {
	var s []string
	for _, c := range out.Changed {
		s = append(s, c.Type+"="+string(c.Status))
	}
	return strings.Join(s, ",")
}

// An atomic request, pass by pass: waiting for its nodes, provisioned
// once they fit (booked from then on), consumed, or its booking expired.
func TestStepAtomic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Request{Namespace: "ml", Name: "train", Class: ClassAtomicScaleUp, Created: t0, Generation: 1, PodSets: []PodSet{{"t", 4}}}
	step := func(in Input) Outcome {
		t.Helper()
		out := Step(r, in)
		r.Conditions = out.Conditions
		return out
	}

	out := step(Input{Now: t0, Missing: "PodTemplate t not found in namespace ml"})
	if out.State != StateInvalid || cond(out.Conditions, Accepted) != "False/PodTemplateNotFound" || out.Demand || out.Claims {
		t.Fatalf("missing template: %+v", out)
	}
	out = step(Input{Now: t0.Add(time.Second)})
	if out.State != StateWaiting || cond(out.Conditions, Accepted) != "True/Accepted" || cond(out.Conditions, Provisioned) != "False/ScalingUp" ||
		!out.Demand || !out.Claims || out.Book || changed(out) != "Accepted=True,Provisioned=False" {
		t.Fatalf("waiting: %+v", out)
	}
	out.On("gpu")
	if m := out.Conditions[1].Message; !strings.Contains(m, "4 pods") || !strings.HasSuffix(m, "on NodePool gpu") {
		t.Fatalf("waiting message %q", m)
	}
	r.Conditions = out.Conditions
	// The same pass again changes nothing (no event, no write).
	if out = step(Input{Now: t0.Add(2 * time.Second)}); changed(out) != "" {
		t.Fatalf("a second waiting pass changed %s", changed(out))
	}
	out = step(Input{Now: t0.Add(30 * time.Second), Fits: true, Bound: 1})
	if out.State != StateProvisioned || cond(out.Conditions, Provisioned) != "True/CapacityProvisioned" || !out.Demand || !out.Book || !out.Claims ||
		changed(out) != "Provisioned=True" {
		t.Fatalf("provisioned: %+v", out)
	}
	// Booked: no longer checked (the room may be taken by its own pods).
	out = step(Input{Now: t0.Add(9 * time.Minute), Fits: false, Bound: 3, Never: "whatever"})
	if out.State != StateProvisioned || !out.Book || changed(out) != "" {
		t.Fatalf("booked: %+v", out)
	}
	booked := *r
	out = step(Input{Now: t0.Add(30*time.Second + BookingTime), Bound: 3})
	if out.State != StateBookingExpired || cond(out.Conditions, BookingExpired) != "True/BookingTimeElapsed" || out.Demand || out.Book || out.Claims ||
		!strings.Contains(out.Changed[0].Message, "1 of its 4 pods did not come") {
		t.Fatalf("expired: %+v", out)
	}
	if out = step(Input{Now: t0.Add(time.Hour), Fits: true}); out.State != StateBookingExpired || changed(out) != "" {
		t.Fatalf("an expired request changed: %+v", out)
	}
	// Consumed in time: no expiry ever.
	*r = booked
	if out = step(Input{Now: t0.Add(time.Hour), Bound: 4}); out.State != StateConsumed || out.Demand || changed(out) != "" ||
		cond(out.Conditions, BookingExpired) != "" {
		t.Fatalf("consumed: %+v", out)
	}
	// A shorter booking.
	*r = booked
	if out = step(Input{Now: t0.Add(40 * time.Second), Booking: 10 * time.Second}); out.State != StateBookingExpired {
		t.Fatalf("10 s booking after 10 s: %+v", out)
	}
}

// An atomic request that no pool can hold, or whose ValidUntilSeconds
// passed, Fails for good.
func TestStepAtomicFails(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Request{Name: "big", Class: ClassAtomicScaleUp, Created: t0, PodSets: []PodSet{{"t", 30}}}
	out := Step(r, Input{Now: t0, Never: "pool gpu: 30 pods need more than its max of 20 nodes"})
	if out.State != StateFailed || cond(out.Conditions, Failed) != "True/NoNodePoolCanHold" || out.Demand || out.Claims ||
		!strings.Contains(out.Conditions[1].Message, "max of 20") {
		t.Fatalf("never: %+v", out)
	}
	r.Conditions = out.Conditions
	if out = Step(r, Input{Now: t0.Add(time.Minute), Fits: true}); out.State != StateFailed || changed(out) != "" {
		t.Fatalf("a failed request changed: %+v", out)
	}
	r = &Request{Name: "slow", Class: ClassAtomicScaleUp, Created: t0, PodSets: []PodSet{{"t", 1}}, Parameters: map[string]string{ValidUntilSeconds: "60"}}
	if out = Step(r, Input{Now: t0.Add(59 * time.Second)}); out.State != StateWaiting {
		t.Fatalf("within ValidUntilSeconds: %+v", out)
	}
	if out = Step(r, Input{Now: t0.Add(60 * time.Second)}); out.State != StateFailed || cond(out.Conditions, Failed) != "True/ValidUntilPassed" {
		t.Fatalf("past ValidUntilSeconds: %+v", out)
	}
	r.Parameters[ValidUntilSeconds] = "soon"
	if out = Step(r, Input{Now: t0}); out.State != StateFailed || cond(out.Conditions, Failed) != "True/InvalidParameters" {
		t.Fatalf("bad ValidUntilSeconds: %+v", out)
	}
}

// A check-capacity request buys nothing: False while the pods do not fit
// (checked again every pass), True once they do, then booked.
func TestStepCheckCapacity(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Request{Name: "check", Class: ClassCheckCapacity, Created: t0, PodSets: []PodSet{{"t", 2}}}
	out := Step(r, Input{Now: t0, Never: "ignored for checks"})
	if out.State != StateNoCapacity || cond(out.Conditions, Provisioned) != "False/CapacityNotFound" || out.Demand || out.Book || !out.Claims {
		t.Fatalf("no room: %+v", out)
	}
	r.Conditions = out.Conditions
	out = Step(r, Input{Now: t0.Add(time.Minute), Fits: true})
	if out.State != StateProvisioned || cond(out.Conditions, Provisioned) != "True/CapacityFound" || out.Demand || !out.Book ||
		changed(out) != "Provisioned=True" {
		t.Fatalf("room: %+v", out)
	}
	for _, c := range out.Conditions {
		if c.Type == Provisioned && !c.LastTransitionTime.Time.Equal(t0.Add(time.Minute)) {
			t.Fatalf("Provisioned's transition at %v, want %v", c.LastTransitionTime, t0.Add(time.Minute))
		}
	}
	r.Conditions = out.Conditions
	if out = Step(r, Input{Now: t0.Add(time.Minute + BookingTime)}); out.State != StateBookingExpired {
		t.Fatalf("check booking: %+v", out)
	}
}
