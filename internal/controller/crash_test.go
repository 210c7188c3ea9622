package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/provider/providertest"
)

// crash is the panic that kills a controller mid-step.
type crash struct{ step string }

// crasher numbers the steps a controller takes (each provider call and
// journal write, before it and after it) and panics at step k.
type crasher struct {
	mu    sync.Mutex
	k, n  int // crash at step k (0: never); n steps so far
	where string
}

func (c *crasher) step(what string) {
	c.mu.Lock()
	c.n++
	hit := c.k > 0 && c.n == c.k
	c.mu.Unlock()
	if hit {
		panic(crash{step: what})
	}
}

func (c *crasher) arm(k int) {
	c.mu.Lock()
	c.k, c.n = k, 0
	c.mu.Unlock()
}

// crashJournal is the env's journal with a crash point before and after
// every write.
type crashJournal struct {
	*controller.MemJournal
	cr *crasher
}

func (j crashJournal) around(what string, fn func() error) error {
	j.cr.step("before journal " + what)
	err := fn()
	j.cr.step("after journal " + what)
	return err
}

func (j crashJournal) RaiseEpoch(ctx context.Context) (e uint64, err error) {
	err = j.around("raise epoch", func() error { e, err = j.MemJournal.RaiseEpoch(ctx); return err })
	return e, err
}

func (j crashJournal) NextSerial(ctx context.Context, epoch uint64) (s uint64, err error) {
	err = j.around("next serial", func() error { s, err = j.MemJournal.NextSerial(ctx, epoch); return err })
	return s, err
}

func (j crashJournal) Put(ctx context.Context, epoch uint64, r controller.Record) error {
	return j.around("put "+r.MachineID+" "+string(r.Intent), func() error { return j.MemJournal.Put(ctx, epoch, r) })
}

func (j crashJournal) Remove(ctx context.Context, epoch uint64, id string) error {
	return j.around("remove "+id, func() error { return j.MemJournal.Remove(ctx, epoch, id) })
}

func (j crashJournal) SetDesired(ctx context.Context, epoch uint64, d int) error {
	return j.around(fmt.Sprint("set desired ", d), func() error { return j.MemJournal.SetDesired(ctx, epoch, d) })
}

// withCrashes gives the env a crasher on every provider call and journal
// write.
func (e *env) withCrashes() *crasher {
	cr := &crasher{}
	e.rec.Before = func(c providertest.Call) error {
		cr.step(fmt.Sprintf("before %s %s", c.Op, c.MachineID))
		return nil
	}
	e.rec.After = func(c providertest.Call) { cr.step(fmt.Sprintf("after %s %s", c.Op, c.MachineID)) }
	e.journal = crashJournal{MemJournal: e.mem, cr: cr}
	e.ctl = e.newController()
	return cr
}

// survive runs fn and reports the crash that stopped it, if any.
func survive(fn func()) (step string, crashed bool) {
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(crash)
			if !ok {
				panic(r)
			}
			step, crashed = c.step, true
		}
	}()
	fn()
	return "", false
}

// TestCrashAtEveryStep holds DESIGN invariant 5 (issue 3's crash proof):
// for a scale-up, a scale-down, and a scale-down reversed into a scale-up
// that reuses ordinals, with and without 30 % API errors, the controller is
// killed at every step in turn (before and after each provider call and
// journal write, k = 1, 2, ... until a run finishes), and a new controller
// on the same journal and cloud converges: nothing leaked (the cloud bills
// exactly what the pool holds, the journal records exactly that), nothing
// provisioned twice, and no more machines bought than the run needs.
func TestCrashAtEveryStep(t *testing.T) {
	scenarios := []struct {
		name   string
		from   int
		run    func(e *env)
		target int
		// machines bounds the machines the cloud ever provisioned for
		// the pool, the preparation's included.
		minMachines, maxMachines int
	}{
		{name: "scale-up 0→4", from: 0, target: 4, minMachines: 4, maxMachines: 4,
			run: func(e *env) { e.setDesired(4); e.tickUntil(4, 20) }},
		{name: "scale-down 4→1", from: 4, target: 1, minMachines: 4, maxMachines: 4,
			run: func(e *env) { e.setDesired(1); e.tickUntil(1, 20) }},
		{name: "down 3→1 then up →3", from: 3, target: 3, minMachines: 3, maxMachines: 5,
			run: func(e *env) { e.setDesired(1); e.mustTick(); e.mustTick(); e.setDesired(3); e.tickUntil(3, 20) }},
	}
	for _, sc := range scenarios {
		for _, apiErrors := range []bool{false, true} {
			name := sc.name
			if apiErrors {
				name += "/30% api errors"
			}
			t.Run(name, func(t *testing.T) {
				steps := 0
				for k := 1; ; k++ {
					// The same seed for every k: each run replays the same
					// steps up to the crash.
					e := newEnv(t, setup{nodes: capacity.Elastic(0, 6), seed: 7})
					cr := e.withCrashes()
					if sc.from > 0 {
						e.setDesired(sc.from)
						e.tickUntil(sc.from, 10)
					}
					if apiErrors {
						if err := e.cloud.SetAPIErrorRate(0.3, 0.5); err != nil {
							t.Fatal(err)
						}
					}
					cr.arm(k)
					step, crashed := survive(func() { sc.run(e) })
					if !crashed {
						steps = k - 1
						break
					}
					cr.arm(0)
					if err := e.cloud.SetAPIErrorRate(0, 0); err != nil {
						t.Fatal(err)
					}
					e.ctl = e.newController() // the crashed one is dropped
					e.setDesired(sc.target)   // as the head's policy would say again
					func() {
						defer func() {
							if t.Failed() {
								t.Logf("crash at step %d: %s", k, step)
							}
						}()
						e.tickUntil(sc.target, 12)
						led := e.cloud.Ledger()
						if n := len(led.Machines); n < sc.minMachines || n > sc.maxMachines {
							t.Errorf("crash at step %d (%s): the cloud provisioned %d machines, want %d to %d",
								k, step, n, sc.minMachines, sc.maxMachines)
						}
					}()
					if t.Failed() {
						return
					}
				}
				if steps < 20 {
					t.Fatalf("only %d crash points: the hooks do not see the steps", steps)
				}
				t.Logf("%d crash points, each recovered", steps)
			})
		}
	}
}
