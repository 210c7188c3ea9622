package up

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mixedPool sells two sizes of local machines: a cheap one-CPU node and a
// four-CPU node.
const mixedPool = `pools:
  - name: mixed
    provider: {type: local}
    nodes: [0, 6]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.05}
      - {type: local-4cpu, cpu: 4, memory: 4Gi, price: 0.3}
    scaling: {policy: tide, idle_timeout: 4s, batch_window: 500ms, reconcile_interval: 1s}
`

// TestMixedSizesLaunchWhatTheWorkRunsOn is issue 15's pool of several node
// types, live: three-CPU work on a pool of a one-CPU and a four-CPU offering
// launches four-CPU machines only (before, the controller launched the
// cheapest offering, on which the work can never run, up to the max), every
// instance completes, and the events say which offering was launched and
// why, and what the purchase cost against its bound.
func TestMixedSizesLaunchWhatTheWorkRunsOn(t *testing.T) {
	r := startUp(t, mixedPool)
	ids := r.submit(6, "sleep 1", 3, nil)
	r.eventually("all 6 instances complete", 90*time.Second, func() (bool, string) {
		st := r.statuses(ids)
		p := r.pool("mixed")
		return st["COMPLETED"] == 6, fmt.Sprintf("%v, pool ready %d desired %d", st, p.Ready, p.Desired)
	})
	evs := r.events()
	if strings.Contains(evs, "from local-1cpu") {
		t.Errorf("a one-CPU machine was launched for three-CPU work:\n%s", evs)
	}
	for _, want := range []string{"launched from local-4cpu/on-demand", "the purchase's choice", "x local-4cpu/on-demand for $", "of the bound"} {
		if !strings.Contains(evs, want) {
			t.Errorf("no event mentions %q:\n%s", want, evs)
		}
	}
	r.stop()
	if n := workerProcesses(r.dir); n != 0 {
		t.Errorf("%d processes of this run still alive after Ctrl-C", n)
	}
}
