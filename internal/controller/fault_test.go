package controller_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// fault is one kind of trouble the cloud gets into.
type fault struct {
	name string
	// apply is called before every tick while the fault lasts.
	apply func(e *env)
	// clear ends the fault.
	clear func(e *env)
	// aftermath is how long after clear the fault can still hold machines
	// launched during it: a slow or hung boot lasts until its launch
	// timeout. The 3-tick bound counts from clear + aftermath.
	aftermath time.Duration
	// struck reports whether the fault had an effect; checked in the
	// phases that launch machines while it lasts.
	struck func(e *env) bool
}

func tuneAll(e *env, change func(*sim.Offering)) {
	for _, name := range []string{onDemand, spot} {
		if err := e.cloud.Tune(name, change); err != nil {
			e.t.Fatal(err)
		}
	}
}

func apiErrors(rate float64) func(e *env) {
	return func(e *env) {
		if err := e.cloud.SetAPIErrorRate(rate, 0.5); err != nil {
			e.t.Fatal(err)
		}
	}
}

func quota(n int) func(e *env) {
	return func(e *env) {
		if err := e.cloud.SetQuota(n); err != nil {
			e.t.Fatal(err)
		}
	}
}

func stock(n int) func(e *env) {
	return func(e *env) { tuneAll(e, func(o *sim.Offering) { o.Stock = n }) }
}

func boot(d time.Duration) func(e *env) {
	return func(e *env) { tuneAll(e, func(o *sim.Offering) { o.Boot = sim.Fixed(d) }) }
}

func hang(rate float64) func(e *env) {
	return func(e *env) { tuneAll(e, func(o *sim.Offering) { o.HangRate = rate }) }
}

// interruptAll gives every machine with a host a spot interruption notice.
func interruptAll(e *env) {
	var ms []provider.Machine
	err := provider.NewTransient(errors.New("not listed yet"), 0)
	for i := 0; i < 20 && provider.IsTransient(err); i++ { // the cloud may be injecting API errors
		ms, err = e.cloud.List(e.ctx, provider.Filter{Pool: pool})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range ms {
		if m.Host != "" && m.ReclaimAt.IsZero() && m.State != provider.Deleting {
			if err := e.cloud.Interrupt(m.ID); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

func all(fs ...func(e *env)) func(e *env) {
	return func(e *env) {
		for _, f := range fs {
			f(e)
		}
	}
}

func nothing(*env) {}

func hasEvent(reason string) func(e *env) bool {
	return func(e *env) bool { return len(e.events.find(reason)) > 0 }
}

// slowBoots reports whether boots outlasted a tick: a launch timed out, or
// a scale-down cancelled a machine that had not joined yet (a churn
// cancels booting machines before their launch timeout).
func slowBoots(e *env) bool {
	return hasEvent(controller.ReasonLaunchTimeout)(e) || len(e.events.find(controller.ReasonDrained, "has no cluster binding")) > 0
}

// transientErrors reports whether the cloud answered some call with an
// injected error.
func transientErrors(e *env) bool {
	for _, c := range e.rec.Calls() {
		if provider.IsTransient(c.Err) {
			return true
		}
	}
	return false
}

var faults = []fault{
	{name: "api errors 30%", apply: apiErrors(0.3), clear: apiErrors(0), struck: transientErrors},
	{name: "partial fulfilment", apply: stock(2), clear: stock(0), struck: hasEvent(reconcile.NoteProvisionShort)},
	{name: "quota exhaustion", apply: quota(3), clear: quota(0), struck: hasEvent(controller.ReasonQuotaExceeded)},
	{name: "slow boots", apply: boot(8 * time.Minute), clear: boot(40 * time.Second), aftermath: timeout,
		struck: slowBoots},
	{name: "hung boots", apply: hang(1), clear: hang(0), aftermath: timeout, struck: slowBoots},
	{name: "spot interruptions", apply: interruptAll, clear: nothing, struck: hasEvent(controller.ReasonInterrupted)},
	{name: "everything at once", apply: all(apiErrors(0.3), stock(3), quota(5), boot(8*time.Minute), interruptAll),
		clear: all(apiErrors(0), stock(0), quota(0), boot(40*time.Second)), aftermath: timeout, struck: transientErrors},
}

// phase is what the pool is asked to do while the fault lasts.
type phase struct {
	name string
	// from is the size the pool converges on before the fault.
	from int
	// desired is the desired count for each fault tick (the last one
	// holds after the fault).
	desired []int
	// launches says whether the phase launches machines during the fault.
	launches bool
}

var phases = []phase{
	{name: "scale-up", from: 0, desired: []int{6, 6, 6, 6, 6, 6, 6, 6}, launches: true},
	{name: "scale-down", from: 6, desired: []int{2, 2, 2, 2, 2, 2, 2, 2}},
	{name: "churn", from: 4, desired: []int{7, 2, 6, 0, 5, 8, 3, 6}, launches: true},
}

// TestFaultMatrix holds issue 3's fault proof: under 30 % API errors (half
// of them after the call took effect), partial fulfilment, quota
// exhaustion, slow and hung boots, spot interruptions, and all of them at
// once, while the pool scales up, down or churns, the pool reaches its
// desired size within 3 reconcile ticks after the fault clears (and its
// aftermath, for boots that only end at the launch timeout), no machine is
// ever provisioned twice, and at the end the cloud bills exactly the
// machines the pool holds, then nothing once it scales to 0.
func TestFaultMatrix(t *testing.T) {
	for _, f := range faults {
		for _, ph := range phases {
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprintf("%s/%s/seed%d", f.name, ph.name, seed), func(t *testing.T) {
					runFault(t, f, ph, seed)
				})
			}
		}
	}
}

func runFault(t *testing.T, f fault, ph phase, seed uint64) {
	e := newEnv(t, setup{nodes: capacity.Elastic(0, 8), seed: seed})
	if ph.from > 0 {
		e.setDesired(ph.from)
		e.tickUntil(ph.from, 10)
	}
	e.events.reset()
	e.rec.Reset()
	for _, d := range ph.desired {
		f.apply(e)
		e.setDesired(d)
		e.mustTick()
		e.accounted()
	}
	if ph.launches && !f.struck(e) {
		t.Fatalf("the fault had no effect: the test proves nothing\n%s", e.events.tail(30))
	}
	clearAt := e.clk.Now()
	f.clear(e)
	for e.clk.Now().Before(clearAt.Add(f.aftermath)) {
		e.mustTick()
		e.accounted()
	}
	target := ph.desired[len(ph.desired)-1]
	e.tickUntil(target, 3)

	e.setDesired(0)
	e.tickUntil(0, 5)
	led := e.cloud.Ledger()
	if live := led.Live(""); len(live) != 0 {
		t.Fatalf("cloud still bills %v", live)
	}
}

// accounted checks what must hold after every pass, whatever the faults:
// no machine was provisioned twice, and every machine the cloud bills for
// the pool is held for an ordinal or being deleted: nothing is forgotten.
func (e *env) accounted() {
	e.t.Helper()
	led := e.cloud.Ledger()
	if dup := led.Duplicates(); len(dup) > 0 {
		e.t.Fatalf("machines provisioned twice: %v", dup)
	}
	st := e.ctl.Status()
	known := map[string]bool{}
	for _, n := range st.Nodes {
		known[n.MachineID] = true
	}
	for _, id := range st.Deleting {
		known[id] = true
	}
	for _, id := range led.Live(pool) {
		if !known[id] {
			e.t.Fatalf("tick %d: machine %s is billed but neither held nor being deleted\n%s\n%s", e.ticks, id, e.describe(), e.events.tail(20))
		}
	}
}
