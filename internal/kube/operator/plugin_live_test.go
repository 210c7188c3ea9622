package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/operator"
)

// TestLivePluginMachinesJoin: a NodePool whose provider is a plugin, a
// subprocess (`tide provider serve-local`, the local provider served over
// the plugin protocol) that tide kube starts from the NodePool's options,
// as tide head does. Pending pods make tide create and configure machines
// through the plugin; the plugin's machines get the join document in the
// bootstrap slot of Configure, run `tide worker --bootstrap -`, which turns
// into the Node agent, and register their Nodes with providerID
// tide://plugin/<machine>, the pool's labels and taints, Ready; the pods
// are bound there. Scaled to 0, the credentials are revoked, the machines
// deleted through the plugin (their processes are gone) and the Nodes
// removed. In the same cluster, a sim NodePool is refused (Ready=False,
// ProviderCannotJoin), a netns NodePool without --local-root too
// (InvalidSpec), a plugin NodePool whose plugin does not start is
// ProviderUnavailable, and none of them gets a Node.
func TestLivePluginMachinesJoin(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	bin := machinesRunTide(t)
	off := `[{"type":"p4","cpu":"4","memory":"8Gi","price":1}]`
	command, err := json.Marshal([]string{bin, "provider", "serve-local", "--root", t.TempDir(), "--offerings", off})
	if err != nil {
		t.Fatal(err)
	}
	l.nodePool(t, "plg", `{"nodes":{"min":0,"max":4},"provider":{"type":"plugin","options":{"command":`+string(command)+`}},
  "offerings":`+off+`,"node_labels":{"tier":"plugin"},"node_taints":[{"key":"dedicated","value":"plugin","effect":"NoSchedule"}]}`)
	l.nodePool(t, "simp", `{"nodes":{"min":0,"max":4},"provider":{"type":"sim"},"offerings":[{"type":"s4","cpu":"4","price":1}],
  "node_labels":{"tier":"sim"}}`)
	l.nodePool(t, "nsp", `{"nodes":{"min":0,"max":4},"provider":{"type":"netns"},"offerings":[{"type":"n4","cpu":"4","price":1}],
  "node_labels":{"tier":"netns"}}`)
	l.nodePool(t, "gone", `{"nodes":{"min":0,"max":4},"provider":{"type":"plugin","options":{"command":["/nonexistent/tide-plugin"]}},
  "offerings":[{"type":"g4","cpu":"4","price":1}],"node_labels":{"tier":"gone"}}`)
	l.runOperatorWith(t, operator.Options{Identity: "plg", Pools: []string{"plg", "simp", "nsp", "gone"}, NodeBinary: bin, NodeHeartbeat: time.Second})

	l.cpuPods(t, "plg", "plugin", 2,
		corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "plugin", Effect: corev1.TaintEffectNoSchedule})
	began := time.Now()
	nodes := l.boundNodes(t, "plg", "plg", 2, 3*time.Minute)
	t.Logf("2 plugin machines joined as Nodes and got the pods bound in %v", time.Since(began).Round(time.Millisecond))
	for _, n := range nodes {
		if want := operator.ProviderID("plugin", n.Name); n.Spec.ProviderID != want {
			t.Errorf("Node %s: providerID %q, want %q", n.Name, n.Spec.ProviderID, want)
		}
		if n.Labels["tier"] != "plugin" {
			t.Errorf("Node %s: labels %v lack the pool's tier=plugin", n.Name, n.Labels)
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
			return tt.Key == "dedicated" && tt.Value == "plugin" && tt.Effect == corev1.TaintEffectNoSchedule
		}) {
			t.Errorf("Node %s: taints %v lack the pool's dedicated=plugin:NoSchedule", n.Name, n.Spec.Taints)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.Reason == nodeagent.ReadyReason
		}
		if !ready {
			t.Errorf("Node %s: not Ready by the node agent: %+v", n.Name, n.Status.Conditions)
		}
	}
	if procs := machineProcs(t, nodes[0].Name); len(procs) == 0 {
		t.Fatalf("no process runs machine %s", nodes[0].Name)
	}

	// The refused pools: a clear reason, and no Node.
	for pool, reason := range map[string]string{"simp": "ProviderCannotJoin", "nsp": "InvalidSpec", "gone": "ProviderUnavailable"} {
		kubetest.Eventually(t, time.Minute, func() (bool, string) {
			c := readyCondition(l.status(t, pool))
			return c["status"] == "False" && c["reason"] == reason, fmt.Sprintf("NodePool %s: Ready %v, want False/%s", pool, c, reason)
		})
		msg := readyCondition(l.status(t, pool))["message"].(string)
		t.Logf("NodePool %s refused: %s", pool, msg)
		if pool == "nsp" && !strings.Contains(msg, "--local-root") {
			t.Errorf("NodePool nsp: message %q does not say what is missing (--local-root)", msg)
		}
		if n := len(l.poolNodes(t, pool)); n != 0 {
			t.Errorf("refused NodePool %s has %d Nodes", pool, n)
		}
	}

	// Scale to 0: credentials revoked, machines deleted through the
	// plugin, Nodes removed.
	name := nodes[0].Name
	mc := l.machineClient(t, "tide-node-"+name)
	for i := range 2 {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("plg-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	began = time.Now()
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "plg"))
		sas, err := l.cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		procs := 0
		for _, nd := range nodes {
			procs += len(machineProcs(t, nd.Name))
		}
		return n == 0 && len(sas.Items) == 0 && procs == 0,
			fmt.Sprintf("%d Nodes, %d machine ServiceAccounts, %d machine processes left", n, len(sas.Items), procs)
	})
	t.Logf("scaled down: credentials revoked, machines deleted through the plugin, Nodes removed in %v", time.Since(began).Round(time.Millisecond))
	revoked(t, mc, name)
	deadline := time.Now().Add(3 * time.Second) // three heartbeats of a surviving agent
	for time.Now().Before(deadline) {
		if n := len(l.poolNodes(t, "plg")); n != 0 {
			t.Fatalf("%d Nodes came back after the scale-down", n)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// readyCondition is the Ready condition of a NodePool status (nil: none).
func readyCondition(status map[string]any) map[string]any {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m
		}
	}
	return nil
}

// machineProcs lists the processes of this test that run machine id: a
// `tide worker --name <id>`.
func machineProcs(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 1 && args[0] == os.Args[0] && args[1] == "worker" && slices.Contains(args, id) {
			out = append(out, d.Name())
		}
	}
	return out
}
