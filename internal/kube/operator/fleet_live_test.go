package operator_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/fleet/etcdtest"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// startTide runs the test binary as `tide args...`, its output to a log
// printed when the test fails, killed when the test ends.
func startTide(t *testing.T, name string, args ...string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), asTide+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log tail:\n%s", name, b)
		}
	})
}

// TestLiveFleetNodePool: a NodePool whose machines come from the fleet tier.
// Pending pods make the pool claim machines; the fleet's shard (local
// provider) picks them and asks tide kube for each machine's join
// credential; they join as Nodes with providerID tide://fleet/<machine> and
// the pods are bound there. When the pods go, the machines go back to the
// fleet (not deleted: the shard keeps them Idle), their credentials are
// revoked and their Nodes removed.
func TestLiveFleetNodePool(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	bin := machinesRunTide(t) // the shard's machines run this binary too
	etcd := etcdtest.Start(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	coord := lis.Addr().String()
	lis.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(conf, []byte(`{
  "offerings": [{"provider": "here", "profile": "l4", "offering": {"type": "l4", "cpu": 4, "memory": "8Gi", "price": 1}}],
  "providers": [{"name": "here", "type": "local"}],
  "shards": [{"id": 1, "quota": [{"provider": "here", "offering": "l4/on-demand", "count": 3}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startTide(t, "coordinator", "fleet", "coordinator", "--etcd", etcd.Endpoint(), "--listen", coord, "--config", conf,
		"--interval", "500ms", "--lease-ttl", "2s")
	time.Sleep(time.Second) // the coordinator writes the configuration before the shard reads it
	shardDir := filepath.Join(dir, "shard")
	startTide(t, "shard", "fleet", "shard", "--etcd", etcd.Endpoint(), "--shard", "1", "--data-dir", shardDir,
		"--interval", "250ms", "--lease-ttl", "2s")

	l.nodePool(t, "kfl", fmt.Sprintf(`{"nodes":{"min":0,"max":3},
  "provider":{"type":"fleet","options":{"coordinator":%q,"cluster":"kube","priority":10,"period":"500ms"}},
  "offerings":[{"type":"l4","cpu":"4","memory":"8Gi","price":1}],
  "node_labels":{"tier":"fleet"}}`, coord))
	l.runOperatorWith(t, operator.Options{Identity: "kfl", Pools: []string{"kfl"}, LocalRoot: t.TempDir(),
		NodeBinary: bin, NodeHeartbeat: time.Second})

	l.cpuPods(t, "kfl", "fleet", 2)
	began := time.Now()
	nodes := l.boundNodes(t, "kfl", "kfl", 2, 2*time.Minute)
	t.Logf("2 fleet machines joined as Nodes and got the pods bound in %v", time.Since(began).Round(time.Millisecond))
	for _, n := range nodes {
		if want := operator.ProviderID("fleet", n.Name); n.Spec.ProviderID != want {
			t.Errorf("Node %s: providerID %q, want %q", n.Name, n.Spec.ProviderID, want)
		}
	}
	machines := func() int {
		ents, _ := os.ReadDir(filepath.Join(shardDir, "here", "machines"))
		return len(ents)
	}
	if n := machines(); n != 2 {
		t.Errorf("the shard's provider made %d machines, want 2", n)
	}

	for i := range 2 {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("kfl-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "kfl"))
		sas, err := l.cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		return n == 0 && len(sas.Items) == 0, fmt.Sprintf("%d Nodes, %d machine ServiceAccounts left", n, len(sas.Items))
	})
	if n := machines(); n != 2 {
		t.Errorf("after the scale-down the shard has %d machines, want its 2 (kept Idle for the next cluster)", n)
	}
}
