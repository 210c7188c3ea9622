package providertest_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/internal/provider/sim"
	"github.com/tide-project/tide/sdk/provider"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const offering = "c4/on-demand"

// newSim returns a fresh simulated cloud and the harness around it.
func newSim(t *testing.T, wrap func(provider.Provider) provider.Provider) providertest.Harness {
	clk := clock.NewFake(epoch)
	c, err := sim.New(sim.Config{Offerings: []sim.Offering{{
		Offering:  capacity.Offering{Type: "c4", Resources: capacity.CPU(4000), PricePerHour: 0.2},
		Boot:      sim.Latency{Min: 10 * time.Second, Median: 30 * time.Second, Max: 2 * time.Minute},
		Configure: sim.Fixed(5 * time.Second),
		Drain:     sim.Fixed(5 * time.Second),
		Delete:    sim.Fixed(5 * time.Second),
	}}}, clk, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	return providertest.Harness{Provider: wrap(c), Offering: offering,
		Settle: func() { clk.Advance(time.Hour) }, Creates: c.Provisions}
}

// broken is a provider with one deliberate contract violation.
type broken struct {
	provider.Provider
	bug string
}

func (b *broken) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if b.bug == "replay-provisions" {
		if _, err := b.Provider.Get(ctx, req.MachineID); err == nil {
			id := req.MachineID
			req.MachineID += "-again"
			ack, err := b.Provider.Create(ctx, req)
			ack.MachineID = id
			return ack, err
		}
	}
	if b.bug == "no-fencing" {
		req.Fence = provider.Fence{Controller: "everyone", Epoch: 1 << 40}
	}
	return b.Provider.Create(ctx, req)
}

func (b *broken) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	if b.bug == "no-fencing" {
		req.Fence = provider.Fence{Controller: "everyone", Epoch: 1 << 40}
	}
	if b.bug == "ignore-ownership" {
		if m, err := b.Provider.Get(ctx, req.MachineID); err == nil {
			req.Pool = m.Pool
		}
	}
	ack, err := b.Provider.Delete(ctx, req)
	if b.bug == "delete-never-not-found" && provider.IsNotFound(err) {
		return provider.Ack{MachineID: req.MachineID, State: provider.Deleting, Replayed: true}, nil
	}
	return ack, err
}

func (b *broken) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := b.Provider.Get(ctx, id)
	if b.bug == "get-unknown-ok" && provider.IsNotFound(err) {
		return provider.Machine{ID: id, State: provider.Speculative}, nil
	}
	if b.bug == "idle-reported-configured" && err == nil && m.State == provider.Idle {
		m.State = provider.Configured
	}
	return m, err
}

func (b *broken) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	if b.bug == "list-ignores-state" {
		f.States = nil
	}
	return b.Provider.List(ctx, f)
}

const brokenEnv = "PROVIDERTEST_BROKEN"

// TestSuiteCatchesBrokenProviders proves the suite can fail: it runs the
// suite in a child process against providers that each break one rule, and
// expects the named subtest to fail.
func TestSuiteCatchesBrokenProviders(t *testing.T) {
	if bug := os.Getenv(brokenEnv); bug != "" {
		providertest.Run(t, func(t *testing.T) providertest.Harness {
			return newSim(t, func(p provider.Provider) provider.Provider { return &broken{Provider: p, bug: bug} })
		})
		return
	}
	if testing.Short() {
		t.Skip("spawns child test processes")
	}
	tests := []struct{ bug, failing string }{
		{"replay-provisions", "ReplayedCreateIsNoOp"},
		{"no-fencing", "StaleEpochIsRefused"},
		{"delete-never-not-found", "DeleteIsIdempotentAndEndsInNotFound"},
		{"get-unknown-ok", "GetUnknownIsNotFound"},
		{"idle-reported-configured", "CreateIsAsyncAndReachesIdle"},
		{"list-ignores-state", "ListFiltersByPoolAndState"},
		{"ignore-ownership", "OtherPoolGetsNotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.bug, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteCatchesBrokenProviders$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tt.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a provider with bug %q:\n%s", tt.bug, out)
			}
			if want := "--- FAIL: TestSuiteCatchesBrokenProviders/" + tt.failing + " "; !strings.Contains(string(out), want) {
				t.Fatalf("bug %q: want %q to fail; output:\n%s", tt.bug, tt.failing, out)
			}
		})
	}
}
