package sim

import (
	"testing"
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/trace"
)

// TestPeersReleaseEmptyNodesAsDocumented replays one 8-GPU job of an hour
// under the peers: Karpenter consolidates the emptied node at its next
// disruption poll (consolidateAfter 0 s), Cluster Autoscaler only after the
// node is unneeded for 10 minutes, so CA bills about 10 minutes more.
func TestPeersReleaseEmptyNodesAsDocumented(t *testing.T) {
	cfg := mustConfig(t, gpuPool)
	w := jobsWorkload(t, cfg, []trace.Job{gpuJob(0, time.Hour, 8, 1)})
	k := mustRun(t, cfg, w, policy.Karpenter, 1)
	ca := mustRun(t, cfg, w, policy.ClusterAutoscaler, 1)
	for _, r := range []*Result{k, ca} {
		if r.Unfinished != 0 || r.Disrupted != 0 || r.Machines != 1 {
			t.Fatalf("%s: %d unfinished, %d disrupted, %d machines; want 0, 0, 1", r.Policy, r.Unfinished, r.Disrupted, r.Machines)
		}
	}
	extra := time.Duration((ca.NodeHours - k.NodeHours) * float64(time.Hour))
	if extra < 9*time.Minute || extra > 11*time.Minute {
		t.Errorf("cluster-autoscaler billed %s more than karpenter (%.4f against %.4f node-hours); want about 10 min",
			extra.Round(time.Second), ca.NodeHours, k.NodeHours)
	}
	t.Logf("karpenter %.4f node-hours, p50 %.0f s; cluster-autoscaler %.4f, p50 %.0f s", k.NodeHours, k.WaitP50, ca.NodeHours, ca.WaitP50)
	// Karpenter's node goes within a poll and a reconcile tick of the job's end.
	if over := time.Duration(k.NodeHours*float64(time.Hour)) - time.Hour - 100*time.Second; over > time.Minute {
		t.Errorf("karpenter billed %s beyond the boot and the job", over.Round(time.Second))
	}
}

// TestNodeHoursBreakdown: the billed node-hours split into the time nodes
// ran work, sat empty in the cluster (IdleNodeHours) and were billed
// outside it (OutsideNodeHours: boot, configure, delete). One 8-GPU job
// of an hour: about an hour of work; cluster-autoscaler's node sits empty
// for its 10-minute unneeded time, karpenter's for under a poll and a
// tick, skyward's for its 60 s idle timeout counted from the last time its
// loop saw the job running (at most an evaluation tick before the end),
// and not from the job's start, the last change the simulator saw.
func TestNodeHoursBreakdown(t *testing.T) {
	cfg := mustConfig(t, gpuPool)
	w := jobsWorkload(t, cfg, []trace.Job{gpuJob(0, time.Hour, 8, 1)})
	for _, tc := range []struct {
		pol              string
		idleMin, idleMax time.Duration
	}{
		{policy.Karpenter, 0, 30 * time.Second},
		{policy.ClusterAutoscaler, 9 * time.Minute, 12 * time.Minute},
		{policy.Skyward, 50 * time.Second, 60*time.Second + 2*15*time.Second},
	} {
		r := mustRun(t, cfg, w, tc.pol, 1)
		idle := time.Duration(r.IdleNodeHours * float64(time.Hour))
		outside := time.Duration(r.OutsideNodeHours * float64(time.Hour))
		busy := time.Duration((r.NodeHours - r.IdleNodeHours - r.OutsideNodeHours) * float64(time.Hour))
		t.Logf("%s: %.4f node-hours: busy %s, idle %s, outside %s", tc.pol, r.NodeHours, busy.Round(time.Second),
			idle.Round(time.Second), outside.Round(time.Second))
		if idle < tc.idleMin || idle > tc.idleMax {
			t.Errorf("%s: idle %s, want %s to %s", tc.pol, idle, tc.idleMin, tc.idleMax)
		}
		if busy < time.Hour-time.Minute || busy > time.Hour+time.Minute {
			t.Errorf("%s: busy %s, want about the job's hour", tc.pol, busy)
		}
		if outside <= 0 || outside > 5*time.Minute {
			t.Errorf("%s: outside the cluster %s, want the boot and the delete (a few minutes)", tc.pol, outside)
		}
	}
}
