package reconcile

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

var (
	propSeed  = flag.Uint64("reconcile.seed", 0, "run the property test with this seed only (0: seeds 1..reconcile.runs)")
	propRuns  = flag.Int("reconcile.runs", 300, "how many seeds the property test runs")
	propSteps = flag.Int("reconcile.steps", 400, "random events per seed")
)

// TestPropertyRandomEvents drives pools with random event sequences from a
// simulated environment (provider, pool actor, scheduler) and checks the
// package guarantees after every step, then lets the environment settle and
// checks that the pool converges to its desired size. A failure prints the
// seed and the last events; rerun one seed with -reconcile.seed=N.
func TestPropertyRandomEvents(t *testing.T) {
	seeds := []uint64{*propSeed}
	if *propSeed == 0 {
		seeds = seeds[:0]
		for s := 1; s <= *propRuns; s++ {
			seeds = append(seeds, uint64(s))
		}
	}
	for _, seed := range seeds {
		w, err := newWorld(seed)
		if err == nil {
			err = w.run(*propSteps)
		}
		if err != nil {
			t.Fatalf("seed %d (rerun: go test -run TestPropertyRandomEvents -reconcile.seed=%d): %v\nconfig: %+v\nlast events:\n%s\npool:\n%s",
				seed, seed, err, w.cfg, w.tail(25), w.p.Describe())
		}
	}
}

// TestPropertyCheckerCatchesViolations makes sure the harness can fail: a pool
// whose state is corrupted behind its back must be caught.
func TestPropertyCheckerCatchesViolations(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(w *world)
		ev      Event
		want    string
	}{
		{"busy node drained", func(w *world) {
			w.p.busy.del(3) // the pool forgets node 3 is busy; the world knows
		}, DesiredChanged{Desired: 0}, "drain of a busy node"},
		{"id in use provisioned", func(w *world) {
			w.p.desired = 5
			w.p.current.del(3) // the pool forgets a node: it will provision an id in use
		}, Tick{}, "which is in use"},
		{"beyond need", func(w *world) {
			w.m[9] = &machine{joined: true} // a node the pool does not count
			w.p.desired = 5
		}, Tick{}, "provisions beyond need"},
		{"protected node drained", func(w *world) {
			w.p.cfg.ProtectFirstNode = false
		}, DesiredChanged{Desired: 0}, "protected first node"},
		{"busy node terminated", func(w *world) {
			w.p.draining.add(3) // the pool drains a busy node behind the world's back
			w.m[3].draining = true
		}, DrainComplete{ID: 3}, "terminate of a busy node"},
		{"terminate without drain", func(w *world) {
			w.p.draining.add(2) // the world never drained node 2
		}, DrainComplete{ID: 2}, "terminate without DrainComplete"},
		{"sets disagree", func(w *world) {
			w.p.pending.add(7) // and counts it, so it is no excess to cancel
			w.p.desired = 5
		}, Tick{}, "pool pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{rng: rand.New(rand.NewPCG(1, 1)), now: base, m: map[NodeID]*machine{}, drainDone: map[NodeID]bool{}}
			w.cfg = Config{Nodes: capacity.NodeSpec{Min: 0, Desired: 4, Max: 6, Elastic: true}, ProtectFirstNode: true}
			var err error
			if w.p, err = New(w.cfg); err != nil {
				t.Fatal(err)
			}
			for id := range NodeID(4) {
				w.m[id] = &machine{joined: true, busy: id == 3}
			}
			if err := w.step(Adopt{Current: []NodeID{0, 1, 2, 3}, Busy: []NodeID{3}}); err != nil {
				t.Fatalf("adopt: %v", err)
			}
			tt.corrupt(w)
			err = w.step(tt.ev)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// machine is the environment's truth about one node.
type machine struct {
	joined, busy, draining bool
}

// world is a simulated environment around one Pool. It answers the pool's
// actions the way a driver would, and checks every action and state against
// its own truth.
type world struct {
	rng *rand.Rand
	cfg Config
	p   *Pool
	now time.Time

	m         map[NodeID]*machine
	call      []NodeID        // the outstanding Provision, nil if none
	drainDone map[NodeID]bool // DrainComplete sent, Terminate now allowed
	want      int             // the last desired count sent (unclamped)
	log       []string
}

func newWorld(seed uint64) (*world, error) {
	w := &world{
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:       base,
		m:         map[NodeID]*machine{},
		drainDone: map[NodeID]bool{},
	}
	w.cfg = Config{Nodes: w.randomSpec(), ProtectFirstNode: w.rng.IntN(2) == 0}
	if w.rng.IntN(2) == 0 {
		w.cfg.ScaleDownDelay = time.Duration(20+w.rng.IntN(70)) * time.Second
	}
	var err error
	w.p, err = New(w.cfg)
	if err != nil {
		return w, err
	}
	w.want = w.p.Desired()
	return w, nil
}

func (w *world) randomSpec() capacity.NodeSpec {
	if w.rng.IntN(5) == 0 {
		return capacity.Fixed(w.rng.IntN(5))
	}
	lo := w.rng.IntN(4)
	hi := max(lo, 1) + w.rng.IntN(6)
	s := capacity.Elastic(lo, hi)
	s.Desired = lo + w.rng.IntN(hi-lo+1)
	return s
}

func (w *world) pick(pred func(*machine) bool) (NodeID, bool) {
	var ids []NodeID
	for id, m := range w.m {
		if pred(m) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, false
	}
	slices.Sort(ids)
	return ids[w.rng.IntN(len(ids))], true
}

func (w *world) run(steps int) error {
	if err := w.step(Tick{}); err != nil {
		return err
	}
	for range steps {
		w.now = w.now.Add(time.Duration(w.rng.IntN(6)) * time.Second)
		ev := w.randomEvent()
		if ev == nil {
			continue
		}
		if err := w.step(ev); err != nil {
			return err
		}
		if _, ok := ev.(Adopt); ok {
			// The restarted controller is told the desired count again.
			if err := w.step(DesiredChanged{Desired: w.want, Reason: "after restart"}); err != nil {
				return err
			}
		}
	}
	return w.settle()
}

func (w *world) randomEvent() Event {
	spec := w.p.Config().Nodes
	r := w.rng.IntN(100)
	switch {
	case r < 14:
		w.want = spec.Min - 1 + w.rng.IntN(spec.Max-spec.Min+3)
		return DesiredChanged{Desired: w.want, Reason: "random"}
	case r < 26:
		w.now = w.now.Add(15 * time.Second)
		return Tick{}
	case r < 40:
		if w.call == nil {
			return nil
		}
		if w.rng.IntN(4) == 0 {
			return ProvisionFailed{Err: "injected"}
		}
		var got []NodeID
		for _, id := range w.call {
			if w.rng.IntN(3) > 0 {
				got = append(got, id)
			}
		}
		w.rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		return Provisioned{IDs: got}
	case r < 54:
		if id, ok := w.pick(func(m *machine) bool { return !m.joined }); ok {
			return NodeJoined{ID: id}
		}
	case r < 60:
		if id, ok := w.pick(func(*machine) bool { return true }); ok {
			return NodeLost{ID: id}
		}
	case r < 74:
		// Dispatch stopped on draining nodes; rarely, work still lands (race).
		if id, ok := w.pick(func(m *machine) bool { return m.joined && (!m.draining || w.rng.IntN(10) == 0) }); ok {
			return NodeBusy{ID: id, Busy: !w.m[id].busy}
		}
	case r < 90:
		if id, ok := w.pick(func(m *machine) bool { return m.draining && !m.busy }); ok {
			return DrainComplete{ID: id}
		}
	case r < 94:
		return BoundsChanged{Nodes: w.randomSpec()}
	case r < 96:
		if err := w.restart(); err != nil {
			w.log = append(w.log, "restart failed: "+err.Error())
			return nil
		}
		return Adopt{Current: w.ids(func(m *machine) bool { return m.joined }),
			Pending: w.ids(func(m *machine) bool { return !m.joined }),
			Busy:    w.ids(func(m *machine) bool { return m.busy })}
	}
	return nil
}

// restart simulates a controller restart: a new Pool with the bounds in force;
// the old provision call is abandoned (it created nothing) and drains end.
func (w *world) restart() error {
	cfg := w.p.Config()
	p, err := New(cfg)
	if err != nil {
		return err
	}
	w.p, w.call = p, nil
	w.drainDone = map[NodeID]bool{}
	for _, m := range w.m {
		m.draining = false
	}
	w.log = append(w.log, "restart")
	return nil
}

func (w *world) ids(pred func(*machine) bool) []NodeID {
	var ids []NodeID
	for id, m := range w.m {
		if pred(m) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// step applies the event's effect on the world, steps the pool, carries out
// and checks its actions, then checks the pool's state.
func (w *world) step(ev Event) error {
	switch ev := ev.(type) {
	case Provisioned:
		for _, id := range ev.IDs {
			w.m[id] = &machine{}
		}
		w.call = nil
	case ProvisionFailed:
		w.call = nil
	case NodeJoined:
		w.m[ev.ID].joined = true
	case NodeLost:
		delete(w.m, ev.ID)
	case NodeBusy:
		w.m[ev.ID].busy = ev.Busy
	case DrainComplete:
		if m := w.m[ev.ID]; m != nil && m.draining {
			w.drainDone[ev.ID] = true
		}
	}
	acts := w.p.Step(w.now, ev)
	w.log = append(w.log, fmt.Sprintf("t=%s %s -> %s", w.now.Sub(base), ev, actionsText(acts)))
	for _, a := range acts {
		if err := w.apply(a, ev); err != nil {
			return fmt.Errorf("after %s: %s: %w", ev, a, err)
		}
	}
	if dc, ok := ev.(DrainComplete); ok {
		if _, alive := w.m[dc.ID]; alive {
			return fmt.Errorf("after %s: drained node %d was not terminated", ev, dc.ID)
		}
	}
	if err := w.check(); err != nil {
		return fmt.Errorf("after %s: %w", ev, err)
	}
	return nil
}

func actionsText(acts []Action) string {
	if len(acts) == 0 {
		return "nothing"
	}
	parts := make([]string, len(acts))
	for i, a := range acts {
		parts[i] = a.String()
	}
	return strings.Join(parts, "; ")
}

// protected uses the world's config, so a pool that lost the flag is caught.
func (w *world) protected(id NodeID) bool { return w.cfg.ProtectFirstNode && id == 0 }

// apply carries out one action in the world and checks it is allowed.
func (w *world) apply(a Action, ev Event) error {
	switch a := a.(type) {
	case Provision:
		if w.call != nil {
			return fmt.Errorf("a second Provision while %v is outstanding (double provisioning)", w.call)
		}
		for _, id := range a.IDs {
			if _, used := w.m[id]; used || id < 0 {
				return fmt.Errorf("provisions node %d, which is in use", id)
			}
		}
		if n := len(w.m) + len(a.IDs); n > w.p.Desired() || n > w.p.Config().Nodes.Max {
			return fmt.Errorf("provisions beyond need: %d alive + %d asked > desired %d (max %d)", len(w.m), len(a.IDs), w.p.Desired(), w.p.Config().Nodes.Max)
		}
		if len(a.IDs) == 0 {
			return errors.New("empty Provision")
		}
		w.call = slices.Clone(a.IDs)
	case Drain:
		m, ok := w.m[a.ID]
		switch {
		case !ok:
			return errors.New("drain of a node that does not exist")
		case m.busy:
			return errors.New("drain of a busy node")
		case m.draining:
			return errors.New("drain of a draining node")
		case w.protected(a.ID):
			return errors.New("drain of the protected first node")
		}
		m.draining = true
	case AbortDrain:
		m, ok := w.m[a.ID]
		if !ok || !m.draining {
			return errors.New("abort of a node that is not draining")
		}
		m.draining = false
	case Terminate:
		if lost, ok := ev.(NodeLost); !(ok && lost.ID == a.ID) && !w.drainDone[a.ID] {
			return errors.New("terminate without DrainComplete or NodeLost of the node")
		}
		if m, ok := w.m[a.ID]; ok && m.busy {
			return errors.New("terminate of a busy node")
		}
		delete(w.m, a.ID)
		delete(w.drainDone, a.ID)
	case Mark:
		for _, id := range a.IDs {
			m, ok := w.m[id]
			switch {
			case !ok || !m.joined:
				return fmt.Errorf("mark of node %d, which has not joined", id)
			case m.busy:
				return fmt.Errorf("mark of busy node %d", id)
			case w.protected(id):
				return fmt.Errorf("mark of the protected first node %d", id)
			}
		}
	case Unmark, Note:
	default:
		return fmt.Errorf("unknown action %T", a)
	}
	return nil
}

// check compares the pool's state with the world's truth and checks the
// state invariants.
func (w *world) check() error {
	p := w.p
	spec := p.Config().Nodes
	eq := func(name string, got, want []NodeID) error {
		if !slices.Equal(got, want) {
			return fmt.Errorf("pool %s %v, world %v", name, got, want)
		}
		return nil
	}
	if err := errors.Join(
		eq("current", p.Current(), w.ids(func(m *machine) bool { return m.joined })),
		eq("pending", p.Pending(), w.ids(func(m *machine) bool { return !m.joined })),
		eq("draining", p.Draining(), w.ids(func(m *machine) bool { return m.draining })),
		eq("busy", p.Busy(), w.ids(func(m *machine) bool { return m.busy })),
		eq("in flight", p.InFlight(), sortedIDs(w.call)),
	); err != nil {
		return err
	}
	if d := p.Desired(); d < spec.Min || d > spec.Max {
		return fmt.Errorf("desired %d outside [%d, %d]", d, spec.Min, spec.Max)
	}
	if got, want := p.drainingJoined(), p.countDrainingJoined(); got != want {
		return fmt.Errorf("the pool keeps %d draining nodes joined, a count finds %d", got, want)
	}
	if p.Effective() != len(w.m)+len(w.call) {
		return fmt.Errorf("effective %d, world has %d alive + %d in flight", p.Effective(), len(w.m), len(w.call))
	}
	if n := len(p.Draining()); n > 0 {
		if w.call != nil {
			return errors.New("draining while a provision call is in flight")
		}
		joined := w.ids(func(m *machine) bool { return m.joined && !m.draining })
		booting := w.ids(func(m *machine) bool { return !m.joined && !m.draining })
		if len(w.ids(func(m *machine) bool { return m.joined && m.draining })) > 0 {
			if kept := len(joined); kept < p.Desired() || kept < spec.Min {
				return fmt.Errorf("draining takes the pool to %d joined nodes, below desired %d / min %d", kept, p.Desired(), spec.Min)
			}
		}
		// A booting node is cancelled (drained) only while the joined and
		// booting nodes kept still make desired.
		if len(w.ids(func(m *machine) bool { return !m.joined && m.draining })) > 0 {
			if kept := len(joined) + len(booting); kept < p.Desired() || kept < spec.Min {
				return fmt.Errorf("cancelling booting nodes takes the pool to %d joined and booting nodes, below desired %d / min %d", kept, p.Desired(), spec.Min)
			}
		}
	}
	wantState := Watching
	switch {
	case len(p.Draining()) > 0:
		wantState = Draining
	case w.call != nil:
		wantState = ScalingUp
	}
	if p.State() != wantState {
		return fmt.Errorf("state %s, want %s", p.State(), wantState)
	}
	for id := range p.Marks() {
		m, ok := w.m[id]
		switch {
		case !ok || !m.joined:
			return fmt.Errorf("mark on node %d, which has not joined", id)
		case m.busy:
			return fmt.Errorf("mark on busy node %d", id)
		case w.protected(id):
			return fmt.Errorf("mark on the protected first node %d", id)
		}
	}
	return nil
}

// settle lets the world answer everything (full provisioning, every node
// joins and goes idle, drains complete, ticks pass the delay) and checks that
// the pool converges to its desired size, less nothing but a protected head.
func (w *world) settle() error {
	w.log = append(w.log, "settle")
	for range 50 {
		var evs []Event
		if w.call != nil {
			evs = append(evs, Provisioned{IDs: slices.Clone(w.call)})
		}
		for _, id := range w.ids(func(m *machine) bool { return !m.joined }) {
			evs = append(evs, NodeJoined{ID: id})
		}
		for _, id := range w.ids(func(m *machine) bool { return m.busy }) {
			evs = append(evs, NodeBusy{ID: id})
		}
		for _, ev := range evs {
			if err := w.step(ev); err != nil {
				return err
			}
		}
		for _, id := range w.ids(func(m *machine) bool { return m.draining }) {
			if err := w.step(DrainComplete{ID: id}); err != nil {
				return err
			}
		}
		w.now = w.now.Add(w.cfg.ScaleDownDelay + 15*time.Second)
		if err := w.step(Tick{}); err != nil {
			return err
		}
		want := w.p.Desired()
		if want == 0 && w.protected(0) && w.m[0] != nil {
			want = 1
		}
		if w.call == nil && len(w.p.Pending()) == 0 && len(w.p.Draining()) == 0 &&
			len(w.p.Marks()) == 0 && len(w.p.Current()) == want {
			return nil
		}
	}
	return fmt.Errorf("did not converge: desired %d, current %v, pending %v, draining %v, marks %d",
		w.p.Desired(), w.p.Current(), w.p.Pending(), w.p.Draining(), len(w.p.Marks()))
}

func (w *world) tail(n int) string {
	return strings.Join(w.log[max(0, len(w.log)-n):], "\n")
}
