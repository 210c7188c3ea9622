package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/agent"
	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/head"
)

// jumpClock is the wall clock plus an offset that the test steps, as NTP
// or an operator stepping a machine's clock would. Timers and the
// monotonic clock (Elapsed) stay real, as a step leaves them.
type jumpClock struct{ off atomic.Int64 }

var _ clock.Clock = (*jumpClock)(nil)

func (c *jumpClock) Now() time.Time                         { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) NewTimer(d time.Duration) clock.Timer   { return clock.Real{}.NewTimer(d) }
func (c *jumpClock) NewTicker(d time.Duration) clock.Ticker { return clock.Real{}.NewTicker(d) }
func (c *jumpClock) jump(d time.Duration)                   { c.off.Add(int64(d)) }
func (c *jumpClock) Elapsed() time.Duration                 { return clock.Real{}.Elapsed() }

// TestClockJumps steps the head's clock and a worker's clock (through the
// injected clock: the head and one worker run in this process, a second
// worker is a real process) by an hour forward and back while instances
// run. Every instance must still end exactly once, COMPLETED (as
// checkEndedOnce checks), and no step may cost anything: no worker seen
// OFFLINE, no instance UNKNOWN or re-run. The head judges worker silence on
// its monotonic clock (issue 16; before, a forward step of its wall clock
// past offline-after made every worker look silent, and the next liveness
// check marked them OFFLINE, their restart-"never" instances UNKNOWN and
// their on-failure ones re-run). The worker's clock drives only its timers
// and log retention.
func TestClockJumps(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	cl := newCluster(t)
	hclk, wclk := &jumpClock{}, &jumpClock{}
	ctx, cancel := context.WithCancel(context.Background())
	headDone := make(chan error, 1)
	listening := make(chan net.Addr, 1)
	go func() {
		headDone <- head.Run(ctx, head.Config{Addr: fmt.Sprintf("127.0.0.1:%d", cl.headPort), DataDir: cl.headDir, Token: token,
			PollTimeout: time.Second, SuspectAfter: 11 * time.Second, OfflineAfter: 12 * time.Second,
			LivenessInterval: 250 * time.Millisecond, SchedulerInterval: 500 * time.Millisecond, Clock: hclk,
			OnListen: func(a net.Addr) { listening <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-headDone:
			if err != nil {
				t.Errorf("head: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("head did not stop")
		}
	})
	select {
	case <-listening:
	case err := <-headDone:
		t.Fatalf("head: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("head did not listen")
	}
	cl.startWorker("w1", 25500)
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(ctx, agent.Config{HeadURL: fmt.Sprintf("http://127.0.0.1:%d", cl.headPort), Name: "w2",
			JoinToken: token, DataDir: filepath.Join(cl.dir, "w2"), Resources: capacity.Resources{MilliCPU: 4000, Memory: 8 << 30},
			LogAddr: "127.0.0.1:0", PortMin: 25600, PortMax: 25699, RetryMax: 200 * time.Millisecond,
			DefaultGracePeriod: 2 * time.Second, StopOnExit: true, Clock: wclk})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-agentDone:
		case <-time.After(20 * time.Second):
			t.Error("in-process worker did not stop")
		}
	})
	cl.waitFor(20*time.Second, "w2 online", func() (bool, string) {
		w, err := cl.c.Worker(context.Background(), "w2")
		return err == nil && w.Status == "ONLINE", fmt.Sprint(w, err)
	})

	runs := filepath.Join(cl.dir, "clock-runs.log")
	steps := []struct {
		name string
		clk  *jumpClock
		d    time.Duration
	}{
		{"head +1h", hclk, time.Hour},
		{"head -1h", hclk, -time.Hour},
		{"worker +1h", wclk, time.Hour},
		{"worker -1h", wclk, -time.Hour},
	}
	for i, st := range steps {
		phase := fmt.Sprintf("clock%d", i)
		var ids []string
		policy := map[string]string{}
		for j := range 8 {
			restart := "never"
			if j%2 == 1 {
				restart = "on-failure"
			}
			cmd := fmt.Sprintf(`echo "start $TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %s; sleep 3; echo "end $TIDE_INSTANCE_ID $TIDE_ATTEMPT" >> %s`, runs, runs)
			id := cl.submit(spec{cmd: cmd, cpu: 0.5, restart: restart, target: []string{"w1", "w2"}[j%4/2],
				labels: map[string]string{"phase": phase}})
			ids = append(ids, id)
			policy[id] = restart
		}
		// All started (on a loaded machine some may already be done).
		cl.waitFor(20*time.Second, phase+" started", func() (bool, string) {
			c := cl.countByStatus(phase)
			return c["PENDING"]+c["ASSIGNED"] == 0, fmt.Sprint(c)
		})
		st.clk.jump(st.d)
		offline, unknown := map[string]bool{}, map[string]bool{}
		cl.waitFor(40*time.Second, phase+" instances all ended", func() (bool, string) {
			for _, w := range []string{"w1", "w2"} {
				if ww, err := cl.c.Worker(context.Background(), w); err == nil && ww.Status == "OFFLINE" {
					offline[w] = true
				}
			}
			c := map[string]int{}
			for _, id := range ids {
				in := cl.get(id)
				c[in.Status]++
				if in.Status == "UNKNOWN" {
					unknown[id] = true
				}
			}
			return c["COMPLETED"]+c["FAILED"]+c["CANCELLED"] == len(ids), fmt.Sprint(c)
		})
		cl.waitFor(20*time.Second, "no instance process left", func() (bool, string) {
			for _, n := range []string{"w1", "w2"} {
				for k, pid := range pidsOf(t, filepath.Join(cl.dir, n)) {
					if alive(pid) {
						return false, k + " alive on " + n
					}
				}
			}
			return true, ""
		})
		rerun, _, _ := checkEndedOnce(t, cl, runs, ids, policy, st.name)
		t.Logf("%s: %d instances ended once, COMPLETED; workers seen OFFLINE %d, instances seen UNKNOWN %d, re-run %d",
			st.name, len(ids), len(offline), len(unknown), rerun)
		if len(offline) > 0 || len(unknown) > 0 || rerun > 0 {
			t.Errorf("%s: the clock step cost something: %d workers OFFLINE, %d instances UNKNOWN, %d re-run", st.name, len(offline), len(unknown), rerun)
		}
		if t.Failed() {
			t.FailNow()
		}
		cl.waitFor(30*time.Second, "both workers ONLINE", func() (bool, string) {
			for _, w := range []string{"w1", "w2"} {
				if ww, err := cl.c.Worker(context.Background(), w); err != nil || ww.Status != "ONLINE" {
					return false, fmt.Sprint(w, ww, err)
				}
			}
			return true, ""
		})
	}
}
