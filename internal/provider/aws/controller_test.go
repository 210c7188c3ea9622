package aws_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/policy"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// ctlEnv is one pool's real controller driving the EC2 provider against the
// emulator, on a fake clock for the controller's timers. The journal
// outlives the controller and the provider, so a test can kill both and
// start new ones (a restarted tide process).
type ctlEnv struct {
	t        *testing.T
	ctx      context.Context
	clk      *clock.Fake
	cfg      awsprov.Config
	prov     *awsprov.Provider
	wrap     provider.Provider // what the controller calls (prov, maybe wrapped)
	journal  *controller.MemJournal
	ctlCfg   controller.Config
	ctl      *controller.Controller
	events   *events
	endpoint string
}

type events struct {
	mu  sync.Mutex
	all []controller.Event
}

func (e *events) Emit(ev controller.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(reason string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Reason == reason {
			n++
		}
	}
	return n
}

func (e *events) tail() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := ""
	for _, ev := range e.all[max(0, len(e.all)-15):] {
		s += fmt.Sprintf("  %s %s\n", ev.Reason, ev.Message)
	}
	return s
}

// newCtlEnv builds the provider (through endpoint, the emulator when empty)
// and a controller of pool "gpu" over the given offerings.
func newCtlEnv(t *testing.T, endpoint string, mut func(*awsprov.Config), offerings ...string) *ctlEnv {
	t.Helper()
	p, moto := newProvider(t, func(c *awsprov.Config) {
		if endpoint != "" {
			c.Endpoint = endpoint
		}
		if mut != nil {
			mut(c)
		}
	})
	e := &ctlEnv{t: t, ctx: context.Background(), clk: clock.NewFake(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)),
		prov: p, wrap: p, journal: controller.NewMemJournal(), events: &events{}, endpoint: moto.URL}
	e.cfg = baseConfig(t, "")
	e.cfg.Name = p.Name()
	if endpoint != "" {
		e.cfg.Endpoint = endpoint
	} else {
		e.cfg.Endpoint = moto.URL
	}
	if mut != nil {
		mut(&e.cfg)
	}
	all, err := p.Offerings(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var offs []capacity.Offering
	for _, name := range offerings {
		for _, o := range all {
			if o.Name() == name {
				offs = append(offs, o)
			}
		}
	}
	if len(offs) != len(offerings) {
		t.Fatalf("offerings %v not all in %v", offerings, all)
	}
	e.ctlCfg = controller.Config{
		Pool:              "gpu",
		Reconcile:         reconcile.Config{Nodes: capacity.Elastic(0, 200)},
		Offerings:         offs,
		Bootstrap:         []byte(`{"version":1,"head":"http://10.0.0.1:8000","token":"t0k3n"}`),
		ControllerID:      "ctl-a",
		ReconcileInterval: 10 * time.Second,
		LaunchTimeout:     10 * time.Minute,
		CapacityBackoff:   5 * time.Minute,
	}
	e.ctl = e.newController()
	return e
}

func (e *ctlEnv) newController() *controller.Controller {
	e.t.Helper()
	ctl, err := controller.New(e.ctlCfg, controller.Deps{Provider: e.wrap, Journal: e.journal,
		Workload: controller.IdleWorkload{}, Clock: e.clk, Logger: slog.New(slog.DiscardHandler), Events: e.events})
	if err != nil {
		e.t.Fatal(err)
	}
	return ctl
}

// restart replaces the provider (a fresh process: no memory of what it
// launched) and the controller, on the same journal and emulator.
func (e *ctlEnv) restart() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	p, err := awsprov.New(ctx, e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.prov, e.wrap = p, p
	e.ctl = e.newController()
}

func (e *ctlEnv) setDesired(n int) {
	e.ctl.SetDesired(policy.Decision{Desired: n, Reason: policy.NewReason("test", "test asks for %d", int64(n))})
}

// tick settles the provider (finished deletes, the interruption queue) and
// runs one controller pass, one reconcile interval later.
func (e *ctlEnv) tick() error {
	e.clk.Advance(e.ctlCfg.ReconcileInterval)
	if err := e.prov.Sync(e.ctx); err != nil {
		return err
	}
	return e.ctl.Tick(e.ctx)
}

// live returns the pool's instances EC2 does not show terminated.
func (e *ctlEnv) live() []types.Instance {
	var out []types.Instance
	for _, in := range instancesOf(e.t, ec2Client(e.t, e.endpoint), e.cfg.Name, "") {
		if in.State.Name != types.InstanceStateNameTerminated && in.State.Name != types.InstanceStateNameShuttingDown {
			out = append(out, in)
		}
	}
	return out
}

// converged reports whether the pool holds exactly want joined nodes and
// EC2 runs exactly those instances, none launched twice for one machine id.
func (e *ctlEnv) converged(want int) error {
	st := e.ctl.Status()
	if st.Desired != want || st.Current != want || st.Pending != 0 || st.State != "watching" || len(st.Deleting) > 0 {
		return fmt.Errorf("controller: state %s desired %d current %d pending %d deleting %v", st.State, st.Desired, st.Current, st.Pending, st.Deleting)
	}
	live := e.live()
	if len(live) != want {
		return fmt.Errorf("EC2 runs %d instances of the pool, want %d", len(live), want)
	}
	seen := map[string]bool{}
	for _, in := range instancesOf(e.t, ec2Client(e.t, e.endpoint), e.cfg.Name, "") {
		id := tagOf(in, "tide:machine-id")
		if seen[id] {
			return fmt.Errorf("machine %s was launched twice", id)
		}
		seen[id] = true
	}
	return nil
}

// tickUntil ticks until converged on want, at most max times.
func (e *ctlEnv) tickUntil(want, max int) int {
	e.t.Helper()
	var err error
	for i := 1; i <= max; i++ {
		if terr := e.tick(); terr != nil && !provider.IsTransient(terr) {
			e.t.Fatalf("tick %d: %v\n%s", i, terr, e.events.tail())
		}
		if err = e.converged(want); err == nil {
			return i
		}
	}
	e.t.Fatalf("not converged on %d after %d ticks: %v\nevents:\n%s", want, max, err, e.events.tail())
	return 0
}

func tagOf(in types.Instance, key string) string {
	for _, t := range in.Tags {
		if t.Key != nil && *t.Key == key && t.Value != nil {
			return *t.Value
		}
	}
	return ""
}
