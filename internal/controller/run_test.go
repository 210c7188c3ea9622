package controller_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
)

// TestRun drives the controller through Run on a fake clock: the first tick
// takes the pool over, an input is synced at once (the poke), the ticker
// drives configure and join, and cancelling ctx ends Run with nil. The test
// waits on events, never on time.
func TestRun(t *testing.T) {
	e := newEnv(t, setup{})
	ch := make(chan controller.Event, 256)
	ctl, err := controller.New(e.cfg, controller.Deps{
		Provider: e.rec, Journal: e.journal, Workload: e.work, Clock: e.clk,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Events: controller.EventFunc(func(ev controller.Event) { ch <- ev }),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()

	// wait returns once n events with the reason have arrived.
	wait := func(reason string, n int) {
		t.Helper()
		guard := time.NewTimer(30 * time.Second) // only fires if the controller is stuck
		defer guard.Stop()
		for n > 0 {
			select {
			case ev := <-ch:
				if ev.Reason == reason {
					n--
				}
			case err := <-done:
				t.Fatalf("Run returned %v while waiting for %q", err, reason)
			case <-guard.C:
				t.Fatalf("no %q event", reason)
			}
		}
	}
	wait(controller.ReasonStarted, 1) // the ticker exists from here on
	ctl.SetDesired(policy.Decision{Desired: 2, Reason: policy.NewReason(policy.CodeScaleUp, "2 tasks queued")})
	wait(controller.ReasonLaunched, 2)
	e.clk.Advance(interval)
	wait(controller.ReasonConfiguring, 2)
	e.clk.Advance(interval)
	wait(controller.ReasonJoined, 2)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v, want nil after cancel", err)
	}
	if st := ctl.Status(); st.Current != 2 || st.Desired != 2 {
		t.Errorf("status after Run: %+v", st)
	}
}
