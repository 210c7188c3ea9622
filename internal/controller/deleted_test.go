package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/sdk/provider"
)

// goneWorkload is a fakeWorkload that is also a Forgetter and a
// DeletionObserver, and records those calls in order.
type goneWorkload struct {
	*fakeWorkload
	mu    sync.Mutex
	calls []string
}

func (w *goneWorkload) Forget(_ context.Context, n controller.Node) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, "forget "+n.MachineID)
	return nil
}

func (w *goneWorkload) MachineDeleted(_ context.Context, n controller.Node) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, fmt.Sprintf("deleted %s (node %d, pool %s)", n.MachineID, n.ID, n.Pool))
	return nil
}

func (w *goneWorkload) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// TestMachineDeletedOnlyWhenConfirmed: the controller tells a
// DeletionObserver that a machine is deleted once, and only when the
// provider confirms it (Delete answers NotFound): not when the node is
// drained, not when it is forgotten, not while the accepted Delete is
// still under way. A machine that disappears on its own (a hardware loss)
// is confirmed by the first Delete. The head's fence-hold release relies
// on this.
func TestMachineDeletedOnlyWhenConfirmed(t *testing.T) {
	e := newEnv(t, setup{})
	w := &goneWorkload{fakeWorkload: e.work}
	ctl, err := controller.New(e.cfg, controller.Deps{Provider: e.rec, Journal: e.journal, Workload: w, Clock: e.clk,
		Events: e.events})
	if err != nil {
		t.Fatal(err)
	}
	e.ctl = ctl
	e.setDesired(2)
	e.tickUntil(2, 5)
	st := e.ctl.Status()
	scaled, lost := st.Nodes[1].MachineID, st.Nodes[0].MachineID
	gone := func(id string) bool {
		_, err := e.cloud.Get(e.ctx, id)
		return provider.IsNotFound(err)
	}

	// Scale-down: drain, forget, Delete (15 s in this cloud), NotFound.
	e.setDesired(1)
	forgotten := false
	for i := 0; i < 10 && !gone(scaled); i++ {
		if slices.Contains(w.log(), "deleted "+scaled+" (node 1, pool gpu)") {
			t.Fatalf("told deleted while machine %s still exists\n%s", scaled, e.events.tail(10))
		}
		forgotten = forgotten || slices.Contains(w.log(), "forget "+scaled)
		e.mustTick()
	}
	if !forgotten {
		t.Fatalf("machine %s was never forgotten before it was gone: %v", scaled, w.log())
	}
	for i := 0; i < 3 && !slices.Contains(w.log(), "deleted "+scaled+" (node 1, pool gpu)"); i++ {
		e.mustTick()
	}
	want := []string{"forget " + scaled, "deleted " + scaled + " (node 1, pool gpu)"}
	if got := w.log(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v\n%s", got, want, e.events.tail(10))
	}

	// A machine lost without notice: forgotten, then its Delete finds it
	// gone at once.
	if err := e.cloud.Lose(lost); err != nil {
		t.Fatal(err)
	}
	e.mustTick()
	want = append(want, "forget "+lost, "deleted "+lost+" (node 0, pool gpu)")
	if got := w.log(); !slices.Equal(got[:min(len(got), len(want))], want) {
		t.Fatalf("calls %v, want %v first\n%s", got, want, e.events.tail(10))
	}
}
