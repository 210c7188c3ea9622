package up

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

const consolidationPool = `pools:
  - name: cons
    provider: {type: local}
    nodes: [0, 3]
    offerings:
      - {type: local-2cpu, cpu: 2, memory: 2Gi, price: 0.10}
    scaling: {policy: tide, idle_timeout: 3s, cooldown: 2s, batch_window: 500ms, reconcile_interval: 1s}
    disruption: {every: 1s, budgets: [{nodes: 1}]}
`

// TestConsolidationMovesRestartableWork runs real worker processes: a
// node runs a non-restartable instance with a core to spare, a second node
// runs only a restartable instance. Consolidation cordons the second node,
// ends the restartable instance's attempt there (MOVED_BY_CONSOLIDATION),
// its next attempt runs on the first node, and the emptied node is drained
// and deleted; the non-restartable instance runs throughout at attempt 1.
func TestConsolidationMovesRestartableWork(t *testing.T) {
	r := startUp(t, consolidationPool)
	// Two one-core instances fill one two-core node.
	keep := r.submit(1, "sleep 600", 1, nil)
	filler := r.submit(1, "sleep 600", 1, nil)
	r.eventually("the first node runs both", 60*time.Second, func() (bool, string) {
		st := r.statuses(append(keep, filler...))
		return st["RUNNING"] == 2, fmt.Sprint(st)
	})
	first := *r.instance(keep[0]).AssignedTo
	if w := r.instance(filler[0]).AssignedTo; w == nil || *w != first {
		t.Fatalf("the two instances run on %s and %v; want one node", first, w)
	}
	// The restartable one needs a second node.
	moving := r.submit(1, "sleep 600", 1, func(req *httpapi.SubmitRequest) { req.Restartable = new(true) })
	r.eventually("the restartable instance runs on a second node", 60*time.Second, func() (bool, string) {
		in := r.instance(moving[0])
		return in.Status == "RUNNING" && in.AssignedTo != nil && *in.AssignedTo != first, fmt.Sprintf("%+v", in)
	})
	second := *r.instance(moving[0]).AssignedTo
	// Free a core on the first node: the restartable instance now fits
	// there, and its node can go.
	if _, err := r.cl.Cancel(context.Background(), filler[0], nil); err != nil {
		t.Fatal(err)
	}
	r.eventually("the restartable instance moves to the first node", 60*time.Second, func() (bool, string) {
		in := r.instance(moving[0])
		return in.Status == "RUNNING" && in.Attempt == 2 && in.AssignedTo != nil && *in.AssignedTo == first,
			fmt.Sprintf("status %s attempt %d on %v", in.Status, in.Attempt, in.AssignedTo)
	})
	r.eventually("the emptied node is removed", 60*time.Second, func() (bool, string) {
		for _, n := range r.nodes("cons") {
			if n.ID == second {
				return false, fmt.Sprintf("%s is %s", second, n.State)
			}
		}
		p := r.pool("cons")
		return p.Ready == 1 && p.Draining == 0, fmt.Sprintf("%+v", p)
	})
	if in := r.instance(keep[0]); in.Status != "RUNNING" || in.Attempt != 1 || *in.AssignedTo != first {
		t.Fatalf("the non-restartable instance was disturbed: %s attempt %d on %v", in.Status, in.Attempt, in.AssignedTo)
	}
	evs, err := r.cl.Events(context.Background(), client.EventOptions{Limit: httpapi.MaxEventLimit})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Reason == "consolidate" {
			found = true
			if !strings.Contains(e.Message, second) || !strings.Contains(e.Message, moving[0]) ||
				!strings.Contains(e.Message, "saves $") || !strings.Contains(e.Message, "MOVED_BY_CONSOLIDATION") {
				t.Errorf("consolidate event says %q", e.Message)
			}
		}
	}
	if !found {
		t.Fatalf("no consolidate event\n%s", r.events())
	}
}
